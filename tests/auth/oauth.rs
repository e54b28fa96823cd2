//! `connect`'s OAuth login end to end: a host drives `connect` against `serve --auth jwt`
//! (which publishes its Protected Resource Metadata), whose tokens come from a tiny
//! authorization server written here (metadata, dynamic registration, an `/authorize` that
//! redirects straight back with a code, a `/token` that checks the PKCE verifier and the
//! `resource`, and refresh). `$BROWSER` is a script that follows the redirect with curl.
//! Checked: the call gets its answer; the login is kept private (0700 folder, 0600 file) and
//! out of the log; a second run uses the stored login; an expired or rejected token is
//! refreshed; a refused refresh starts a new login; a login that cannot finish is one clear
//! error for the call that needed it.
//!
//! The logins without a browser use the same server: a device authorization endpoint (answers
//! `authorization_pending`, then `slow_down`, then the token; or `access_denied`), and the
//! client credentials grant (a secret by Basic or in the body, as the metadata says, or a
//! `private_key_jwt` assertion verified against the client's public key). The step-up runs
//! against `serve --required-scope`, which answers 403 `insufficient_scope`.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use sha2::Digest;

use support::*;

const T: Duration = Duration::from_secs(60);

/// What the authorization server saw and issued.
#[derive(Default)]
struct AsState {
    base: String,
    /// The MCP server's canonical URL: the `resource` and the tokens' audience.
    resource: Mutex<String>,
    authorizations: AtomicUsize,
    refreshes: AtomicUsize,
    registrations: AtomicUsize,
    /// Refuse refresh tokens (`invalid_grant`).
    refuse_refresh: AtomicBool,
    /// code -> (PKCE challenge, redirect_uri, scope)
    codes: Mutex<HashMap<String, (String, String, String)>>,
    /// refresh token -> the scope it was issued with
    refresh_tokens: Mutex<HashMap<String, String>>,
    /// Every access and refresh token handed out (none may reach a log).
    issued: Mutex<Vec<String>>,
    /// The `scope` of every authorization, device or client credentials request.
    asked_scopes: Mutex<Vec<String>>,
    /// Grant only these scopes (None: any asked for).
    grantable: Mutex<Option<Vec<String>>>,
    /// Advertise the device authorization endpoint.
    device: AtomicBool,
    /// Refuse device logins (`access_denied`).
    deny_device: AtomicBool,
    /// device code -> (user code, scope, client id, times polled); and when each poll came.
    device_codes: Mutex<HashMap<String, (String, String, String, usize)>>,
    polls: Mutex<Vec<Instant>>,
    /// Every user code handed out (on stderr, never on stdout).
    user_codes: Mutex<Vec<String>>,
    /// Secrets that must never reach stdout or the log: device codes, the client secret.
    secrets: Mutex<Vec<String>>,
    /// Client credentials: the secret of client `m2m`, the public JWKs of key clients, how
    /// each grant authenticated, and whether the metadata offers only `client_secret_post`.
    client_secret: Mutex<String>,
    client_keys: Mutex<HashMap<String, Value>>,
    cc_auth: Mutex<Vec<String>>,
    post_only: AtomicBool,
    /// What went wrong at the server (the test asserts it stays empty).
    errors: Mutex<Vec<String>>,
    /// A 2025-03-26 server: `serve` behind this one at `/mcp` (no PRM here), its 401 challenge
    /// replaced by this one (None: no `WWW-Authenticate` at all).
    upstream: Mutex<Option<String>>,
    challenge: Mutex<Option<String>>,
    /// The issuer the metadata names (None: the base); no metadata at all.
    issuer: Mutex<Option<String>>,
    no_meta: AtomicBool,
    /// Do not insist on the `--oauth-param` (a connect without OAuth flags).
    lax_extra: AtomicBool,
    /// Advertise Client ID Metadata Documents; the client id of every authorization.
    cimd: AtomicBool,
    client_ids: Mutex<Vec<String>>,
    /// Registrations get a secret and `client_secret_post` (Basic is refused then).
    confidential: AtomicBool,
    reg_secret: Mutex<String>,
    /// RFC 9207: advertise `authorization_response_iss_parameter_supported` and send this
    /// `iss` in the authorization response (None: neither; Some(None): advertised, not sent).
    iss: Mutex<Option<Option<String>>>,
    /// The JWT-bearer grant ([`grants`]): the assertions it takes, every one presented, and
    /// the error it answers with instead (None: a token for a known assertion).
    assertions_ok: Mutex<Vec<String>>,
    assertions: Mutex<Vec<String>>,
    assertion_error: Mutex<Option<String>>,
    /// SEP-990: the ID token the IdP at `/idp` takes, and every token exchange it got.
    id_token: Mutex<String>,
    exchanges: Mutex<Vec<HashMap<String, String>>>,
    /// Advertise DPoP (`dpop_signing_alg_values_supported`), and the path of every request
    /// that carried a `DPoP` proof.
    dpop_algs: AtomicBool,
    dpop_seen: Mutex<Vec<String>>,
    /// The RFC 7638 thumbprint of the key that proved the token request being answered: the
    /// token issued is bound to it (`cnf.jkt`, `token_type` DPoP).
    bind_to: Mutex<Option<String>>,
}

#[path = "oauth_grants.rs"]
mod grants;

struct AuthServer {
    state: Arc<AsState>,
}

fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn reply(status: u16, body: Value) -> (u16, Vec<(&'static str, String)>, String) {
    (
        status,
        vec![("content-type", "application/json".into())],
        body.to_string(),
    )
}

impl AuthServer {
    async fn start(key: TestKey) -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(AsState {
            base,
            ..AsState::default()
        });
        let key = Arc::new(key);
        let (st, k) = (state.clone(), key.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let (st, k) = (st.clone(), k.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (st, k) = (st.clone(), k.clone());
                            async move {
                                use http_body_util::BodyExt;
                                let path = req.uri().path().to_owned();
                                let query = req.uri().query().unwrap_or("").to_owned();
                                let authz = req
                                    .headers()
                                    .get("authorization")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_owned();
                                if let Some(p) = req.headers().get("dpop") {
                                    st.dpop_seen.lock().unwrap().push(path.clone());
                                    let jkt = grants::proof_key(p.to_str().unwrap_or(""));
                                    *st.bind_to.lock().unwrap() = jkt;
                                }
                                let upstream = st.upstream.lock().unwrap().clone();
                                if let Some(up) = upstream.filter(|_| path == "/mcp") {
                                    return Ok(proxy(&st, &up, req).await);
                                }
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let (status, headers, text) =
                                    answer(&st, &k, &path, query.as_bytes(), &authz, &body);
                                let mut r = hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(text))
                                        .map_err(|e| match e {})
                                        .boxed(),
                                );
                                *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                for (name, v) in headers {
                                    r.headers_mut().insert(name, v.parse().unwrap());
                                }
                                Ok::<_, std::convert::Infallible>(r)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        AuthServer { state }
    }

    fn count(&self, c: &AtomicUsize) -> usize {
        c.load(Ordering::SeqCst)
    }
}

type Boxed =
    http_body_util::combinators::BoxBody<bytes::Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A 2025-03-26 MCP server: `serve` at `up`, seen without its PRM and with the challenge of
/// `st.challenge` on a 401.
async fn proxy(
    st: &AsState,
    up: &str,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Boxed> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let c = reqwest::Client::new();
    let mut r = c.request(parts.method.clone(), up).body(body);
    for (k, v) in &parts.headers {
        if k != "host" && k != "content-length" {
            r = r.header(k, v);
        }
    }
    let resp = r.send().await.unwrap();
    let mut out: hyper::Response<reqwest::Body> = resp.into();
    if out.status() == 401 {
        out.headers_mut().remove("www-authenticate");
        if let Some(c) = st.challenge.lock().unwrap().clone() {
            out.headers_mut()
                .insert("www-authenticate", c.parse().unwrap());
        }
    }
    out.headers_mut().remove("content-length");
    out.headers_mut().remove("transfer-encoding");
    out.map(|b| b.map_err(Into::into).boxed())
}

fn random(prefix: &str) -> String {
    let mut rnd = [0u8; 16];
    getrandom::fill(&mut rnd).unwrap();
    format!("{prefix}-{}", b64(&rnd))
}

/// A token for `asked` (space-separated; empty: `mcp:tools`), cut to what is grantable; with a
/// refresh token unless `machine`.
fn issue(st: &AsState, key: &TestKey, asked: &str, machine: bool) -> Value {
    let t = now();
    let asked = if asked.trim().is_empty() {
        "mcp:tools"
    } else {
        asked
    };
    let scope: Vec<&str> = asked
        .split_whitespace()
        .filter(|s| {
            st.grantable
                .lock()
                .unwrap()
                .as_ref()
                .is_none_or(|g| g.iter().any(|x| x == s))
        })
        .collect();
    let scope = scope.join(" ");
    let mut claims = json!({
        "iss": st.base, "sub": "user-1", "aud": *st.resource.lock().unwrap(),
        "iat": t, "nbf": t - 5, "exp": t + 600, "scope": scope,
    });
    let bound = st.bind_to.lock().unwrap().take();
    if let Some(jkt) = &bound {
        claims["cnf"] = json!({ "jkt": jkt });
    }
    let access = key.token(&claims);
    st.issued.lock().unwrap().push(access.clone());
    let kind = if bound.is_some() { "DPoP" } else { "Bearer" };
    let mut doc = json!({"access_token": access, "token_type": kind, "expires_in": 3600,
                         "scope": scope});
    if !machine {
        let refresh = random("rt");
        st.refresh_tokens
            .lock()
            .unwrap()
            .insert(refresh.clone(), scope.clone());
        st.issued.lock().unwrap().push(refresh.clone());
        doc["refresh_token"] = json!(refresh);
    }
    doc
}

/// How a client credentials request authenticated, or why it did not.
fn client_auth(st: &AsState, authz: &str, f: &HashMap<String, String>) -> Result<String, String> {
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let token_url = format!("{}/token", st.base);
    if let Some(b) = authz.strip_prefix("Basic ") {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| e.to_string())?;
        let raw = String::from_utf8(raw).map_err(|e| e.to_string())?;
        let (id, secret) = raw.split_once(':').ok_or("no colon")?;
        let secret: String = url::form_urlencoded::parse(format!("s={secret}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        return if id == "m2m" && secret == *st.client_secret.lock().unwrap() {
            Ok("client_secret_basic".into())
        } else {
            Err(format!("bad Basic credentials for {id}"))
        };
    }
    if f.contains_key("client_secret") {
        return if get("client_id") == "m2m"
            && get("client_secret") == *st.client_secret.lock().unwrap()
        {
            Ok("client_secret_post".into())
        } else {
            Err("bad client_secret".into())
        };
    }
    if get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
        return Err("no client authentication".into());
    }
    let jwt = get("client_assertion");
    let header = jsonwebtoken::decode_header(&jwt).map_err(|e| e.to_string())?;
    let id = get("client_id");
    let Some(jwk) = st.client_keys.lock().unwrap().get(&id).cloned() else {
        return Err(format!("no key for client {id:?}"));
    };
    if header.kid.as_deref() != jwk["kid"].as_str() {
        return Err(format!("kid {:?}", header.kid));
    }
    let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwk).map_err(|e| e.to_string())?;
    let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?;
    let mut v = jsonwebtoken::Validation::new(header.alg);
    v.set_audience(&[&token_url]);
    v.set_issuer(&[&id]);
    v.sub = Some(id.clone());
    v.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    let c = jsonwebtoken::decode::<Value>(&jwt, &key, &v)
        .map_err(|e| format!("assertion: {e}"))?
        .claims;
    let life = c["exp"].as_i64().unwrap_or(i64::MAX) - now();
    if !(0..=300).contains(&life) || c["jti"].as_str().is_none_or(str::is_empty) {
        return Err(format!("assertion claims {c}"));
    }
    Ok(format!("private_key_jwt {:?}", header.alg))
}

