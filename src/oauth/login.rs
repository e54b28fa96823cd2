//! The interactive login and the token requests: the loopback callback listener on 127.0.0.1
//! (a fixed port, or one derived stably from the server URL so that a dynamic registration
//! stays valid across runs, falling back to any free port), the browser (`$BROWSER URL`, else
//! `xdg-open`; the URL always on stderr, never stdout, which belongs to the host), the
//! authorization code grant with PKCE S256, a checked `state`, RFC 8707 `resource` and extra
//! parameters, and the refresh grant. The grants themselves are the `oauth2` crate's (PKCE,
//! the form encoding, error parsing); this file only drives them, with every wait bounded.
//!
//! The logins without a browser: the device authorization grant (RFC 8628) is in
//! [`super::device`] (re-exported here, built on this file's client and token helpers), and
//! the client credentials grant is here (a machine: a client secret, sent as the metadata allows,
//! Basic preferred, or a `private_key_jwt` assertion from [`super::assertion`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use oauth2::basic::{BasicClient, BasicErrorResponseType};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, PkceCodeChallenge, RedirectUrl, RefreshToken, RequestTokenError, Scope,
    TokenResponse, TokenUrl,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::assertion::ASSERTION_TYPE;
use super::discovery::AsMeta;
use super::http::Fetch;
use super::register::StaticClient;
use super::store::{now_secs, ClientRecord, Secret, TokenRecord};

pub use super::device::{device, device_endpoint};

/// How the client gets a token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grant {
    /// The authorization code grant in a browser (the default).
    #[default]
    Browser,
    /// The device authorization grant (RFC 8628): a user, but no browser here.
    DeviceCode,
    /// The client credentials grant: no user at all.
    ClientCredentials,
    /// Workload identity (SEP-1933): the JWT-bearer grant with the platform's JWT.
    JwtBearer,
    /// Enterprise-managed (SEP-990): the user's ID token exchanged at the enterprise IdP for
    /// an ID-JAG, then the JWT-bearer grant with it.
    Enterprise,
}

impl Grant {
    /// Its name in messages and in the login file's key.
    pub fn name(self) -> &'static str {
        match self {
            Grant::Browser => "authorization_code",
            Grant::DeviceCode => "device_code",
            Grant::ClientCredentials => "client_credentials",
            Grant::JwtBearer => "jwt_bearer",
            Grant::Enterprise => "enterprise",
        }
    }

    /// Does it need a person (a browser here, or one who types a code elsewhere)? The others
    /// get a new token by themselves whenever one expires.
    pub fn needs_person(self) -> bool {
        matches!(self, Grant::Browser | Grant::DeviceCode)
    }
}

/// The login's own settings (from flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSettings {
    /// A person may log in (connect, `auth login`); false for `serve --upstream`, a daemon
    /// with nobody at a browser: it uses a stored login and its refreshes only (and the
    /// client credentials grant, which needs nobody).
    pub interactive: bool,
    pub grant: Grant,
    pub callback_port: Option<u16>,
    pub no_browser: bool,
    pub timeout: Duration,
    pub params: Vec<(String, String)>,
}

type Oauth = BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// A stable port for `server` in 61000..=65000: the top of the dynamic range, above Linux's
/// default ephemeral range (32768–60999), so that an outgoing connection of this or any
/// process does not hold the port a stored registration's redirect URI names (the login
/// would then fall back to a free port and register again).
pub fn derived_port(server: &str) -> u16 {
    use sha2::Digest;
    const LOW: u16 = 61000;
    const HIGH: u16 = 65000;
    let d = sha2::Sha256::digest(server.as_bytes());
    LOW + (u16::from_be_bytes([d[0], d[1]]) % (HIGH - LOW + 1))
}

