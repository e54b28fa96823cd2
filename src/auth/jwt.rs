//! JWT access tokens (RFC 9068 style) checked against a JWKS.
//!
//! Order of checks: the header's `alg` must be on the allow-list (RS256, ES256, EdDSA; `none`
//! and every HMAC algorithm are refused before any key is looked at, which also closes the
//! "HS256 signed with the public key" confusion), the key is found by `kid` (an unknown one
//! triggers one rate-limited JWKS refresh), the key's type must match `alg`, then the signature,
//! `exp`/`nbf` (with leeway), `iss` and `aud` are checked by `jsonwebtoken`.
//!
//! Keys are cached by `kid` and refreshed in the background (every [`REFRESH_EVERY`], with
//! exponential backoff after a failure) and on SIGHUP (a part of `crate::reload`); symmetric (`oct`) keys in a JWKS are ignored.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::{fetch, Refusal};
use crate::reload::{Part, Reloader};

/// Normal JWKS refresh interval.
pub const REFRESH_EVERY: Duration = Duration::from_secs(300);
/// Least time between two refreshes caused by unknown `kid`s.
pub const DEMAND_INTERVAL: Duration = Duration::from_secs(10);
/// Time limit of one JWKS fetch.
pub const FETCH_LIMIT: Duration = Duration::from_secs(10);

/// Where the keys come from.
#[derive(Debug, Clone)]
pub enum Source {
    Url(fetch::Target),
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Config {
    pub source: Source,
    pub issuer: Option<String>,
    pub audiences: Vec<String>,
    pub leeway: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Rsa,
    P256,
    Ed25519,
}

struct Key {
    family: Family,
    /// The JWK's own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Arc<Key>>,
    /// Keys without a `kid`.
    anonymous: Vec<Arc<Key>>,
}

impl KeySet {
    fn len(&self) -> usize {
        self.by_kid.len() + self.anonymous.len()
    }
}

/// The verifier: configuration plus the key cache.
pub struct Verifier {
    cfg: Config,
    keys: RwLock<Arc<KeySet>>,
    last_demand: Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
}

fn allowed(alg: &str) -> Option<(Algorithm, Family)> {
    match alg {
        "RS256" => Some((Algorithm::RS256, Family::Rsa)),
        "ES256" => Some((Algorithm::ES256, Family::P256)),
        "EdDSA" => Some((Algorithm::EdDSA, Family::Ed25519)),
        _ => None,
    }
}

const MALFORMED: Refusal = Refusal::new(
    "malformed",
    Some("invalid_token"),
    "The access token is malformed",
);

/// Parse a JWKS document into usable public keys (unsupported and symmetric keys skipped).
fn parse_jwks(bytes: &[u8]) -> Result<KeySet, String> {
    #[derive(serde::Deserialize)]
    struct Doc {
        keys: Vec<Value>,
    }
    let doc: Doc = serde_json::from_slice(bytes).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut out = KeySet::default();
    // One key at a time, so a key type we do not know does not spoil the others.
    for jwk in doc
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k).ok())
    {
        let jwk = &jwk;
        let family = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Family::Rsa,
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Family::P256,
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                Family::Ed25519
            }
            _ => continue, // oct (HMAC) keys, other curves: never used
        };
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
            Some(KeyAlgorithm::ES256) => Some(Algorithm::ES256),
            Some(KeyAlgorithm::EdDSA) => Some(Algorithm::EdDSA),
            Some(_) => continue,
        };
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        let k = Arc::new(Key { family, alg, key });
        match &jwk.common.key_id {
            Some(kid) => {
                out.by_kid.insert(kid.clone(), k);
            }
            None => out.anonymous.push(k),
        }
    }
    if out.len() == 0 {
        return Err("the JWKS holds no usable RS256/ES256/EdDSA key".into());
    }
    Ok(out)
}

/// The header fields we need, read without trusting anything yet.
fn header(token: &str) -> Result<(String, Option<String>), Refusal> {
    let mut parts = token.split('.');
    let (Some(h), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(MALFORMED);
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(h)
        .map_err(|_| MALFORMED)?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| MALFORMED)?;
    let alg = v.get("alg").and_then(Value::as_str).ok_or(MALFORMED)?;
    let kid = v.get("kid").and_then(Value::as_str).map(str::to_owned);
    Ok((alg.to_owned(), kid))
}