fn answer(
    st: &AsState,
    key: &TestKey,
    path: &str,
    query: &[u8],
    authz: &str,
    body: &[u8],
) -> (u16, Vec<(&'static str, String)>, String) {
    let fail = |why: String| {
        st.errors.lock().unwrap().push(why.clone());
        reply(
            400,
            json!({"error": "invalid_request", "error_description": why}),
        )
    };
    match path {
        "/.well-known/oauth-authorization-server" if !st.no_meta.load(Ordering::SeqCst) => {
            let issuer = st.issuer.lock().unwrap().clone();
            let mut meta = json!({
                "issuer": issuer.unwrap_or_else(|| st.base.clone()),
                "authorization_endpoint": format!("{}/authorize", st.base),
                "token_endpoint": format!("{}/token", st.base),
                "registration_endpoint": format!("{}/register", st.base),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token",
                    "client_credentials", "urn:ietf:params:oauth:grant-type:device_code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported":
                    ["none", "client_secret_basic", "client_secret_post", "private_key_jwt"],
            });
            if st.post_only.load(Ordering::SeqCst) {
                meta["token_endpoint_auth_methods_supported"] =
                    json!(["none", "client_secret_post"]);
            }
            if st.device.load(Ordering::SeqCst) {
                meta["device_authorization_endpoint"] = json!(format!("{}/device", st.base));
            }
            if st.cimd.load(Ordering::SeqCst) {
                meta["client_id_metadata_document_supported"] = json!(true);
            }
            if st.iss.lock().unwrap().is_some() {
                meta["authorization_response_iss_parameter_supported"] = json!(true);
            }
            if st.dpop_algs.load(Ordering::SeqCst) {
                meta["dpop_signing_alg_values_supported"] = json!(["ES256", "RS256"]);
            }
            reply(200, meta)
        }
        "/register" => {
            let doc: Value = serde_json::from_slice(body).unwrap_or_default();
            let device = doc["grant_types"]
                .as_array()
                .is_some_and(|g| g.iter().any(|t| t == DEVICE_GRANT));
            // SEP-837: a loopback callback (and the device login) registers as `native`.
            if doc["token_endpoint_auth_method"] != "none"
                || (!device && !doc["redirect_uris"].is_array())
                || doc["application_type"] != "native"
            {
                return fail(format!("bad registration {doc}"));
            }
            let n = st.registrations.fetch_add(1, Ordering::SeqCst) + 1;
            if st.confidential.load(Ordering::SeqCst) {
                let secret = random("cs");
                st.secrets.lock().unwrap().push(secret.clone());
                *st.reg_secret.lock().unwrap() = secret.clone();
                return reply(
                    201,
                    json!({"client_id": format!("client-{n}"), "client_secret": secret,
                           "redirect_uris": doc["redirect_uris"],
                           "token_endpoint_auth_method": "client_secret_post"}),
                );
            }
            reply(
                201,
                json!({"client_id": format!("client-{n}"), "redirect_uris": doc["redirect_uris"],
                       "token_endpoint_auth_method": "none"}),
            )
        }
        "/authorize" => {
            let q = form(query);
            let get = |k: &str| q.get(k).cloned().unwrap_or_default();
            if get("response_type") != "code" || get("code_challenge_method") != "S256" {
                return fail(format!("bad authorization request {q:?}"));
            }
            let resource = st.resource.lock().unwrap().clone();
            if get("resource") != resource {
                return fail(format!("resource {:?} != {resource:?}", get("resource")));
            }
            if get("extra") != "yes" && !st.lax_extra.load(Ordering::SeqCst) {
                return fail("the --oauth-param did not arrive".into());
            }
            st.authorizations.fetch_add(1, Ordering::SeqCst);
            st.client_ids.lock().unwrap().push(get("client_id"));
            st.asked_scopes.lock().unwrap().push(get("scope"));
            let code = format!("code-{}", st.authorizations.load(Ordering::SeqCst));
            st.codes.lock().unwrap().insert(
                code.clone(),
                (get("code_challenge"), get("redirect_uri"), get("scope")),
            );
            let mut loc = url::Url::parse(&get("redirect_uri")).unwrap();
            loc.query_pairs_mut()
                .append_pair("code", &code)
                .append_pair("state", &get("state"));
            if let Some(Some(iss)) = st.iss.lock().unwrap().as_ref() {
                loc.query_pairs_mut().append_pair("iss", iss);
            }
            (302, vec![("location", loc.to_string())], String::new())
        }
        "/token" => {
            let f = form(body);
            let get = |k: &str| f.get(k).cloned().unwrap_or_default();
            if get("resource") != *st.resource.lock().unwrap() {
                return fail(format!("token resource {:?}", get("resource")));
            }
            let user =
                ["authorization_code", "refresh_token"].contains(&get("grant_type").as_str());
            if user && st.confidential.load(Ordering::SeqCst) {
                if authz.starts_with("Basic ") {
                    return fail("Basic from a client registered with client_secret_post".into());
                }
                if get("client_secret") != *st.reg_secret.lock().unwrap() {
                    return fail("no or a wrong client_secret in the body".into());
                }
            }
            match get("grant_type").as_str() {
                "authorization_code" => {
                    let Some((challenge, redirect, scope)) =
                        st.codes.lock().unwrap().remove(&get("code"))
                    else {
                        return reply(400, json!({"error": "invalid_grant"}));
                    };
                    let digest = sha2::Sha256::digest(get("code_verifier").as_bytes());
                    let want = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
                    if want != challenge || redirect != get("redirect_uri") {
                        return fail("PKCE verifier or redirect_uri mismatch".into());
                    }
                    reply(200, issue(st, key, &scope, false))
                }
                "refresh_token" => {
                    let scope = st
                        .refresh_tokens
                        .lock()
                        .unwrap()
                        .get(&get("refresh_token"))
                        .cloned();
                    let Some(scope) = scope.filter(|_| !st.refuse_refresh.load(Ordering::SeqCst))
                    else {
                        return reply(400, json!({"error": "invalid_grant"}));
                    };
                    st.refreshes.fetch_add(1, Ordering::SeqCst);
                    reply(200, issue(st, key, &scope, false))
                }
                DEVICE_GRANT => {
                    let mut codes = st.device_codes.lock().unwrap();
                    let Some(entry) = codes.get_mut(&get("device_code")) else {
                        return reply(400, json!({"error": "invalid_grant"}));
                    };
                    if entry.2 != get("client_id") {
                        return fail("the device code belongs to another client".into());
                    }
                    st.polls.lock().unwrap().push(Instant::now());
                    entry.3 += 1;
                    if st.deny_device.load(Ordering::SeqCst) {
                        return reply(400, json!({"error": "access_denied"}));
                    }
                    match entry.3 {
                        1 => reply(400, json!({"error": "authorization_pending"})),
                        2 => reply(400, json!({"error": "slow_down"})),
                        _ => {
                            let scope = entry.1.clone();
                            codes.remove(&get("device_code"));
                            reply(200, issue(st, key, &scope, false))
                        }
                    }
                }
                grants::JWT_BEARER => grants::jwt_bearer(st, key, authz, &f),
                "client_credentials" => match client_auth(st, authz, &f) {
                    Ok(how) => {
                        st.cc_auth.lock().unwrap().push(how);
                        st.asked_scopes.lock().unwrap().push(get("scope"));
                        reply(200, issue(st, key, &get("scope"), true))
                    }
                    Err(why) => fail(why),
                },
                other => fail(format!("grant_type {other:?}")),
            }
        }
        "/device" => {
            let f = form(body);
            let get = |k: &str| f.get(k).cloned().unwrap_or_default();
            if get("client_id").is_empty() {
                return fail("device request without client_id".into());
            }
            if get("resource") != *st.resource.lock().unwrap() {
                return fail(format!("device resource {:?}", get("resource")));
            }
            let (device_code, user_code) = (random("dc"), random("UC")[..12].to_owned());
            st.secrets.lock().unwrap().push(device_code.clone());
            st.user_codes.lock().unwrap().push(user_code.clone());
            st.asked_scopes.lock().unwrap().push(get("scope"));
            st.device_codes.lock().unwrap().insert(
                device_code.clone(),
                (user_code.clone(), get("scope"), get("client_id"), 0),
            );
            reply(
                200,
                json!({"device_code": device_code, "user_code": user_code,
                       "verification_uri": format!("{}/verify", st.base),
                       "verification_uri_complete":
                           format!("{}/verify?user_code={user_code}", st.base),
                       "expires_in": 120, "interval": 1}),
            )
        }
        "/idp/token" => grants::token_exchange(st, authz, &form(body)),
        "/idp/.well-known/openid-configuration" => reply(
            200,
            json!({"issuer": format!("{}/idp", st.base),
                   "token_endpoint": format!("{}/idp/token", st.base)}),
        ),
        _ => (404, vec![], String::new()),
    }
}

const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// A `$BROWSER` that follows the authorization redirect to the callback.
fn browser(dir: &Path) -> PathBuf {
    let p = dir.join("browser.sh");
    std::fs::write(
        &p,
        "#!/bin/sh\nexec curl -sfL --max-time 30 \"$1\" >/dev/null\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

struct World {
    auth: AuthServer,
    serve: Bridge,
    /// The URL connect is given (serve's, or the 2025-03-26 stand-in's).
    url: String,
    _jwks: JwksServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        World::start_with(&[]).await
    }

    /// With more `serve` flags (e.g. `--required-scope`).
    async fn start_with(serve_args: &[&str]) -> World {
        let key = TestKey::es256("as-key");
        let jwks_server = JwksServer::start(jwks(&[&key])).await;
        let auth = AuthServer::start(key).await;
        let serve = Bridge::builder()
            .log_level("debug")
            .serve()
            .args([
                "--demo",
                "--port",
                "0",
                "--auth",
                "jwt",
                "--jwks-url",
                &jwks_server.url,
                "--issuer",
                &auth.state.base,
            ])
            .args(serve_args)
            .spawn()
            .await;
        // The resource is known once `serve` listens; nothing asks for a token before this.
        *auth.state.resource.lock().unwrap() = serve.url.clone();
        World {
            auth,
            url: serve.url.clone(),
            serve,
            _jwks: jwks_server,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A 2025-03-26 server: the authorization server's origin also serves the MCP endpoint
    /// (`serve`, proxied at `/mcp`), with no Protected Resource Metadata anywhere.
    async fn start_legacy() -> World {
        let key = TestKey::es256("as-key");
        let jwks_server = JwksServer::start(jwks(&[&key])).await;
        let auth = AuthServer::start(key).await;
        let front = format!("{}/mcp", auth.state.base);
        let serve = Bridge::builder()
            .log_level("debug")
            .serve()
            .args([
                "--demo",
                "--port",
                "0",
                "--auth",
                "jwt",
                "--jwks-url",
                &jwks_server.url,
                "--issuer",
                &auth.state.base,
                "--audience",
                &front,
            ])
            .spawn()
            .await;
        *auth.state.resource.lock().unwrap() = front.clone();
        *auth.state.upstream.lock().unwrap() = Some(serve.url.clone());
        World {
            auth,
            serve,
            url: front,
            _jwks: jwks_server,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn oauth_dir(&self) -> PathBuf {
        self.dir.path().join("logins")
    }

    fn host(&self) -> Host {
        self.host_with(&[])
    }

    /// `connect` with the login folder, the `$BROWSER` stand-in, and `extra` flags.
    fn host_with(&self, extra: &[&str]) -> Host {
        let b = browser(self.dir.path());
        let d = self.oauth_dir();
        let mut args = vec![
            "--oauth-dir",
            d.to_str().unwrap(),
            "--oauth-param",
            "extra=yes",
        ];
        args.extend_from_slice(extra);
        Host::start_env(&self.url, &args, &[("BROWSER", b.to_str().unwrap())])
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    }

    /// The confidential client's `secret`, known to the authorization server (and checked
    /// for in every output): the path of a file holding it.
    fn client_secret(&self, secret: &str) -> String {
        let st = &self.auth.state;
        *st.client_secret.lock().unwrap() = secret.into();
        st.secrets.lock().unwrap().push(secret.into());
        self.file("secret", &format!("{secret}\n"))
    }

    /// The one login file (beside it: its lock file).
    fn login_file(&self) -> PathBuf {
        let files: Vec<_> = std::fs::read_dir(self.oauth_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }

    fn edit_login(&self, f: impl FnOnce(&mut Value)) {
        let p = self.login_file();
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&p, v.to_string()).unwrap();
    }
}

fn echo(h: &mut Host, id: i64, text: &str) -> Value {
    h.request(
        json!(id),
        "tools/call",
        modern_call_params("echo", json!({"text": text})),
    );
    h.response(&json!(id), T)
}

/// No token, device code or client secret in connect's log or on its stdout (the answers read
/// there, and no other line); no user code on stdout either.
fn assert_quiet(w: &World, h: &Host, answers: &[&Value]) {
    let st = &w.auth.state;
    let log = h.log.dump();
    let out: String = answers.iter().map(|a| a.to_string()).collect();
    let mut secrets = st.issued.lock().unwrap().clone();
    secrets.extend(st.secrets.lock().unwrap().iter().cloned());
    for t in &secrets {
        assert!(
            !log.contains(t.as_str()),
            "a secret in connect's log:\n{log}"
        );
        assert!(
            !out.contains(t.as_str()),
            "a secret on connect's stdout:\n{out}"
        );
    }
    for user_code in st.user_codes.lock().unwrap().iter() {
        assert!(!out.contains(user_code.as_str()), "{out}");
    }
    h.assert_clean_stdout();
}

fn assert_no_server_errors(w: &World) {
    let e = w.auth.state.errors.lock().unwrap();
    assert!(e.is_empty(), "{e:?}");
}

/// The private key of `k` as PKCS#8 PEM.
fn pem_of(k: &TestKey) -> String {
    use aws_lc_rs::encoding::AsDer;
    let der: Vec<u8> = match &k.signer {
        Signer::Es256(p) => p.to_pkcs8v1().unwrap().as_ref().to_vec(),
        Signer::Rs256(p) => AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(p)
            .unwrap()
            .as_ref()
            .to_vec(),
        Signer::EdDsa(_) => panic!("not a private_key_jwt key"),
    };
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<String> = b
        .as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        lines.join("\n")
    )
}

fn error_of(r: &Value) -> (String, String) {
    (
        r["error"]["data"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        r["error"]["message"].as_str().unwrap_or("").to_owned(),
    )
}

fn assert_no_secret(w: &World, h: &Host) {
    let log = h.log.dump();
    for t in w.auth.state.issued.lock().unwrap().iter() {
        assert!(
            !log.contains(t.as_str()),
            "a token in connect's log:\n{log}"
        );
    }
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_store_reuse_refresh_and_relogin() {
    let w = World::start().await;

    // 1. The first call logs in (metadata from serve's 401, registration, browser, code).
    let mut h = w.host();
    let r = echo(&mut h, 1, "first");
    assert_eq!(text(&r), "first", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_eq!(w.auth.count(&w.auth.state.registrations), 1);
    let r = echo(&mut h, 2, "again");
    assert_eq!(text(&r), "again", "{r}");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_no_secret(&w, &h);
    drop(h);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.oauth_dir()), 0o700);
    assert_eq!(mode(&w.login_file()), 0o600);
    let stored = std::fs::read_to_string(w.login_file()).unwrap();
    let v: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(v["version"], 1);
    assert!(v["token"]["expires_at"].as_u64().unwrap() > now() as u64);

    // 2. A second run uses the stored login: no authorization, no refresh.
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 3, "stored")), "stored");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 0);
    drop(h);

    // 3. A token past its expiry is refreshed before it is sent.
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 4, "refreshed")), "refreshed");
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 1);
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);

    // 4. A token the server rejects (401) is refreshed and the call retried, in the same run.
    drop(h);
    w.edit_login(|v| v["token"]["access_token"] = json!("not.a.jwt"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 5, "retried")), "retried");
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 2);
    drop(h);

    // 5. A refused refresh (invalid_grant) drops the token and logs in again.
    w.auth.state.refuse_refresh.store(true, Ordering::SeqCst);
    w.edit_login(|v| v["token"]["access_token"] = json!("not.a.jwt"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 6, "relogin")), "relogin");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 2);
    assert_eq!(
        w.auth.count(&w.auth.state.registrations),
        1,
        "the registration is reused"
    );
    assert_no_secret(&w, &h);
    assert!(
        w.auth.state.errors.lock().unwrap().is_empty(),
        "{:?}",
        w.auth.state.errors.lock().unwrap()
    );
}