/// Bind the callback listener: `port` if given (an error if taken), else the derived port,
/// else any free one.
pub async fn bind_callback(server: &str, port: Option<u16>) -> Result<TcpListener, String> {
    if let Some(p) = port {
        return TcpListener::bind(("127.0.0.1", p))
            .await
            .map_err(|e| format!("cannot listen for the OAuth callback on 127.0.0.1:{p}: {e}"));
    }
    let p = derived_port(server);
    match TcpListener::bind(("127.0.0.1", p)).await {
        Ok(l) => Ok(l),
        Err(e) => {
            warn!("callback port {p} is taken ({e}); using a free port (a dynamic registration for the old port is replaced)");
            TcpListener::bind(("127.0.0.1", 0))
                .await
                .map_err(|e| format!("cannot listen for the OAuth callback: {e}"))
        }
    }
}

pub fn redirect_uri(l: &TcpListener) -> String {
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    format!("http://127.0.0.1:{port}/callback")
}

fn oauth_client(meta: &AsMeta, client: &ClientRecord) -> Result<Oauth, String> {
    // A device or machine login's server may have no authorization endpoint and its client
    // no redirect URI; the refresh grant needs neither (the token endpoint stands in for the
    // unused authorization URL, which the crate's client type wants set).
    let auth_url = match meta.authorization_endpoint.as_str() {
        "" => &meta.token_endpoint,
        a => a,
    };
    let mut c = BasicClient::new(ClientId::new(client.client_id.clone()))
        .set_auth_uri(AuthUrl::new(auth_url.to_owned()).map_err(|e| e.to_string())?)
        .set_token_uri(TokenUrl::new(meta.token_endpoint.clone()).map_err(|e| e.to_string())?);
    if !client.redirect_uri.is_empty() {
        c = c.set_redirect_uri(
            RedirectUrl::new(client.redirect_uri.clone()).map_err(|e| e.to_string())?,
        );
    }
    let (auth, secret) = client_auth(meta, client);
    c = c.set_auth_type(auth);
    if let Some(s) = secret {
        c = c.set_client_secret(ClientSecret::new(s.0.clone()));
    }
    Ok(c)
}

/// How `client` authenticates at the token endpoint, and with which secret: the method it was
/// registered with when known (RFC 7591 §3.2.1: `none` sends no secret), else as the
/// metadata allows ([`secret_auth`]).
pub(super) fn client_auth<'a>(
    meta: &AsMeta,
    client: &'a ClientRecord,
) -> (AuthType, Option<&'a Secret>) {
    let secret = client.client_secret.as_ref();
    match client.token_endpoint_auth_method.as_deref() {
        Some("none") => (AuthType::RequestBody, None),
        Some("client_secret_post") => (AuthType::RequestBody, secret),
        Some("client_secret_basic") => (AuthType::BasicAuth, secret),
        _ => (secret_auth(meta), secret),
    }
}

/// How a client secret goes to the token endpoint: Basic unless the metadata lists only
/// `client_secret_post`.
fn secret_auth(meta: &AsMeta) -> AuthType {
    let m = &meta.token_endpoint_auth_methods_supported;
    let has = |x: &str| m.iter().any(|a| a == x);
    if !m.is_empty() && !has("client_secret_basic") && has("client_secret_post") {
        AuthType::RequestBody
    } else {
        AuthType::BasicAuth
    }
}

pub(super) fn token_url(meta: &AsMeta) -> Result<TokenUrl, String> {
    TokenUrl::new(meta.token_endpoint.clone()).map_err(|e| format!("token endpoint: {e}"))
}

pub(super) fn scopes(scope: Option<&str>) -> impl Iterator<Item = Scope> + '_ {
    scope
        .unwrap_or("")
        .split_whitespace()
        .map(|x| Scope::new(x.to_owned()))
}

/// A token endpoint's refusal, for messages (its `error` and description; never a body).
pub(super) fn refusal<T: std::fmt::Display>(r: &T) -> String {
    r.to_string()
}

