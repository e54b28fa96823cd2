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
//   OIDC_WORKLOAD_JWT_FILE  where to write a workload's JWT (ES256, `aud` the issuer, 10 min)
//                        for the RFC 7523 JWT-bearer grant (workload identity, SEP-1933).
//                        oidc-provider has no such grant: a middleware in front of /token
//                        checks the assertion (signature by this run's workload key, `aud`,
//                        `exp`) and hands the request on as the provider's own
//                        client_credentials grant for the same client, so the token comes from
//                        the provider's machinery (resource indicator, JWT format, DPoP binding)
//   OIDC_ID_TOKEN_FILE   where to write a user's ID token (for the IdP client `idp-client`) for
//                        enterprise-managed authorization (SEP-990): the same middleware plays
//                        the enterprise IdP's token exchange (RFC 8693: that ID token for an
//                        ID-JAG naming this issuer and the resource), and the ID-JAG is then
//                        taken by the JWT-bearer grant above
// Prints `listening on http://127.0.0.1:PORT` on stdout once ready.
import { appendFileSync, writeFileSync } from 'node:fs';
import * as crypto from 'node:crypto';
import * as querystring from 'node:querystring';
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
if (process.env.OIDC_WORKLOAD_CLIENT_ID) {
  clients.push({
    client_id: process.env.OIDC_WORKLOAD_CLIENT_ID,
    client_secret: process.env.OIDC_WORKLOAD_CLIENT_SECRET,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: RS_SCOPES,
  });
}
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

// Workload identity: this run's workload key and its JWT.
const JWT_BEARER = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
const workloadKey = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const b64u = (b) => Buffer.from(b).toString('base64url');
// A JWT signed with this run's key (the workload's, the IdP's: one key stands for both).
function mint(typ, claims) {
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64u(JSON.stringify({ alg: 'ES256', typ }))}.${b64u(JSON.stringify({ iat: now, exp: now + 600, ...claims }))}`;
  const sig = crypto.sign('sha256', Buffer.from(input), { key: workloadKey.privateKey, dsaEncoding: 'ieee-p1363' });
  const jwt = `${input}.${b64u(sig)}`;
  if (tokensFile) appendFileSync(tokensFile, `minted ${jwt}\n`);
  return jwt;
}
if (process.env.OIDC_WORKLOAD_JWT_FILE) {
  const jwt = mint('JWT', { iss: 'https://workload.interop.test', sub: 'workload-1', aud: issuer });
  writeFileSync(process.env.OIDC_WORKLOAD_JWT_FILE, `${jwt}\n`, { mode: 0o600 });
}
if (process.env.OIDC_ID_TOKEN_FILE) {
  const jwt = mint('JWT', { iss: issuer, sub: 'user-1', aud: 'idp-client' });
  writeFileSync(process.env.OIDC_ID_TOKEN_FILE, `${jwt}\n`, { mode: 0o600 });
}
// The claims of `jwt` if this run's key signed it, for audience `aud`, not expired.
function minted(jwt, aud) {
  const parts = String(jwt || '').split('.');
  if (parts.length !== 3) return null;
  const ok = crypto.verify('sha256', Buffer.from(`${parts[0]}.${parts[1]}`),
    { key: workloadKey.publicKey, dsaEncoding: 'ieee-p1363' }, Buffer.from(parts[2], 'base64url'));
  if (!ok) return null;
  const c = JSON.parse(Buffer.from(parts[1], 'base64url').toString());
  return c.aud === aud && c.exp > Date.now() / 1000 ? c : null;
}
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ID_JAG = 'urn:ietf:params:oauth:token-type:id-jag';

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
      grant_type: ctx.state.grantAs || p.grant_type,
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

// The JWT-bearer grant (see OIDC_WORKLOAD_JWT_FILE): checked here, then handed on as
// client_credentials. Runs inside the accounting middleware above, so its event names the
// grant the client asked for.
provider.use(async (ctx, next) => {
  if (ctx.path !== '/token' || ctx.method !== 'POST' || !ctx.is('application/x-www-form-urlencoded')) {
    return next();
  }
  const chunks = [];
  for await (const c of ctx.req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString();
  const form = querystring.parse(raw);
  if (form.grant_type === TOKEN_EXCHANGE) {
    ctx.state.grantAs = TOKEN_EXCHANGE;
    const user = minted(form.subject_token, 'idp-client');
    const asked = form.requested_token_type === ID_JAG
      && form.subject_token_type === 'urn:ietf:params:oauth:token-type:id_token'
      && form.client_id === 'idp-client' && form.audience === issuer && knownResource(form.resource);
    if (!user || !asked) {
      ctx.status = 400;
      ctx.body = { error: user ? 'invalid_request' : 'invalid_grant', error_description: 'not an ID-JAG request this IdP takes' };
      return undefined;
    }
    const jag = mint('oauth-id-jag+jwt', { iss: issuer, sub: user.sub, aud: issuer, resource: form.resource, client_id: process.env.OIDC_WORKLOAD_CLIENT_ID });
    ctx.body = { access_token: jag, issued_token_type: ID_JAG, token_type: 'N_A', expires_in: 600 };
    return undefined;
  }
  if (form.grant_type === JWT_BEARER) {
    ctx.state.grantAs = JWT_BEARER;
    if (!minted(form.assertion, issuer)) {
      ctx.status = 400;
      ctx.body = { error: 'invalid_grant', error_description: 'the assertion is not a valid workload JWT' };
      return undefined;
    }
    form.grant_type = 'client_credentials';
    delete form.assertion;
  }
  ctx.req.body = querystring.stringify(form);
  return next();
});

provider.on('server_error', (_ctx, err) => console.error('server_error', err));
provider.on('grant.error', (_ctx, err) => console.error('grant.error', err.message, err.error_description || ''));
provider.on('registration_create.error', (_ctx, err) => console.error('registration error', err.message, err.error_description || ''));
provider.on('authorization.error', (_ctx, err) => console.error('authorization.error', err.message, err.error_description || ''));

provider.listen(port, '127.0.0.1', () => {
  console.log(`listening on ${issuer}`);
});