/// Copies of connect started together (hosts do this) log in once: one holds the login lock,
/// registers and opens the browser, the others wait and use its tokens; and a token that two
/// copies see expire is refreshed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_started_together_log_in_and_refresh_once() {
    let w = World::start().await;
    let mut hosts: Vec<Host> = (0..3).map(|_| w.host()).collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        h.request(
            json!(i),
            "tools/call",
            modern_call_params("echo", json!({"text": format!("copy {i}")})),
        );
    }
    for (i, h) in hosts.iter_mut().enumerate() {
        let r = h.response(&json!(i), T);
        assert_eq!(text(&r), format!("copy {i}"), "{r}\n{}", h.log.dump());
        assert_no_secret(&w, h);
    }
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1, "one login");
    assert_eq!(
        w.auth.count(&w.auth.state.registrations),
        1,
        "one registration"
    );
    drop(hosts);

    // The stored token expired: copies started together refresh it once.
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut hosts: Vec<Host> = (0..3).map(|_| w.host()).collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        h.request(
            json!(i),
            "tools/call",
            modern_call_params("echo", json!({"text": "again"})),
        );
    }
    for (i, h) in hosts.iter_mut().enumerate() {
        assert_eq!(text(&h.response(&json!(i), T)), "again");
    }
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 1, "one refresh");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
}