pub(super) fn token_record(
    t: &oauth2::basic::BasicTokenResponse,
    old_refresh: Option<&Secret>,
) -> TokenRecord {
    TokenRecord {
        access_token: Secret(t.access_token().secret().clone()),
        refresh_token: t
            .refresh_token()
            .map(|r| Secret(r.secret().clone()))
            .or_else(|| old_refresh.cloned()),
        expires_at: t
            .expires_in()
            .map(|d| now_secs().saturating_add(d.as_secs())),
        lifetime: t.expires_in().map(|d| d.as_secs()),
        scope: t
            .scopes()
            .map(|s| s.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(" ")),
        token_type: match t.token_type() {
            oauth2::basic::BasicTokenType::Bearer => None,
            other => Some(other.as_ref().to_owned()),
        },
    }
}

/// Why a token request failed: `invalid_grant` (the grant is dead: log in again) or the rest.
#[derive(Debug)]
pub enum GrantError {
    InvalidGrant,
    Other(String),
}

impl GrantError {
    /// The message for a grant whose `invalid_grant` means `what` was refused (the refresh
    /// grant tells it apart instead: there it drops the token).
    fn message(self, what: &str) -> String {
        match self {
            GrantError::InvalidGrant => {
                format!("the token endpoint refused the {what} (invalid_grant)")
            }
            GrantError::Other(s) => s,
        }
    }
}

fn grant_error<E: std::error::Error>(
    e: RequestTokenError<E, oauth2::basic::BasicErrorResponse>,
) -> GrantError {
    match e {
        RequestTokenError::ServerResponse(r)
            if *r.error() == BasicErrorResponseType::InvalidGrant =>
        {
            GrantError::InvalidGrant
        }
        RequestTokenError::ServerResponse(r) => GrantError::Other(format!(
            "the token endpoint refused: {}{}",
            r.error(),
            r.error_description()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )),
        RequestTokenError::Request(e) => GrantError::Other(format!("token request failed: {e}")),
        RequestTokenError::Parse(e, _) => {
            GrantError::Other(format!("the token endpoint's answer is not a token: {e}"))
        }
        RequestTokenError::Other(s) => GrantError::Other(s),
    }
}

/// The refresh grant.
pub async fn refresh(
    fetch: &Fetch,
    meta: &AsMeta,
    client: &ClientRecord,
    refresh_token: &Secret,
    resource: Option<&str>,
) -> Result<TokenRecord, GrantError> {
    let c = oauth_client(meta, client).map_err(GrantError::Other)?;
    let rt = RefreshToken::new(refresh_token.0.clone());
    let http = |req| {
        let f = fetch.clone();
        async move { f.oauth2(req).await }
    };
    let mut req = c.exchange_refresh_token(&rt);
    if let Some(r) = resource {
        req = req.add_extra_param("resource", r.to_owned());
    }
    let t = req.request_async(&http).await.map_err(grant_error)?;
    Ok(token_record(&t, Some(refresh_token)))
}

