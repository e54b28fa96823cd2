//! The OAuth 2.1 client of `connect` (MCP authorization): when the remote answers 401 with a
//! Bearer challenge, discover its authorization server, find out who we are there, log in in
//! the browser, and keep the tokens (refreshed ahead of expiry and on a later 401).
//!
//! The grants (PKCE S256, the authorization-code exchange, refresh) are the `oauth2` crate's,
//! sent through our own hyper/rustls client (`http`); what it does not do is written here and
//! small: `challenge` (the `WWW-Authenticate` parser), `discovery` (RFC 9728 / RFC 8414 / OIDC
//! metadata), `register` (static client or RFC 7591), `store` (the per-server file), `login`
//! (callback listener, browser, grants). This file owns the state of one server's login:
//! [`OAuth`] hands out the current `Authorization` value, refreshes it ahead of expiry, and on
//! a 401 refreshes or logs in, one at a time: within the process (a tokio mutex; a request
//! that finds the token already replaced while it waited just uses the new one) and across
//! processes (`store::Store::lock`, a file lock: copies of the bridge a host starts together
//! log in once, one copy owning the callback port and the browser, and a rotating refresh
//! token is never spent twice; a copy that waited uses the token the holder stored).
//!
//! The grant is the browser's by default; `--oauth-device-code` (RFC 8628) and
//! `--oauth-client-credentials` (a machine; a client secret or `private_key_jwt` from
//! [`assertion`]) log in without one: same discovery, same store. A client-credentials token
//! that expires is simply asked for again. A 403 `insufficient_scope` is the other way in
//! ([`Need::Scope`]): the same grant runs again asking for the union of the scopes already
//! asked for and the challenge's, once; a server that still refuses gets no further login for
//! scopes already asked for ([`Recover::Scope`]).
//!
//! A token goes only to the one server URL this client was made for (the remote adds it to its
//! own requests, never to a redirect or another host), and never into a log line: tokens are
//! [`store::Secret`]s and header values are marked sensitive.

pub mod admin;
pub mod assertion;
pub mod challenge;
pub mod device;
pub mod discovery;
pub mod dpop;
pub mod exchange;
mod grants;
pub mod http;
pub mod login;
pub mod register;
pub mod store;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::HeaderValue;
use tracing::{info, warn};
use url::Url;

use self::challenge::Bearer;
use self::discovery::DiscoverError;
use self::discovery::Discovered;
use self::http::{Fetch, Https, Prover};
use self::login::{Grant, GrantError, LoginSettings};
use self::register::StaticClient;
use self::store::{now_secs, Record, Store, TokenRecord, VERSION};

/// Refresh this long before the token expires.
pub const REFRESH_AHEAD: u64 = 60;

/// When the client logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// On a 401 that carries a Bearer challenge whose resource publishes metadata; any other
    /// 401 keeps its advice about tokens.
    Auto,
    /// OAuth flags were given: any 401 starts discovery, and its failure is an error.
    Always,
}

/// Everything from the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    pub trigger: Trigger,
    pub dir: PathBuf,
    pub client: StaticClient,
    pub scope: Option<String>,
    pub no_resource: bool,
    pub login: LoginSettings,
    /// When logins prove possession of a key (RFC 9449).
    pub dpop: dpop::Mode,
    /// The workload's JWT ([`Grant::JwtBearer`]).
    pub workload: Option<exchange::Source>,
    /// The enterprise identity provider ([`Grant::Enterprise`]).
    pub idp: Option<exchange::Idp>,
}

/// What the remote's refusal asks of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A 401: a (fresh) token.
    Token,
    /// A 403 `insufficient_scope`: a token with these scopes too (space-separated).
    Scope(String),
}

/// Why a 401 or 403 could not be recovered from.
#[derive(Debug)]
pub enum Recover {
    /// Not an OAuth-protected server (as far as we can tell): keep the 401.
    NotOAuth,
    /// The login or refresh failed; the message says why (no secrets).
    Failed(String),
    /// The scopes (space-separated) were asked for already and not granted: no new login.
    Scope(String),
}