/// `serve --upstream` (a daemon) uses a login `auth login` kept, never a browser: with the
/// login its clients' calls reach the protected server; without it they get an error that
/// says how to log in. The same from a config file's `[servers.NAME.oauth]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_upstream_uses_a_kept_login_and_never_a_browser() {
    let w = World::start().await;
    let d = w.oauth_dir();
    let b = browser(w.dir.path());
    let (url, dir, br) = (w.serve.url.clone(), d.clone(), b.clone());
    let out = tokio::task::spawn_blocking(move || {
        Bridge::builder()
            .sub(["auth", "login", &url, "--oauth-param", "extra=yes"])
            .arg("--oauth-dir")
            .arg(dir.as_os_str())
            .env("BROWSER", br.as_os_str())
            .output()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let front = Bridge::builder()
        .serve()
        .args(["--port", "0", "--upstream", &w.serve.url, "--oauth-dir"])
        .arg(d.as_os_str())
        .env("BROWSER", "/bin/false")
        .spawn()
        .await;
    let c = client();
    let r = call_modern(&c, &front.url, json!(1), "echo", json!({"text": "via"})).await;
    assert_eq!(r.text(), "via", "{r:?}\n{}", front.log.dump());
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    for t in w.auth.state.issued.lock().unwrap().iter() {
        assert!(
            !front.log.dump().contains(t.as_str()),
            "a token in serve's log"
        );
    }
    drop(front);

    // Logged out: the daemon says how to log in instead of opening a browser.
    std::fs::remove_dir_all(&d).unwrap();
    let conf = write(
        w.dir.path(),
        "front.toml",
        &format!(
            "[servers.far]\nurl = {:?}\n[servers.far.oauth]\nenabled = true\ndir = {:?}\n",
            w.serve.url,
            d.to_str().unwrap()
        ),
    );
    let front = daemon(&conf).await;
    let r = call_modern(
        &c,
        &server_url(&front, "far"),
        json!(2),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    let msg = r.error()["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("auth login"), "{r:?}\n{}", front.log.dump());
    assert_eq!(
        w.auth.count(&w.auth.state.authorizations),
        1,
        "no login by the daemon"
    );
}

/// `mcp-bridge auth login` logs in outside the host (connect then uses the login); `auth
/// status` shows it (never its tokens); `auth logout` removes it, and the next run logs in
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_login_status_and_logout_work_outside_the_host() {
    let w = World::start().await;
    let d = w.oauth_dir();
    let b = browser(w.dir.path());
    let state = w.auth.state.clone();
    let auth = |words: &[&str]| {
        let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let (d, b) = (d.clone(), b.clone());
        let (words, state) = (format!("{words:?}"), state.clone());
        async move {
            // Off the runtime's workers: the authorization server runs on them.
            let out = tokio::task::spawn_blocking(move || {
                Bridge::builder()
                    .sub(["auth"])
                    .args(&args)
                    .arg("--oauth-dir")
                    .arg(d.as_os_str())
                    .env("BROWSER", b.as_os_str())
                    .output()
            })
            .await
            .unwrap();
            assert!(out.status.success(), "{words}: {out:?}");
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            for t in state.issued.lock().unwrap().iter() {
                assert!(!stdout.contains(t.as_str()), "a token on stdout:\n{stdout}");
                assert!(!stderr.contains(t.as_str()), "a token on stderr:\n{stderr}");
            }
            stdout
        }
    };
    assert!(auth(&["login", &w.serve.url, "--oauth-param", "extra=yes"])
        .await
        .starts_with("logged in to"));
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 1, "in")), "in");
    assert_eq!(
        w.auth.count(&w.auth.state.authorizations),
        1,
        "the kept login"
    );
    drop(h);
    let status = auth(&["status"]).await;
    assert!(
        status.starts_with(&format!("{}\n", w.serve.url)),
        "{status}"
    );
    assert!(status.contains("can refresh"), "{status}");
    assert!(auth(&["status", "https://elsewhere.example/mcp"])
        .await
        .starts_with("no login kept"));
    assert!(auth(&["logout", &w.serve.url])
        .await
        .starts_with("1 login removed"));
    assert!(auth(&["status"]).await.starts_with("no logins kept"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 2, "again")), "again");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_that_cannot_finish_is_one_clear_error() {
    let w = World::start().await;
    let d = w.oauth_dir();
    // No browser: nobody follows the URL, so the bounded wait ends.
    let mut h = Host::start(
        &w.serve.url,
        &[
            "--oauth-dir",
            d.to_str().unwrap(),
            "--no-browser",
            "--oauth-timeout",
            "1s",
        ],
    );
    let r = echo(&mut h, 1, "x");
    assert_eq!(r["error"]["data"]["reason"], "login_failed", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("--oauth-timeout"), "{msg}");
    assert!(
        h.log.wait_find("/authorize?").is_some(),
        "the URL is printed on stderr:\n{}",
        h.log.dump()
    );
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 0);
    h.assert_clean_stdout();
}