/// The client credentials grant (no user): the client authenticates with its secret or a
/// `private_key_jwt` assertion. No refresh token is expected; the caller runs this again.
pub async fn client_credentials(
    fetch: &Fetch,
    meta: &AsMeta,
    client: &StaticClient,
    resource: Option<&str>,
    scope: Option<&str>,
    settings: &LoginSettings,
) -> Result<TokenRecord, String> {
    let Some(id) = &client.client_id else {
        return Err("the client credentials grant needs --oauth-client-id".into());
    };
    let mut c = BasicClient::new(ClientId::new(id.clone()))
        .set_token_uri(token_url(meta)?)
        .set_auth_type(secret_auth(meta));
    let assertion = match (&client.client_secret, &client.private_key) {
        (Some(s), _) => {
            c = c.set_client_secret(ClientSecret::new(s.0.clone()));
            None
        }
        (None, Some(k)) => {
            let m = &meta.token_endpoint_auth_methods_supported;
            if !m.is_empty() && !m.iter().any(|a| a == "private_key_jwt") {
                warn!(
                    "{} does not list private_key_jwt in token_endpoint_auth_methods_supported; \
                     trying it anyway",
                    meta.issuer
                );
            }
            let aud = [meta.issuer.as_str(), meta.token_endpoint.as_str()];
            let aud = if aud[0] == aud[1] {
                &aud[..1]
            } else {
                &aud[..]
            };
            Some(k.assertion(id, aud)?)
        }
        (None, None) => {
            return Err(
                "the client credentials grant needs --oauth-client-secret-file or \
                 --oauth-private-key-file"
                    .into(),
            )
        }
    };
    let http = |req| {
        let f = fetch.clone();
        async move { f.oauth2(req).await }
    };
    let mut req = c.exchange_client_credentials().add_scopes(scopes(scope));
    if let Some(a) = assertion {
        req = req
            .add_extra_param("client_assertion_type", ASSERTION_TYPE)
            .add_extra_param("client_assertion", a);
    }
    if let Some(r) = resource {
        req = req.add_extra_param("resource", r.to_owned());
    }
    for (k, v) in &settings.params {
        req = req.add_extra_param(k.clone(), v.clone());
    }
    let t = req
        .request_async(&http)
        .await
        .map_err(|e| grant_error(e).message("client"))?;
    info!("got a token from {} (client credentials)", meta.issuer);
    Ok(token_record(&t, None))
}

/// What the callback got.
type Callback = Result<String, String>;

/// What the authorization response's `iss` must be (RFC 9207): the issuer's own string, exactly
/// (no normalisation: a trailing slash is another issuer), and present when the server's
/// metadata says it sends one. An `iss` the server never advertised is compared all the same.
#[derive(Debug, Clone)]
struct IssCheck {
    issuer: String,
    required: bool,
}

impl IssCheck {
    fn of(meta: &AsMeta) -> IssCheck {
        IssCheck {
            issuer: meta.issuer.clone(),
            required: meta.authorization_response_iss_parameter_supported,
        }
    }

    fn check(&self, iss: Option<&str>) -> Result<(), String> {
        match iss {
            Some(i) if i == self.issuer => Ok(()),
            Some(i) => Err(format!(
                "the authorization response names issuer {i:?}, not {:?} (RFC 9207): the login \
                 was refused as a possible mix-up attack",
                self.issuer
            )),
            None if self.required => Err(format!(
                "the authorization response from {} has no iss, which its metadata promises \
                 (authorization_response_iss_parameter_supported, RFC 9207): the login was refused",
                self.issuer
            )),
            None => Ok(()),
        }
    }
}

/// The whole interactive login on `listener`: open the browser, wait (bounded) for the
/// callback, exchange the code.
pub async fn authorize(
    fetch: &Fetch,
    meta: &AsMeta,
    client: &ClientRecord,
    resource: Option<&str>,
    scope: Option<&str>,
    settings: &LoginSettings,
    listener: TcpListener,
) -> Result<TokenRecord, String> {
    let c = oauth_client(meta, client)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut a = c
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge);
    if let Some(s) = scope {
        a = a.add_scopes(s.split_whitespace().map(|x| Scope::new(x.to_owned())));
    }
    if let Some(r) = resource {
        a = a.add_extra_param("resource", r.to_owned());
    }
    for (k, v) in &settings.params {
        a = a.add_extra_param(k.clone(), v.clone());
    }
    let (url, state) = a.url();
    eprintln!(
        "mcp-bridge: to log in to {}, open this URL in a browser:\n\n  {url}\n",
        meta.issuer
    );
    // Held for the login (no task of its own); see `open_browser`.
    let _browser = (!settings.no_browser)
        .then(|| open_browser(url.as_str()))
        .flatten();
    let (tx, mut rx) = mpsc::channel::<Callback>(1);
    let serve = serve_callback(listener, state.secret().clone(), IssCheck::of(meta), tx);
    let code = tokio::select! {
        r = rx.recv() => r.unwrap_or_else(|| Err("the callback listener stopped".into()))?,
        why = serve => return Err(format!("the callback listener stopped: {why}")),
        () = tokio::time::sleep(settings.timeout) => {
            return Err(format!(
                "no OAuth callback within {} s (--oauth-timeout): the login was not completed",
                settings.timeout.as_secs()
            ))
        }
    };
    let http = |req| {
        let f = fetch.clone();
        async move { f.oauth2(req).await }
    };
    let mut req = c
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(verifier);
    if let Some(r) = resource {
        req = req.add_extra_param("resource", r.to_owned());
    }
    let t = req
        .request_async(&http)
        .await
        .map_err(|e| grant_error(e).message("authorization code"))?;
    info!("logged in to {}", meta.issuer);
    Ok(token_record(&t, None))
}