fn refusal(e: &jsonwebtoken::errors::Error) -> Refusal {
    use jsonwebtoken::errors::ErrorKind as K;
    let inv = Some("invalid_token");
    match e.kind() {
        K::ExpiredSignature => Refusal::new("expired", inv, "The access token expired"),
        K::ImmatureSignature => {
            Refusal::new("not_yet_valid", inv, "The access token is not valid yet")
        }
        K::InvalidIssuer => Refusal::new("issuer", inv, "The access token has the wrong issuer"),
        K::InvalidAudience => Refusal::new(
            "audience",
            inv,
            "The access token was not issued for this resource",
        ),
        K::InvalidSignature => {
            Refusal::new("signature", inv, "The access token signature is invalid")
        }
        K::InvalidAlgorithm => Refusal::new(
            "algorithm",
            inv,
            "The access token algorithm is not allowed",
        ),
        K::MissingRequiredClaim(_) => Refusal::new(
            "missing_claim",
            inv,
            "The access token lacks a required claim",
        ),
        _ => MALFORMED,
    }
}

impl Verifier {
    pub fn new(cfg: Config) -> Arc<Verifier> {
        Arc::new(Verifier {
            cfg,
            keys: RwLock::new(Arc::new(KeySet::default())),
            last_demand: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// First load, then background refresh, and a refresh on every SIGHUP (registered with
    /// `reloader`). A JWKS file that cannot be used is a start-up error; an unreachable JWKS
    /// URL is not (the authorization server may start later): tokens are refused until the
    /// keys arrive.
    pub async fn start(self: &Arc<Self>, strict: bool, reloader: &Reloader) -> Result<(), String> {
        let first = self.refresh().await;
        match (&first, &self.cfg.source) {
            (Err(e), Source::File(p)) => return Err(format!("--jwks-file {}: {e}", p.display())),
            (Err(e), Source::Url(_)) if strict => return Err(format!("JWKS: {e}")),
            (Err(e), Source::Url(_)) => {
                warn!("JWKS not loaded yet ({e}); retrying in the background")
            }
            (Ok(n), _) => info!(keys = n, "JWKS loaded"),
        }
        // SIGHUP fetches (or re-reads) the JWKS at once: a rotated key or an edited file.
        reloader.register(Part::Jwt, self, |v| async move {
            let n = v.refresh().await?;
            Ok(format!("JWKS reloaded: {n} keys"))
        });
        let me = Arc::downgrade(self);
        let mut delay = if first.is_ok() {
            REFRESH_EVERY
        } else {
            Duration::from_secs(1)
        };
        reloader.spawn_trigger(async move {
            loop {
                tokio::time::sleep(delay).await;
                let Some(v) = me.upgrade() else { break };
                delay = match v.refresh().await {
                    Ok(n) => {
                        debug!(keys = n, "JWKS refreshed");
                        REFRESH_EVERY
                    }
                    Err(e) => {
                        let next = (delay * 2).clamp(Duration::from_secs(1), REFRESH_EVERY);
                        warn!(
                            "JWKS refresh failed ({e}); next try in {} s",
                            next.as_secs()
                        );
                        next
                    }
                };
            }
        });
        Ok(())
    }

    fn load_keys(&self) -> Arc<KeySet> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fetch (or read) the JWKS and replace the cache. On failure the old keys stay.
    pub async fn refresh(&self) -> Result<usize, String> {
        let bytes = match &self.cfg.source {
            Source::Url(t) => fetch::get(t, FETCH_LIMIT).await?,
            Source::File(p) => tokio::fs::read(p)
                .await
                .map_err(|e| format!("cannot read: {e}"))?
                .into(),
        };
        let set = parse_jwks(&bytes)?;
        let n = set.len();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(n)
    }

    /// A refresh for an unknown `kid`, at most once per [`DEMAND_INTERVAL`]; concurrent
    /// callers wait for the one refresh in progress.
    async fn refresh_on_demand(&self) {
        let _one = self.refreshing.lock().await;
        {
            let mut last = self.last_demand.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < DEMAND_INTERVAL) {
                return;
            }
            *last = Some(Instant::now());
        }
        match tokio::time::timeout(super::DEMAND_REFRESH_WAIT, self.refresh()).await {
            Ok(Ok(n)) => info!(keys = n, "JWKS refreshed for an unknown key id"),
            Ok(Err(e)) => warn!("JWKS refresh for an unknown key id failed: {e}"),
            Err(_) => warn!("JWKS refresh for an unknown key id timed out"),
        }
    }

    /// Verify a token; on success the claims.
    pub async fn verify(&self, token: &str) -> Result<Value, Refusal> {
        let (alg_name, kid) = header(token)?;
        let Some((alg, family)) = allowed(&alg_name) else {
            return Err(Refusal::new(
                "algorithm",
                Some("invalid_token"),
                "The access token algorithm is not allowed",
            ));
        };
        let candidates = |ks: &KeySet| -> Vec<Arc<Key>> {
            match &kid {
                Some(k) => ks.by_kid.get(k).cloned().into_iter().collect(),
                None => ks
                    .anonymous
                    .iter()
                    .chain(ks.by_kid.values())
                    .filter(|k| k.family == family)
                    .cloned()
                    .collect(),
            }
        };
        let mut keys = candidates(&self.load_keys());
        if keys.is_empty() {
            self.refresh_on_demand().await;
            keys = candidates(&self.load_keys());
        }
        if keys.is_empty() {
            return Err(Refusal::new(
                "unknown_kid",
                Some("invalid_token"),
                "The access token was signed with an unknown key",
            ));
        }
        let mut v = Validation::new(alg);
        v.leeway = self.cfg.leeway;
        v.validate_nbf = true;
        v.validate_exp = true;
        v.validate_aud = true;
        v.set_audience(&self.cfg.audiences);
        let mut required = vec!["exp", "aud"];
        if let Some(iss) = &self.cfg.issuer {
            v.set_issuer(&[iss]);
            required.push("iss");
        }
        v.set_required_spec_claims(&required);
        let mut last = Refusal::new(
            "signature",
            Some("invalid_token"),
            "The access token signature is invalid",
        );
        for k in keys {
            if k.family != family || k.alg.is_some_and(|a| a != alg) {
                last = Refusal::new(
                    "algorithm",
                    Some("invalid_token"),
                    "The access token algorithm does not match its key",
                );
                continue;
            }
            match jsonwebtoken::decode::<Value>(token, &k.key, &v) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    last = refusal(&e);
                    if last.reason != "signature" {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }
}

/// The smallest surface the fuzz targets (`fuzz/`) need: the JWKS parse, and a verifier
/// that already holds a key set (no file, no network). Not part of the bridge's API.
#[doc(hidden)]
pub mod fuzzing {
    use std::sync::Arc;

    use super::{parse_jwks, Config, Verifier};

    /// How many usable keys a JWKS document holds.
    pub fn jwks_keys(bytes: &[u8]) -> Result<usize, String> {
        parse_jwks(bytes).map(|s| s.len())
    }

    /// A verifier with the keys of `jwks` loaded.
    pub fn verifier(cfg: Config, jwks: &[u8]) -> Result<Arc<Verifier>, String> {
        let v = Verifier::new(cfg);
        let set = parse_jwks(jwks)?;
        *v.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        Ok(v)
    }
}

/// Scopes a token grants: `scope` (space-separated, RFC 9068) or `scp` (string or array).
pub fn scopes(claims: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for key in ["scope", "scp"] {
        match claims.get(key) {
            Some(Value::String(s)) => out.extend(s.split_whitespace().map(str::to_owned)),
            Some(Value::Array(a)) => {
                out.extend(a.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    out
}

/// Whether `need` is granted: exactly, or by a broader scope it is nested under
/// (`files` grants `files:read`).
pub fn scope_granted(granted: &[String], need: &str) -> bool {
    granted.iter().any(|g| {
        g == need
            || need
                .strip_prefix(g.as_str())
                .is_some_and(|rest| rest.starts_with(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_rules() {
        let g = vec!["files".to_owned(), "mail:read".to_owned()];
        assert!(scope_granted(&g, "files:write"));
        assert!(scope_granted(&g, "mail:read"));
        assert!(!scope_granted(&g, "mail:write"));
        assert!(!scope_granted(&g, "filesystem"));
        assert_eq!(
            scopes(&serde_json::json!({"scope": "a b", "scp": ["c"]})),
            vec!["a", "b", "c"]
        );
    }

    #[test]
    fn header_checks_shape() {
        assert_eq!(header("a.b").unwrap_err().reason, "malformed");
        assert_eq!(header("a.b.c.d").unwrap_err().reason, "malformed");
        // {"alg":"none"}
        let (alg, kid) = header("eyJhbGciOiJub25lIn0.e30.").unwrap();
        assert_eq!((alg.as_str(), kid), ("none", None));
    }

    #[test]
    fn jwks_skips_symmetric_keys() {
        let Err(e) = parse_jwks(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}"#) else {
            panic!("an oct-only JWKS was accepted")
        };
        assert!(e.contains("no usable"));
    }
}