/// `--oauth-device-code`: the code and URL on stderr, polling that waits out
/// `authorization_pending` and `slow_down` (+5 s), the login stored like any other; no device
/// endpoint, or a refusal, is one clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_login_shows_the_code_on_stderr_and_polls_as_told() {
    let w = World::start().await;
    let st = &w.auth.state;

    let mut h = w.host_with(&["--oauth-device-code"]);
    let r = echo(&mut h, 1, "x");
    let (reason, msg) = error_of(&r);
    assert_eq!(reason, "login_failed", "{r}");
    assert!(msg.contains("device_authorization_endpoint"), "{msg}");
    assert_eq!(
        w.auth.count(&st.registrations),
        0,
        "no registration before the check"
    );
    drop(h);

    st.device.store(true, Ordering::SeqCst);
    st.deny_device.store(true, Ordering::SeqCst);
    let mut h = w.host_with(&["--oauth-device-code"]);
    let r = echo(&mut h, 2, "x");
    let (reason, msg) = error_of(&r);
    assert_eq!(reason, "login_failed", "{r}");
    assert!(msg.contains("access_denied"), "{msg}");
    drop(h);

    st.deny_device.store(false, Ordering::SeqCst);
    st.polls.lock().unwrap().clear();
    let mut h = w.host_with(&["--oauth-device-code"]);
    let r = echo(&mut h, 3, "device");
    assert_eq!(text(&r), "device", "{r}\n{}", h.log.dump());
    let polls = st.polls.lock().unwrap().clone();
    assert_eq!(polls.len(), 3, "pending, slow_down, token");
    assert!(
        polls[1] - polls[0] >= Duration::from_millis(900),
        "{polls:?}"
    );
    assert!(
        polls[2] - polls[1] >= Duration::from_millis(5800),
        "slow_down adds 5 s: {:?}",
        polls[2] - polls[1]
    );
    let user_code = st.user_codes.lock().unwrap().last().cloned().unwrap();
    let log = h.log.dump();
    assert!(
        log.contains(&format!("/verify?user_code={user_code}")),
        "the complete URL on stderr:\n{log}"
    );
    assert!(
        log.contains(&format!("/verify and enter the code {user_code}")),
        "{log}"
    );
    assert_eq!(w.auth.count(&st.authorizations), 0, "no browser login");
    assert_eq!(
        w.auth.count(&st.registrations),
        1,
        "a device client registered"
    );
    assert_quiet(&w, &h, &[&r]);
    drop(h);

    // Stored like any login: the next run uses it.
    let mut h = w.host_with(&["--oauth-device-code"]);
    let r = echo(&mut h, 4, "stored");
    assert_eq!(text(&r), "stored", "{r}");
    assert_eq!(st.polls.lock().unwrap().len(), 3);
    assert_quiet(&w, &h, &[&r]);
    assert_no_server_errors(&w);
}

/// `--oauth-client-credentials` with a secret: Basic when offered, else in the body; asked
/// for again when the token expires or is refused; neither the secret nor a refresh token kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_with_a_secret_and_again_when_the_token_ends() {
    let w = World::start().await;
    let st = &w.auth.state;
    let secret = "m2m-s3cret-value";
    let sf = w.client_secret(secret);
    let args = [
        "--oauth-client-credentials",
        "--oauth-client-id",
        "m2m",
        "--oauth-client-secret-file",
        &sf,
    ];
    let grants = || st.cc_auth.lock().unwrap().clone();

    let mut h = w.host_with(&args);
    let r = echo(&mut h, 1, "machine");
    assert_eq!(text(&r), "machine", "{r}\n{}", h.log.dump());
    assert_eq!(grants(), ["client_secret_basic"]);
    assert_eq!(w.auth.count(&st.authorizations), 0);
    assert_eq!(w.auth.count(&st.registrations), 0);
    assert_quiet(&w, &h, &[&r]);
    drop(h);
    let stored = std::fs::read_to_string(w.login_file()).unwrap();
    assert!(!stored.contains(secret), "{stored}");
    let v: Value = serde_json::from_str(&stored).unwrap();
    assert!(v["token"]["refresh_token"].is_null(), "{v}");

    // Expired: asked for again before the request (no refresh token, no browser).
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut h = w.host_with(&args);
    assert_eq!(text(&echo(&mut h, 2, "expired")), "expired");
    assert_eq!(grants().len(), 2);
    drop(h);

    // Refused (401): asked for again, in the body now that the metadata says so.
    st.post_only.store(true, Ordering::SeqCst);
    w.edit_login(|v| v["token"]["access_token"] = json!("not.a.jwt"));
    let mut h = w.host_with(&args);
    let r = echo(&mut h, 3, "refused");
    assert_eq!(text(&r), "refused", "{r}");
    assert_eq!(grants().len(), 3);
    assert_eq!(grants()[2], "client_secret_post");
    assert_eq!(w.auth.count(&st.refreshes), 0);
    assert_eq!(w.auth.count(&st.authorizations), 0);
    assert_quiet(&w, &h, &[&r]);
    assert_no_server_errors(&w);
}