/// `$BROWSER URL` (its first entry when it lists several), else `xdg-open URL`; the child's
/// stdout goes nowhere (ours is the host's). The login holds the child while it waits for the
/// callback; dropped, it is not killed (a browser started directly may be the user's
/// window) and tokio reaps it once it exits, so no task is spawned to wait for it.
fn open_browser(url: &str) -> Option<tokio::process::Child> {
    let prog = std::env::var("BROWSER")
        .ok()
        .and_then(|b| b.split(':').next().map(str::to_owned))
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "xdg-open".into());
    let child = tokio::process::Command::new(&prog)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match child {
        Ok(c) => Some(c),
        Err(e) => {
            warn!("could not start the browser ({prog}): {e}; open the URL yourself");
            None
        }
    }
}

/// Most connections the callback listener serves at once (a browser opens a few).
const CALLBACK_CONNS: usize = 32;

/// Serve the callback until the sender is used (or dropped with the listener); the
/// connections' tasks end with it. Returns only when the listener fails (out of descriptors
/// or the like): the login then ends with that reason instead of retrying on a timer.
async fn serve_callback(
    listener: TcpListener,
    state: String,
    iss: IssCheck,
    tx: mpsc::Sender<Callback>,
) -> String {
    let slot = Arc::new(Mutex::new(Some(tx)));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let sock = match listener.accept().await {
            Ok((sock, _)) => sock,
            Err(e) => {
                warn!("the OAuth callback listener failed: {e}");
                return e.to_string();
            }
        };
        while conns.try_join_next().is_some() {}
        if conns.len() >= CALLBACK_CONNS {
            debug!("OAuth callback: {CALLBACK_CONNS} connections open already; one refused");
            continue;
        }
        let (slot, state, iss) = (slot.clone(), state.clone(), iss.clone());
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let (path, query) = (req.uri().path(), req.uri().query());
                let r = callback_answer(path, query, &state, &iss, &slot);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), svc);
            let _ = tokio::time::timeout(Duration::from_secs(30), conn).await;
        });
    }
}

