//! DPoP at the resource server (RFC 9449 §7): a request whose access token is bound to a key
//! (`cnf.jkt` in the JWT) comes as `Authorization: DPoP <token>` with a `DPoP` header holding a
//! proof, a JWT signed by that key. [`Proofs::check`] verifies the proof: `typ` `dpop+jwt`, an
//! ES256 signature by the public key in its `jwk` header (no private part), `htm` the request's
//! method, `htu` the endpoint's canonical URL, `iat` within five minutes, `ath` the token's
//! SHA-256, and a `jti` not seen before (a bounded replay cache); the key's RFC 7638
//! thumbprint must then equal the token's `cnf.jkt` ([`bound_to`]). A bound token presented as
//! Bearer is refused: the binding would protect nothing.
//!
//! Written here rather than with `jsonwebtoken`: the key is in the proof itself (a JWK per
//! request, not a JWKS), and the checks are claims `jsonwebtoken` does not know; the signature
//! is one aws-lc-rs call. ES256 is the one algorithm (what the PRM advertises).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};
use base64::Engine;
use serde_json::{json, Value};

use super::Refusal;
use crate::oauth::dpop::{htu, token_hash};

/// What the PRM lists in `dpop_signing_alg_values_supported`.
pub const ALGS: &[&str] = &["ES256"];

/// How far a proof's `iat` may be from now.
const IAT_WINDOW: u64 = 300;

/// How many proof ids are remembered (each for the `iat` window).
const MAX_JTIS: usize = 65_536;

fn bad(description: &'static str) -> Refusal {
    Refusal::new("dpop_proof", Some("invalid_dpop_proof"), description)
}

fn b64d(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
}

/// The proofs seen lately (their `jti`s), so none is accepted twice.
#[derive(Default)]
pub struct Proofs {
    seen: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Proofs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proofs").finish_non_exhaustive()
    }
}

impl Proofs {
    /// Verify `proof` for a `method` request to `resource` carrying `token`; Ok: the key's
    /// thumbprint (what the token must be bound to).
    pub fn check(
        &self,
        proof: &str,
        method: &str,
        resource: &str,
        token: &str,
        now: u64,
    ) -> Result<String, Refusal> {
        let mut parts = proof.split('.');
        let (Some(h), Some(c), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("The DPoP proof is not a JWT"));
        };
        let header: Value = b64d(h)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| bad("The DPoP proof header is not JSON"))?;
        if header["typ"] != "dpop+jwt" || !ALGS.iter().any(|a| header["alg"] == *a) {
            return Err(bad(
                "The DPoP proof must be typ dpop+jwt, signed with ES256",
            ));
        }
        let jwk = &header["jwk"];
        let thumbprint =
            thumbprint(jwk).ok_or_else(|| bad("The DPoP proof's jwk is not a P-256 public key"))?;
        let point = public_point(jwk)
            .ok_or_else(|| bad("The DPoP proof's jwk is not a P-256 public key"))?;
        let signature =
            b64d(sig).ok_or_else(|| bad("The DPoP proof signature is not base64url"))?;
        let signed = &proof[..h.len() + 1 + c.len()];
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| bad("The DPoP proof signature is invalid"))?;
        let claims: Value = b64d(c)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| bad("The DPoP proof claims are not JSON"))?;
        if claims["htm"] != method {
            return Err(bad("The DPoP proof is for another method (htm)"));
        }
        let same_url = claims["htu"]
            .as_str()
            .is_some_and(|u| htu(u).trim_end_matches('/') == resource.trim_end_matches('/'));
        if !same_url {
            return Err(bad("The DPoP proof is for another URL (htu)"));
        }
        let fresh = claims["iat"]
            .as_u64()
            .is_some_and(|iat| iat.abs_diff(now) <= IAT_WINDOW);
        if !fresh {
            return Err(bad("The DPoP proof is too old or from the future (iat)"));
        }
        if claims["ath"].as_str() != Some(token_hash(token).as_str()) {
            return Err(bad("The DPoP proof is not for this access token (ath)"));
        }
        let jti = claims["jti"]
            .as_str()
            .filter(|j| !j.is_empty() && j.len() <= 256)
            .ok_or_else(|| bad("The DPoP proof has no jti"))?;
        self.first_use(&format!("{thumbprint}:{jti}"))?;
        Ok(thumbprint)
    }

    /// Remember `key`; Err if it was seen within the window (or no room is left).
    fn first_use(&self, key: &str) -> Result<(), Refusal> {
        let window = Duration::from_secs(2 * IAT_WINDOW);
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_JTIS {
            seen.retain(|_, at| now.duration_since(*at) < window);
        }
        if seen.contains_key(key) {
            return Err(bad("The DPoP proof was used before (jti)"));
        }
        if seen.len() >= MAX_JTIS {
            return Err(Refusal::new(
                "dpop_busy",
                Some("invalid_dpop_proof"),
                "Too many DPoP proofs at once; try again",
            ));
        }
        seen.insert(key.to_owned(), now);
        Ok(())
    }
}