/// A daemon logs a machine in by itself: a `url` server whose `[servers.NAME.oauth]` asks for
/// the client credentials grant gets its token without anybody, and its clients' calls go
/// through; the secret stays in its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_upstream_logs_a_machine_in_with_client_credentials() {
    let w = World::start().await;
    let st = &w.auth.state;
    let secret = "daemon-s3cret-value";
    let sf = w.client_secret(secret);
    let conf = write(
        w.dir.path(),
        "front.toml",
        &format!(
            "[servers.far]\nurl = {:?}\n[servers.far.oauth]\nclient_credentials = true\n\
             client_id = \"m2m\"\nclient_secret_file = {sf:?}\ndir = {:?}\n",
            w.serve.url,
            w.oauth_dir().to_str().unwrap()
        ),
    );
    let front = daemon(&conf).await;
    let c = client();
    let url = server_url(&front, "far");
    let r = call_modern(&c, &url, json!(1), "echo", json!({"text": "daemon"})).await;
    assert_eq!(r.text(), "daemon", "{r:?}\n{}", front.log.dump());
    assert_eq!(st.cc_auth.lock().unwrap().len(), 1);
    assert_eq!(w.auth.count(&st.authorizations), 0, "no browser");
    let log = front.log.dump();
    assert!(!log.contains(secret), "the secret in serve's log");
    for t in st.issued.lock().unwrap().iter() {
        assert!(!log.contains(t.as_str()), "a token in serve's log");
    }
}

/// `--oauth-private-key-file`: an RS256 or ES256 `private_key_jwt` assertion that the server
/// verifies (iss = sub = client id, aud = token endpoint, jti, short exp, kid); a key the
/// server does not know gets a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_with_a_private_key_jwt() {
    let w = World::start().await;
    let st = &w.auth.state;
    for (id, key) in [
        ("m2m-ec", TestKey::es256("ec-kid")),
        ("m2m-rsa", TestKey::rs256("rsa-kid")),
    ] {
        st.client_keys.lock().unwrap().insert(id.into(), key.jwk());
        let pem = w.file(&format!("{id}.pem"), &pem_of(&key));
        let mut h = w.host_with(&[
            "--oauth-client-credentials",
            "--oauth-client-id",
            id,
            "--oauth-private-key-file",
            &pem,
            "--oauth-key-id",
            &key.kid,
        ]);
        let r = echo(&mut h, 1, id);
        assert_eq!(text(&r), id, "{r}\n{}", h.log.dump());
        assert_eq!(
            st.cc_auth.lock().unwrap().last().unwrap(),
            &format!("private_key_jwt {}", key.alg())
        );
        assert_quiet(&w, &h, &[&r]);
    }
    assert_no_server_errors(&w);

    // Signed by a key the server does not have for this client.
    st.client_keys
        .lock()
        .unwrap()
        .insert("m2m-other".into(), TestKey::es256("ec-kid").jwk());
    let pem = w.file("wrong.pem", &pem_of(&TestKey::es256("ec-kid")));
    let mut h = w.host_with(&[
        "--oauth-client-credentials",
        "--oauth-client-id",
        "m2m-other",
        "--oauth-private-key-file",
        &pem,
        "--oauth-key-id",
        "ec-kid",
    ]);
    let r = echo(&mut h, 2, "x");
    let (reason, msg) = error_of(&r);
    assert_eq!(reason, "login_failed", "{r}");
    assert!(msg.contains("invalid_request"), "{msg}");
    assert_eq!(st.cc_auth.lock().unwrap().len(), 2);
    h.assert_clean_stdout();
}

/// A 403 `insufficient_scope` (serve `--required-scope`) starts one more login asking for the
/// union of the scopes; a server that still does not grant it gets one clear error per call
/// and no further logins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_scope_steps_up_once() {
    let w = World::start_with(&[
        "--required-scope",
        "mcp:tools",
        "--required-scope",
        "mcp:admin",
    ])
    .await;
    let st = &w.auth.state;
    let narrow = ["--oauth-scope", "mcp:tools"];

    let mut h = w.host_with(&narrow);
    let r = echo(&mut h, 1, "wider");
    assert_eq!(text(&r), "wider", "{r}\n{}", h.log.dump());
    assert_eq!(
        *st.asked_scopes.lock().unwrap(),
        ["mcp:tools", "mcp:tools mcp:admin"]
    );
    assert_eq!(w.auth.count(&st.authorizations), 2);
    let r2 = echo(&mut h, 2, "still");
    assert_eq!(text(&r2), "still");
    assert_eq!(w.auth.count(&st.authorizations), 2);
    assert_quiet(&w, &h, &[&r, &r2]);
    drop(h);

    // The same with the grant of a machine: the step-up runs the client credentials grant.
    let secret = "m2m-s3cret-value";
    let sf = w.client_secret(secret);
    let mut h = w.host_with(&[
        "--oauth-scope",
        "mcp:tools",
        "--oauth-client-credentials",
        "--oauth-client-id",
        "m2m",
        "--oauth-client-secret-file",
        &sf,
    ]);
    let r = echo(&mut h, 5, "machine");
    assert_eq!(text(&r), "machine", "{r}\n{}", h.log.dump());
    assert_eq!(st.cc_auth.lock().unwrap().len(), 2);
    assert_eq!(
        st.asked_scopes.lock().unwrap()[2..],
        ["mcp:tools", "mcp:tools mcp:admin"]
    );
    assert_quiet(&w, &h, &[&r]);
    drop(h);

    // The authorization server will not grant mcp:admin.
    *st.grantable.lock().unwrap() = Some(vec!["mcp:tools".into()]);
    std::fs::remove_dir_all(w.oauth_dir()).unwrap();
    let mut h = w.host_with(&narrow);
    let r = echo(&mut h, 3, "x");
    let (reason, msg) = error_of(&r);
    assert_eq!(reason, "insufficient_scope", "{r}\n{}", h.log.dump());
    assert!(msg.contains("mcp:admin"), "{msg}");
    assert_eq!(
        w.auth.count(&st.authorizations),
        4,
        "one login, one step-up"
    );
    let r2 = echo(&mut h, 4, "y");
    assert_eq!(error_of(&r2).0, "insufficient_scope", "{r2}");
    assert_eq!(w.auth.count(&st.authorizations), 4, "no login loop");
    assert_quiet(&w, &h, &[&r, &r2]);
    assert_no_server_errors(&w);
}