fn page(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>mcp-bridge</title>\
         <body style=\"font-family:sans-serif\"><p>{text}</p></body>"
    );
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn callback_answer(
    path: &str,
    query: Option<&str>,
    state: &str,
    iss: &IssCheck,
    slot: &Mutex<Option<mpsc::Sender<Callback>>>,
) -> Response<Full<Bytes>> {
    if path != "/callback" {
        return page(StatusCode::NOT_FOUND, "Not found.");
    }
    let q: HashMap<String, String> = url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let state_ok = q
        .get("state")
        .is_some_and(|s| subtle::ConstantTimeEq::ct_eq(s.as_bytes(), state.as_bytes()).into());
    if !state_ok {
        debug!("OAuth callback with a wrong or missing state ignored");
        return page(
            StatusCode::BAD_REQUEST,
            "This login link is not the one mcp-bridge is waiting for.",
        );
    }
    // RFC 9207 before anything else of the response, an error included: a response that
    // may come from another server says nothing about this one.
    let outcome = iss.check(q.get("iss").map(String::as_str)).and_then(|()| {
        match (q.get("code"), q.get("error")) {
            (Some(c), None) if !c.is_empty() => Ok(c.clone()),
            (_, Some(e)) => Err(format!(
                "the authorization server refused the login: {e}{}",
                q.get("error_description")
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )),
            _ => Err("the OAuth callback carried no code".into()),
        }
    });
    let ok = outcome.is_ok();
    if let Some(tx) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = tx.try_send(outcome);
    }
    if ok {
        page(
            StatusCode::OK,
            "Logged in. You can close this window and return to your application.",
        )
    } else {
        page(
            StatusCode::BAD_REQUEST,
            "The login failed; see mcp-bridge's log.",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ports_are_stable_and_high() {
        let a = derived_port("https://a.example/mcp");
        assert_eq!(a, derived_port("https://a.example/mcp"));
        assert!((61000..=65000).contains(&a));
        assert_ne!(a, derived_port("https://b.example/mcp"));
    }

    fn iss(issuer: &str, required: bool) -> IssCheck {
        IssCheck {
            issuer: issuer.into(),
            required,
        }
    }

    #[test]
    fn the_callback_checks_state_and_answers_once() {
        let (tx, mut rx) = mpsc::channel(1);
        let slot = Mutex::new(Some(tx));
        let any = iss("https://as.example", false);
        let r = callback_answer("/callback", Some("code=c1&state=bad"), "s1", &any, &slot);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(rx.try_recv().is_err());
        assert_eq!(
            callback_answer("/other", Some("code=c1&state=s1"), "s1", &any, &slot).status(),
            StatusCode::NOT_FOUND
        );
        let r = callback_answer("/callback", Some("code=c%2B1&state=s1"), "s1", &any, &slot);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(rx.try_recv().unwrap(), Ok("c+1".to_owned()));
        let _ = callback_answer("/callback", Some("code=c2&state=s1"), "s1", &any, &slot);
        assert!(rx.try_recv().is_err(), "a second callback is not delivered");
    }

    /// RFC 9207 as the 2026 conformance scenarios check it: exact compare whenever `iss` is
    /// there, required when advertised.
    #[test]
    fn the_authorization_responses_iss_is_the_issuer_exactly() {
        let answer = |check: &IssCheck, q: &str| {
            let (tx, mut rx) = mpsc::channel(1);
            let slot = Mutex::new(Some(tx));
            let r = callback_answer("/callback", Some(q), "s1", check, &slot);
            (r.status(), rx.try_recv().unwrap())
        };
        let (advertised, silent) = (
            iss("https://as.example", true),
            iss("https://as.example", false),
        );
        let ok = "code=c1&state=s1&iss=https%3A%2F%2Fas.example";
        assert_eq!(answer(&advertised, ok), (StatusCode::OK, Ok("c1".into())));
        assert_eq!(answer(&silent, ok).1, Ok("c1".into()));
        assert_eq!(answer(&silent, "code=c1&state=s1").1, Ok("c1".into()));
        for (check, q, why) in [
            (&advertised, "code=c1&state=s1", "has no iss"),
            (
                &advertised,
                "code=c1&state=s1&iss=https%3A%2F%2Fevil.example",
                "evil.example",
            ),
            (
                &silent,
                "code=c1&state=s1&iss=https%3A%2F%2Fevil.example",
                "evil.example",
            ),
            (
                &advertised,
                "code=c1&state=s1&iss=https%3A%2F%2Fas.example%2F",
                "as.example/",
            ),
            (&advertised, "error=access_denied&state=s1&iss=x", "\"x\""),
        ] {
            let (status, got) = answer(check, q);
            assert_eq!(status, StatusCode::BAD_REQUEST, "{q}");
            let e = got.unwrap_err();
            assert!(e.contains(why) && e.contains("RFC 9207"), "{q}: {e}");
        }
    }
}