/// The uncompressed point of a P-256 JWK with no private part.
fn public_point(jwk: &Value) -> Option<Vec<u8>> {
    if jwk["kty"] != "EC" || jwk["crv"] != "P-256" || jwk.get("d").is_some() {
        return None;
    }
    let x = b64d(jwk["x"].as_str()?)?;
    let y = b64d(jwk["y"].as_str()?)?;
    if x.len() != 32 || y.len() != 32 {
        return None;
    }
    let mut p = Vec::with_capacity(65);
    p.push(4);
    p.extend_from_slice(&x);
    p.extend_from_slice(&y);
    Some(p)
}

/// RFC 7638: base64url(SHA-256) of the required members in lexicographic order.
fn thumbprint(jwk: &Value) -> Option<String> {
    let (crv, kty, x, y) = (
        jwk["crv"].as_str()?,
        jwk["kty"].as_str()?,
        jwk["x"].as_str()?,
        jwk["y"].as_str()?,
    );
    let canonical = json!({"crv": crv, "kty": kty, "x": x, "y": y});
    Some(token_hash(&canonical.to_string()))
}

/// The thumbprint a token's claims bind it to (`cnf.jkt`), if any.
pub fn bound_to(claims: &Value) -> Option<&str> {
    claims.get("cnf")?.get("jkt")?.as_str()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::oauth::dpop::Key;

    const URL: &str = "http://127.0.0.1:1/mcp";

    fn now() -> u64 {
        crate::oauth::store::now_secs()
    }

    #[test]
    fn a_proof_of_the_key_for_this_request_passes_once() {
        let k = Key::generate().unwrap();
        let p = Proofs::default();
        let proof = k.proof("POST", URL, Some("tok"), None).unwrap();
        assert_eq!(
            p.check(&proof, "POST", URL, "tok", now()).unwrap(),
            k.thumbprint()
        );
        // Replayed.
        assert_eq!(
            p.check(&proof, "POST", URL, "tok", now())
                .unwrap_err()
                .reason,
            "dpop_proof"
        );
        // Another method, URL, token, time.
        for (m, u, t, at) in [
            ("GET", URL, "tok", now()),
            ("POST", "http://127.0.0.1:1/other", "tok", now()),
            ("POST", URL, "other", now()),
            ("POST", URL, "tok", now() + 3600),
        ] {
            let proof = k.proof("POST", URL, Some("tok"), None).unwrap();
            assert!(p.check(&proof, m, u, t, at).is_err(), "{m} {u} {t} {at}");
        }
        // A query on the URL is not part of htu.
        let proof = k
            .proof("POST", &format!("{URL}?x=1"), Some("tok"), None)
            .unwrap();
        assert!(p.check(&proof, "POST", URL, "tok", now()).is_ok());
    }

    #[test]
    fn forged_or_malformed_proofs_are_refused() {
        let k = Key::generate().unwrap();
        let other = Key::generate().unwrap();
        let p = Proofs::default();
        let proof = k.proof("POST", URL, Some("tok"), None).unwrap();
        let theirs = other.proof("POST", URL, Some("tok"), None).unwrap();
        // k's header and claims with other's signature.
        let (hc, _) = proof.rsplit_once('.').unwrap();
        let (_, sig) = theirs.rsplit_once('.').unwrap();
        assert!(p
            .check(&format!("{hc}.{sig}"), "POST", URL, "tok", now())
            .is_err());
        for junk in ["", "a.b", "a.b.c.d", "!!.??.**"] {
            assert!(p.check(junk, "POST", URL, "tok", now()).is_err(), "{junk}");
        }
        assert_eq!(bound_to(&json!({"cnf": {"jkt": "abc"}})), Some("abc"));
        assert_eq!(bound_to(&json!({"sub": "x"})), None);
    }
}