/// MCP 2025-03-26 discovery: a server with no Protected Resource Metadata whose origin is the
/// authorization server. A Bearer challenge (or an OAuth flag) finds the origin's RFC 8414
/// metadata, whose issuer (`/oauth`, as the conformance suite's server has it) is accepted;
/// with no metadata either, an explicit login uses the default endpoints; the resource is the
/// server's URL. Without a Bearer challenge or flags, or with a bare challenge and no metadata,
/// a 401 stays a 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_03_26_server_is_its_own_authorization_server() {
    let w = World::start_legacy().await;
    let st = &w.auth.state;
    st.lax_extra.store(true, Ordering::SeqCst);
    *st.issuer.lock().unwrap() = Some(format!("{}/oauth", st.base));
    let b = browser(w.dir.path());
    let d = w.oauth_dir();
    let plain = || {
        Host::start_env(
            &w.url,
            &["--oauth-dir", d.to_str().unwrap()],
            &[("BROWSER", b.to_str().unwrap())],
        )
    };

    // No challenge, no flags: not OAuth as far as connect can tell.
    let mut h = plain();
    let r = echo(&mut h, 1, "x");
    assert_eq!(error_of(&r).0, "unauthorized", "{r}\n{}", h.log.dump());
    drop(h);
    // A bare Bearer challenge, but no metadata at the origin either: still a 401.
    *st.challenge.lock().unwrap() = Some("Bearer".into());
    st.no_meta.store(true, Ordering::SeqCst);
    let mut h = plain();
    let r = echo(&mut h, 2, "x");
    assert_eq!(error_of(&r).0, "unauthorized", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&st.authorizations), 0, "no login");
    drop(h);

    // The origin's metadata, another issuer: a login, for the server's URL as the resource.
    st.no_meta.store(false, Ordering::SeqCst);
    let mut h = plain();
    let r = echo(&mut h, 3, "legacy");
    assert_eq!(text(&r), "legacy", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&st.authorizations), 1);
    assert_eq!(w.auth.count(&st.registrations), 1);
    assert_quiet(&w, &h, &[&r]);
    drop(h);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(w.login_file()).unwrap()).unwrap();
    assert_eq!(v["resource"], json!(w.url), "{v}");

    // No metadata and no challenge, OAuth asked for: the default endpoints at the origin.
    std::fs::remove_dir_all(w.oauth_dir()).unwrap();
    st.no_meta.store(true, Ordering::SeqCst);
    *st.challenge.lock().unwrap() = None;
    let mut h = w.host_with(&["--oauth"]);
    let r = echo(&mut h, 4, "defaults");
    assert_eq!(text(&r), "defaults", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&st.authorizations), 2);
    assert_eq!(w.auth.count(&st.registrations), 2);
    assert_quiet(&w, &h, &[&r]);
    assert_no_server_errors(&w);
}

/// `--oauth-client-metadata-url`: the URL is the client id (no registration) where the
/// authorization server advertises Client ID Metadata Documents; elsewhere dynamic
/// registration; a static client id goes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_id_metadata_document_replaces_registration_where_advertised() {
    let w = World::start().await;
    let st = &w.auth.state;
    let doc = "http://127.0.0.1:9/mcp-bridge/client.json";
    let last_id = || st.client_ids.lock().unwrap().last().cloned().unwrap();

    st.cimd.store(true, Ordering::SeqCst);
    let mut h = w.host_with(&["--oauth-client-metadata-url", doc]);
    let r = echo(&mut h, 1, "cimd");
    assert_eq!(text(&r), "cimd", "{r}\n{}", h.log.dump());
    assert_eq!(last_id(), doc);
    assert_eq!(w.auth.count(&st.registrations), 0, "no registration");
    assert_quiet(&w, &h, &[&r]);
    drop(h);

    st.cimd.store(false, Ordering::SeqCst);
    std::fs::remove_dir_all(w.oauth_dir()).unwrap();
    let mut h = w.host_with(&["--oauth-client-metadata-url", doc]);
    let r = echo(&mut h, 2, "dcr");
    assert_eq!(text(&r), "dcr", "{r}\n{}", h.log.dump());
    assert_eq!(last_id(), "client-1");
    assert_eq!(w.auth.count(&st.registrations), 1);
    drop(h);

    st.cimd.store(true, Ordering::SeqCst);
    std::fs::remove_dir_all(w.oauth_dir()).unwrap();
    let mut h = w.host_with(&[
        "--oauth-client-metadata-url",
        doc,
        "--oauth-client-id",
        "static-1",
    ]);
    let r = echo(&mut h, 3, "static");
    assert_eq!(text(&r), "static", "{r}\n{}", h.log.dump());
    assert_eq!(last_id(), "static-1");
    assert_eq!(w.auth.count(&st.registrations), 1);
    assert_no_server_errors(&w);
}

/// A registration answered with a secret and `client_secret_post` (RFC 7591 §3.2.1) is used
/// so: the secret in the body of the code exchange and of the refresh, never Basic (which
/// the metadata also offers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_answered_with_client_secret_post_is_used_so() {
    let w = World::start().await;
    let st = &w.auth.state;
    st.confidential.store(true, Ordering::SeqCst);
    let mut h = w.host();
    let r = echo(&mut h, 1, "post");
    assert_eq!(text(&r), "post", "{r}\n{}", h.log.dump());
    assert!(
        h.log
            .dump()
            .contains("as a confidential client (client_secret_post)"),
        "{}",
        h.log.dump()
    );
    assert_quiet(&w, &h, &[&r]);
    drop(h);
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut h = w.host();
    let r = echo(&mut h, 2, "refreshed");
    assert_eq!(text(&r), "refreshed", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&st.refreshes), 1);
    assert_eq!(w.auth.count(&st.registrations), 1);
    assert_quiet(&w, &h, &[&r]);
    assert_no_server_errors(&w);
}

/// RFC 9207: where the metadata advertises `iss` in the authorization response, a login whose
/// response names the issuer exactly goes on to the token request; one that names another
/// issuer (a trailing slash is another), or none, is refused before any code is redeemed,
/// as one clear `login_failed` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorization_responses_iss_must_be_the_issuer() {
    let w = World::start().await;
    let st = &w.auth.state;
    let base = st.base.clone();
    *st.iss.lock().unwrap() = Some(Some(base.clone()));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 1, "iss ok")), "iss ok");
    drop(h);
    for (iss, why) in [
        (Some(format!("{base}/")), "RFC 9207"),
        (Some("https://evil.example".to_owned()), "evil.example"),
        (None, "has no iss"),
    ] {
        std::fs::remove_dir_all(w.oauth_dir()).unwrap();
        let before = w.auth.count(&st.authorizations);
        let codes = st.codes.lock().unwrap().len();
        *st.iss.lock().unwrap() = Some(iss.clone());
        let mut h = w.host();
        let r = echo(&mut h, 2, "x");
        assert_eq!(r["error"]["data"]["reason"], "login_failed", "{iss:?}: {r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{iss:?}: {msg}");
        // Asked for (connect may ask again before giving up), never redeemed.
        let asked = w.auth.count(&st.authorizations) - before;
        assert!(asked >= 1, "{iss:?}: no authorization request");
        let unredeemed = st.codes.lock().unwrap().len() - codes;
        assert_eq!(unredeemed, asked, "{iss:?}: a code was redeemed");
        h.assert_clean_stdout();
    }
    assert_no_server_errors(&w);
}
