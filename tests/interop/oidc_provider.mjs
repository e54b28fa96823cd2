// A real OpenID provider for .ci/interop-oidc.sh: npm `oidc-provider` (v9, ESM) on
// 127.0.0.1:PORT, issuer http://127.0.0.1:PORT, with the features `mcp-bridge connect` uses:
// dynamic registration (RFC 7591), PKCE S256 required for every client, resource indicators
// (RFC 8707: an access token asked for a resource http://127.0.0.1:*/… is a JWT, `aud` = that
// resource, signed with the keys at jwks_uri), the device flow (RFC 8628), client credentials,
// refresh tokens (issued for every code grant, rotated). Scopes: openid offline_access
// mcp:tools mcp:admin (mcp:* are the resource server's). The login and consent pages are the
// library's dev interactions (any login + any password).
//
//   node oidc_provider.mjs          (NODE_PATH-less: run it with its node_modules beside it, see
//                                    the script, or set OIDC_PROVIDER_MODULE to the package dir)
// Env:
//   OIDC_PORT            port (required)
//   OIDC_TOKEN_TTL       access token lifetime in seconds (default 20)
//   OIDC_EVENTS          file to append one JSON line per event to (token endpoint answers with
//                        grant_type / client / scope / resource, registrations, authorization
//                        requests, device authorizations). Tokens are NOT written here.
//   OIDC_TOKENS          file to append every issued access/refresh token to (one a line), so the
//                        test can check none of them shows up in the bridge's output
//   OIDC_CC_CLIENT_ID, OIDC_CC_CLIENT_SECRET
//                        a static confidential client allowed the client_credentials grant
// Prints `listening on http://127.0.0.1:PORT` on stdout once ready.
import { appendFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const modDir = process.env.OIDC_PROVIDER_MODULE;
const { default: Provider, errors } = await import(
  modDir ? pathToFileURL(join(modDir, 'lib', 'index.js')).href : 'oidc-provider'
);

const port = Number(process.env.OIDC_PORT);
if (!port) {
  console.error('OIDC_PORT is required');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const ttl = Number(process.env.OIDC_TOKEN_TTL || 20);
const eventsFile = process.env.OIDC_EVENTS;
const tokensFile = process.env.OIDC_TOKENS;
const RS_SCOPES = 'mcp:tools mcp:admin';

function event(obj) {
  if (!eventsFile) return;
  appendFileSync(eventsFile, `${JSON.stringify({ t: Date.now() / 1000, ...obj })}\n`);
}
function token(kind, value) {
  if (tokensFile && typeof value === 'string' && value) appendFileSync(tokensFile, `${kind} ${value}\n`);
}
// A resource indicator this provider knows: any http(s) URL on the loopback (the bridge's
// serve endpoints, whose ports the test picks).
function knownResource(r) {
  try {
    const u = new URL(r);
    return ['127.0.0.1', 'localhost'].includes(u.hostname) && !u.hash;
  } catch {
    return false;
  }
}

const clients = [];
if (process.env.OIDC_CC_CLIENT_ID) {
  clients.push({
    client_id: process.env.OIDC_CC_CLIENT_ID,
    client_secret: process.env.OIDC_CC_CLIENT_SECRET,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: RS_SCOPES,
  });
}

const provider = new Provider(issuer, {
  clients,
  cookies: { keys: ['interop-oidc-cookie-key-not-secret'] },
  scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  claims: { openid: ['sub'] },
  pkce: { required: () => true },
  // DPoP (RFC 9449) needs no feature flag in oidc-provider 9: a token request with a proof gets
  // a token bound to its key (serve checks the proofs).
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    clientCredentials: { enabled: true },
    deviceFlow: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // One resource asked at authorization: use it at the token endpoint (and on refresh) too.
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => {
        if (!knownResource(resource)) throw new errors.InvalidTarget();
        return {
          scope: RS_SCOPES,
          audience: resource,
          accessTokenTTL: ttl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  // A refresh token for every code grant (not only with offline_access), rotated on use.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: true,
  ttl: {
    AccessToken: ttl,
    ClientCredentials: ttl,
    AuthorizationCode: 60,
    DeviceCode: 120,
    Grant: 3600,
    Interaction: 600,
    Session: 3600,
    RefreshToken: 3600,
    IdToken: 3600,
  },
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
});
provider.proxy = false;

// Account for each request the test cares about, and keep every token issued.
provider.use(async (ctx, next) => {
  const path = ctx.path;
  await next();
  const p = ctx.oidc?.params || {};
  const body = ctx.body && typeof ctx.body === 'object' && !Buffer.isBuffer(ctx.body) ? ctx.body : {};
  if (path === '/token') {
    token('access', body.access_token);
    token('refresh', body.refresh_token);
    token('id', body.id_token);
    event({
      kind: 'token',
      status: ctx.status,
      grant_type: p.grant_type,
      client_id: ctx.oidc?.client?.clientId,
      resource: p.resource,
      scope_asked: p.scope,
      scope: body.scope,
      error: body.error,
      error_description: body.error_description,
      access_token_jwt: typeof body.access_token === 'string' && body.access_token.split('.').length === 3,
      refresh_token: Boolean(body.refresh_token),
      expires_in: body.expires_in,
      auth: ctx.get('authorization') ? ctx.get('authorization').split(' ')[0] : undefined,
      token_type: body.token_type,
      dpop_proof: Boolean(ctx.get('dpop')),
    });
  } else if (path === '/reg' && ctx.method === 'POST') {
    event({ kind: 'register', status: ctx.status, client_id: body.client_id, application_type: body.application_type,
      grant_types: body.grant_types, redirect_uris: body.redirect_uris, token_endpoint_auth_method: body.token_endpoint_auth_method,
      scope: body.scope, error: body.error, error_description: body.error_description });
  } else if (path === '/auth') {
    event({ kind: 'authorize', status: ctx.status, client_id: p.client_id, scope: p.scope, resource: p.resource,
      code_challenge_method: p.code_challenge_method, redirect_uri: p.redirect_uri, prompt: p.prompt });
  } else if (path === '/device/auth') {
    event({ kind: 'device_authorization', status: ctx.status, client_id: ctx.oidc?.client?.clientId, scope: p.scope, resource: p.resource, error: body.error });
  } else if (path.startsWith('/interaction/') && ctx.method === 'POST') {
    event({ kind: 'interaction', path: path.replace(/\/interaction\/[^/]+/, '/interaction/:uid'), status: ctx.status });
  }
});

provider.on('server_error', (_ctx, err) => console.error('server_error', err));
provider.on('grant.error', (_ctx, err) => console.error('grant.error', err.message, err.error_description || ''));
provider.on('registration_create.error', (_ctx, err) => console.error('registration error', err.message, err.error_description || ''));
provider.on('authorization.error', (_ctx, err) => console.error('authorization.error', err.message, err.error_description || ''));

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening on ${issuer}`);
});