/// The scopes of space-separated lists, each once, in order.
pub fn scope_union<'a>(lists: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for s in lists.into_iter().flatten().flat_map(str::split_whitespace) {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// Does the list `have` hold every scope of `want`?
fn scopes_cover(have: Option<&str>, want: &str) -> bool {
    let have: Vec<&str> = have.unwrap_or("").split_whitespace().collect();
    want.split_whitespace().all(|w| have.contains(&w))
}

/// One server's login state.
pub struct OAuth {
    settings: OAuthSettings,
    server: Url,
    fetch: Fetch,
    store: Store,
    record: Mutex<Option<Record>>,
    /// One login or refresh at a time.
    busy: tokio::sync::Mutex<()>,
    logging_in: AtomicBool,
    /// Logins attempted so far, and the last one's failure (with its number): requests that
    /// queued behind a failed login share its answer instead of each starting another.
    attempts: AtomicU64,
    last_failure: Mutex<Option<(u64, (String, bool))>>,
    /// The scopes the last login asked for, and those a step-up added (kept by later logins).
    asked: Mutex<Option<String>>,
    wider: Mutex<Option<String>>,
    /// The login's DPoP key, parsed once from the record; the authorization server's and the
    /// resource server's last nonces.
    dpop_key: Mutex<Option<Arc<dpop::Key>>>,
    as_nonce: Arc<dpop::Nonce>,
    rs_nonce: dpop::Nonce,
    /// The last assertion (workload JWT or ID token; its SHA-256) the grant refused, and why:
    /// it is not presented again (SEP-1933), only a new one is.
    refused: Mutex<Option<(String, String)>>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("server", &self.server.as_str())
            .field("store", &self.store.path())
            .finish_non_exhaustive()
    }
}

/// The `Authorization` value of `t`: `DPoP` for a token bound to the login's key (RFC 9449
/// §7.1), else `Bearer`.
fn auth_value(t: &TokenRecord) -> Option<HeaderValue> {
    let scheme = if t.dpop() { "DPoP" } else { "Bearer" };
    let mut v = HeaderValue::from_str(&format!("{scheme} {}", t.access_token.0)).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// Set while alive (cleared also when the login future is dropped midway).
struct Flag<'a>(&'a AtomicBool);

impl<'a> Flag<'a> {
    fn raise(b: &'a AtomicBool) -> Self {
        b.store(true, Ordering::Relaxed);
        Flag(b)
    }
}

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl OAuth {
    /// The client for `server`, with whatever login is stored for it.
    pub fn new(settings: OAuthSettings, server: &str, client: Https) -> Result<Self, String> {
        let server = Url::parse(server).map_err(|e| format!("{server}: {e}"))?;
        let mut client_key = format!(
            "{}|{}",
            settings.client.client_id.as_deref().unwrap_or(""),
            settings.scope.as_deref().unwrap_or("")
        );
        // The browser's key stays as it was (its stored logins stay valid); another grant has
        // logins of its own.
        if settings.login.grant != Grant::Browser {
            client_key = format!("{client_key}|{}", settings.login.grant.name());
        }
        if let Some(u) = &settings.client.metadata_url {
            client_key = format!("{client_key}|cimd={u}");
        }
        let resource_key = if settings.no_resource {
            "no-resource"
        } else {
            "resource"
        };
        let store = Store::new(
            &settings.dir,
            &[
                discovery::canonical(&server).as_str(),
                resource_key,
                &client_key,
            ],
        );
        let record = store
            .load()
            .filter(|r| r.server == discovery::canonical(&server));
        if record.as_ref().is_some_and(|r| r.token.is_some()) {
            info!(
                "using the stored login for {}",
                discovery::canonical(&server)
            );
        }
        Ok(OAuth {
            fetch: Fetch::new(client, Duration::from_secs(30)),
            settings,
            server,
            store,
            record: Mutex::new(record),
            busy: tokio::sync::Mutex::new(()),
            logging_in: AtomicBool::new(false),
            attempts: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            asked: Mutex::new(None),
            wider: Mutex::new(None),
            dpop_key: Mutex::new(None),
            as_nonce: Arc::default(),
            rs_nonce: dpop::Nonce::default(),
            refused: Mutex::new(None),
        })
    }

    /// Is a token kept (from the store or a login in this run)?
    pub fn logged_in(&self) -> bool {
        self.token().is_some()
    }

    /// Is an interactive login under way (so that a caller's own time limit may wait for it)?
    pub fn logging_in(&self) -> bool {
        self.logging_in.load(Ordering::Relaxed)
    }

    /// How long an interactive login may take.
    pub fn login_timeout(&self) -> Duration {
        self.settings.login.timeout
    }

    fn token(&self) -> Option<TokenRecord> {
        let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().and_then(|r| r.token.clone())
    }

    /// The `Authorization` value to send now, refreshed first when it expires within
    /// [`REFRESH_AHEAD`] seconds, or a quarter of its lifetime when that is shorter (a failed
    /// refresh leaves it to the 401 path); a client credentials token is asked for again
    /// instead.
    pub async fn header(&self) -> Option<HeaderValue> {
        let t = self.token()?;
        let due = t.due(now_secs());
        let machine = !self.settings.login.grant.needs_person();
        if due && (t.refresh_token.is_some() || machine) {
            // Boxed: rare, and its future (a refresh or a login) is large; every request's
            // future would carry it.
            Box::pin(self.renew_ahead(t)).await;
        }
        self.token().as_ref().and_then(auth_value)
    }

    /// The token `t` is about to expire: refresh it (or get a new one), unless another
    /// request (or another copy of the bridge) has already done so.
    async fn renew_ahead(&self, t: TokenRecord) {
        let _g = self.busy.lock().await;
        if self.token().as_ref() == Some(&t) {
            match self.lock_and_adopt(Some(&t)).await {
                // Another copy refreshed it meanwhile: its token is ours now.
                Ok((_lock, Some(_))) => {}
                Ok((_lock, None)) if t.refresh_token.is_some() => {
                    info!("the access token expires soon: refreshing it");
                    if let Err(e) = self.refresh().await {
                        warn!("refreshing ahead of expiry failed: {e}");
                    }
                }
                Ok((_lock, None)) => {
                    info!("the access token expires soon: asking for a new one");
                    if let Err(Recover::Failed(e) | Recover::Scope(e)) =
                        self.login(Bearer::default(), true).await
                    {
                        warn!("a new client credentials token failed: {e}");
                    }
                }
                Err(e) => warn!("refreshing ahead of expiry: {e}"),
            }
        }
    }

    /// The remote refused a request sent with `sent` (its `Authorization`, if any): 401
    /// ([`Need::Token`]: refresh or log in) or 403 `insufficient_scope` ([`Need::Scope`]: log in
    /// again asking for the wider scope). The value to retry with, once.
    pub async fn recover(
        &self,
        need: Need,
        challenge: Option<Bearer>,
        sent: Option<&HeaderValue>,
    ) -> Result<HeaderValue, Recover> {
        if self.settings.trigger == Trigger::Auto && challenge.is_none() {
            return Err(Recover::NotOAuth);
        }
        let seen = self.attempts.load(Ordering::SeqCst);
        let _g = self.busy.lock().await;
        if let Some((n, (why, scope))) = self
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            if n > seen {
                return Err(if scope {
                    Recover::Scope(why)
                } else {
                    Recover::Failed(why)
                });
            }
        }
        let had = self.token();
        if let Some(v) = had
            .as_ref()
            .and_then(auth_value)
            .filter(|v| Some(v) != sent)
        {
            return Ok(v);
        }
        // One copy of the bridge refreshes or logs in at a time; the others use its tokens.
        let (_lock, adopted) = self
            .lock_and_adopt(had.as_ref())
            .await
            .map_err(Recover::Failed)?;
        if let Some(v) = adopted {
            return Ok(v);
        }
        match &need {
            Need::Token => {
                if self.token().is_some_and(|t| t.refresh_token.is_some()) {
                    match self.refresh().await {
                        Ok(v) => return Ok(v),
                        Err(e) => warn!("refresh failed ({e}); logging in again"),
                    }
                }
            }
            Need::Scope(more) => {
                let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if scopes_cover(asked.as_deref(), more) {
                    info!("the server wants scope {more:?}, which the last login asked for and did not get");
                    return Err(Recover::Scope(more.clone()));
                }
                let granted = self.token().and_then(|t| t.scope);
                let want = scope_union([asked.as_deref(), granted.as_deref(), Some(more)]);
                info!(
                    "the server wants scope {more:?}: logging in again for {}",
                    want.as_deref().unwrap_or("")
                );
                *self.wider.lock().unwrap_or_else(|p| p.into_inner()) = want;
            }
        }
        let r = {
            let _flag = Flag::raise(&self.logging_in);
            self.login(challenge.unwrap_or_default(), false).await
        };
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = match &r {
            Err(Recover::Failed(why)) => Some((n, (why.clone(), false))),
            Err(Recover::Scope(why)) => Some((n, (why.clone(), true))),
            _ => None,
        };
        r
    }

    /// Take this server's cross-process login lock (waiting at most the login timeout and a
    /// margin, as a login under way in another copy may take that long); when the store then
    /// holds a token other than `had` (another copy logged in or refreshed meanwhile), it
    /// becomes ours: its header value.
    async fn lock_and_adopt(
        &self,
        had: Option<&TokenRecord>,
    ) -> Result<(store::LoginLock, Option<HeaderValue>), String> {
        let lock = {
            let _waiting = Flag::raise(&self.logging_in);
            let wait = self.settings.login.timeout + Duration::from_secs(30);
            self.store.lock(wait).await?
        };
        let stored = self
            .store
            .read()
            .await
            .filter(|r| r.server == discovery::canonical(&self.server));
        let Some(r) = stored.filter(|r| r.token.is_some() && r.token.as_ref() != had) else {
            return Ok((lock, None));
        };
        info!("using the login another copy of mcp-bridge made or refreshed for this server");
        let v = r.token.as_ref().and_then(auth_value);
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        Ok((lock, v))
    }

    /// The DPoP key of `r`, parsed once (None: the login proves nothing, or its key is bad).
    fn key_of(&self, r: &Record) -> Option<Arc<dpop::Key>> {
        let kept = r.dpop_key.as_ref()?;
        let mut cache = self.dpop_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = cache.as_ref().filter(|k| k.kept() == kept) {
            return Some(k.clone());
        }
        match dpop::Key::from_pkcs8(kept) {
            Ok(k) => {
                let k = Arc::new(k);
                *cache = Some(k.clone());
                Some(k)
            }
            Err(e) => {
                warn!(
                    "{}: {e}; a new login makes a new key",
                    self.store.path().display()
                );
                None
            }
        }
    }

    /// The fetcher for `r`'s token requests: proving possession of its key, if it has one.
    fn grant_fetch(&self, r: &Record) -> Fetch {
        let prover = self.key_of(r).map(|key| Prover {
            key,
            token_endpoint: Url::parse(&r.auth_server.token_endpoint)
                .map(|u| dpop::htu(u.as_str()).to_owned())
                .unwrap_or_else(|_| r.auth_server.token_endpoint.clone()),
            nonce: self.as_nonce.clone(),
        });
        self.fetch.proving(prover)
    }

    /// The DPoP proof for a `method` request to `uri` that carries `authorization` (the value
    /// [`OAuth::header`] gave): None unless that is a DPoP-bound token of this login.
    pub fn proof(
        &self,
        method: &str,
        uri: &str,
        authorization: &HeaderValue,
    ) -> Option<HeaderValue> {
        let token = authorization.to_str().ok()?.strip_prefix("DPoP ")?;
        let rec = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let Some(key) = self.key_of(&rec) else {
            warn!("a DPoP-bound token without its key: sending it without a proof");
            return None;
        };
        let nonce = self.rs_nonce.get();
        match key.proof(method, uri, Some(token), nonce.as_deref()) {
            Ok(p) => HeaderValue::from_str(&p).ok(),
            Err(e) => {
                warn!("{e}");
                None
            }
        }
    }

    /// The remote named a nonce (`DPoP-Nonce`) for the next proofs; true if it was new.
    pub fn server_nonce(&self, v: &str) -> bool {
        let was = self.rs_nonce.get();
        self.rs_nonce.set(v) && was.as_deref() != Some(v)
    }

    fn resource_param<'a>(&self, r: &'a Record) -> Option<&'a str> {
        (!self.settings.no_resource).then_some(r.resource.as_str())
    }

    /// The refresh grant (the caller holds `busy`). `invalid_grant` drops the token.
    async fn refresh(&self) -> Result<HeaderValue, String> {
        let Some(rec) = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return Err("no stored login".into());
        };
        let (Some(client), Some(t)) = (&rec.client, &rec.token) else {
            return Err("no stored login".into());
        };
        let Some(rt) = &t.refresh_token else {
            return Err("no refresh token".into());
        };
        let r = login::refresh(
            &self.grant_fetch(&rec),
            &rec.auth_server,
            client,
            rt,
            self.resource_param(&rec),
        )
        .await;
        match r {
            Ok(t) => {
                info!("refreshed the access token for {}", rec.resource);
                self.keep(Record {
                    token: Some(t),
                    ..rec
                })
                .await
                .ok_or_else(|| "the new token is not a valid header".to_owned())
            }
            Err(GrantError::InvalidGrant) => {
                info!("the refresh token was refused (invalid_grant): a new login is needed");
                self.keep(Record { token: None, ..rec }).await;
                Err("invalid_grant".into())
            }
            Err(GrantError::Other(e)) => Err(e),
        }
    }

    /// Keep `r` in memory and on disk (written off the runtime's threads); the header value
    /// of its token.
    async fn keep(&self, r: Record) -> Option<HeaderValue> {
        if let Err(e) = self.store.write(r.clone()).await {
            warn!(
                "cannot save the login to {}: {e}",
                self.store.path().display()
            );
        }
        let v = r.token.as_ref().and_then(auth_value);
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        v
    }

    /// The stored login's discovery (a client credentials token asked for again ahead of
    /// expiry needs no new discovery).
    fn known(&self) -> Option<Discovered> {
        let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().map(|r| Discovered {
            resource: r.resource.clone(),
            server: r.auth_server.clone(),
            scope: None,
            resource_dpop: r.dpop_key.is_some(),
        })
    }

    /// Discovery (or, with `reuse`, the stored one), client, the grant, token (the caller
    /// holds `busy`).
    async fn login(&self, challenge: Bearer, reuse: bool) -> Result<HeaderValue, Recover> {
        let grant = self.settings.login.grant;
        let found = self.discover_for_login(&challenge, reuse).await?;
        if !self.settings.login.interactive && grant.needs_person() {
            let server = discovery::canonical(&self.server);
            return Err(Recover::Failed(format!(
                "{server} needs a login and nobody is at a browser here: run `mcp-bridge auth \
                 login {server}` with the same OAuth settings and --oauth-dir {}",
                self.settings.dir.display()
            )));
        }
        let base = self.settings.scope.clone().or(found.scope.clone());
        let wider = self.wider.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let scope = scope_union([base.as_deref(), wider.as_deref()]);
        // What is kept while the login runs: the registration, and the token in use (a step-up
        // that fails leaves the narrower token working).
        let mut rec = Record {
            version: VERSION,
            server: discovery::canonical(&self.server),
            resource: found.resource.clone(),
            auth_server: found.server.clone(),
            client: None,
            token: self.token(),
            dpop_key: None,
        };
        // A login that proves possession (RFC 9449 §5) keeps the key of the login file, which
        // the token still in use is bound to; the first such login (or one whose key is
        // unreadable) makes a new one.
        if self.settings.dpop.wanted(
            &found.server.dpop_signing_alg_values_supported,
            found.resource_dpop,
        ) {
            let stored = self
                .record
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let key = match stored.as_ref().and_then(|r| self.key_of(r)) {
                Some(k) => k,
                None => {
                    info!("the login proves possession of a new DPoP key (RFC 9449)");
                    Arc::new(dpop::Key::generate().map_err(Recover::Failed)?)
                }
            };
            rec.dpop_key = Some(key.kept().clone());
        }
        let token = match grant {
            Grant::Browser => self.browser(&found, &mut rec, scope.as_deref()).await?,
            Grant::DeviceCode => self.device(&found, &mut rec, scope.as_deref()).await?,
            Grant::ClientCredentials => self.machine(&found, &mut rec, scope.as_deref()).await?,
            Grant::JwtBearer => self.workload(&found, &mut rec, scope.as_deref()).await?,
            Grant::Enterprise => self.enterprise(&found, &mut rec, scope.as_deref()).await?,
        };
        // Asked for and got (a step-up for these scopes again would be a loop).
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = scope.clone();
        // RFC 6749 §5.1: no `scope` in the answer means the scopes asked for.
        rec.token = Some(TokenRecord {
            scope: token.scope.clone().or(scope),
            ..token
        });
        self.keep(rec)
            .await
            .ok_or_else(|| Recover::Failed("the token is not a valid header value".into()))
    }

    /// Where to log in: with `reuse`, the stored login's discovery; else discovery from the
    /// challenge. No metadata ends an automatic trigger (not OAuth) and gives an explicit one
    /// a 2025-03-26 server's default endpoints at its origin.
    async fn discover_for_login(
        &self,
        challenge: &Bearer,
        reuse: bool,
    ) -> Result<Discovered, Recover> {
        if let Some(k) = reuse.then(|| self.known()).flatten() {
            return Ok(k);
        }
        let browser = self.settings.login.grant == Grant::Browser;
        match discovery::discover(&self.fetch, &self.server, challenge, browser).await {
            Ok(d) => Ok(d),
            Err(DiscoverError::NoMetadata(tried)) if self.settings.trigger == Trigger::Auto => {
                info!(
                    "no OAuth metadata for {} (tried {tried}): not logging in",
                    self.server
                );
                Err(Recover::NotOAuth)
            }
            // OAuth was asked for: a 2025-03-26 server's default endpoints at its origin.
            Err(DiscoverError::NoMetadata(tried)) => {
                let d = discovery::legacy_defaults(&self.server, challenge);
                info!(
                    "no OAuth metadata for {} (tried {tried}): using the default endpoints \
                     at {} (MCP 2025-03-26)",
                    self.server, d.server.issuer
                );
                Ok(d)
            }
            Err(e) => Err(Recover::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_lists_union_in_order_and_cover() {
        assert_eq!(
            scope_union([Some("a b"), None, Some("b  c"), Some("")]).as_deref(),
            Some("a b c")
        );
        assert_eq!(scope_union([None, Some(" ")]), None);
        assert!(scopes_cover(Some("a b c"), "c a"));
        assert!(!scopes_cover(Some("a b"), "a d"));
        assert!(!scopes_cover(None, "a"));
        assert!(scopes_cover(None, ""));
    }
}
