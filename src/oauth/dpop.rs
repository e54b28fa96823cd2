//! DPoP (RFC 9449): proof-of-possession for the tokens of one login. A login whose
//! authorization server lists ES256 in `dpop_signing_alg_values_supported`, for a resource
//! that says it takes DPoP (a `DPoP` challenge or DPoP in its metadata: a Bearer-only one
//! would refuse a bound token on every request), or every login,
//! with `--oauth-dpop always`) gets a fresh P-256 key pair; its PKCS#8 form is kept in the
//! login's 0600 file beside the tokens, so a refresh after a restart proves the same key.
//! Every token request and every request that carries a DPoP-bound token gets a proof: a JWT
//! (`typ` `dpop+jwt`, the public key as `jwk`) naming the method (`htm`), the URL without query
//! or fragment (`htu`), a fresh `jti`, `iat`, and with a token its hash (`ath`). A server may
//! demand a nonce (`use_dpop_nonce` with a `DPoP-Nonce` header, §8 at the authorization
//! server, §9 at the resource server); [`Nonce`] keeps the last one each gave.
//!
//! Signed with aws-lc-rs directly, as [`super::assertion`] signs `private_key_jwt`: the proof
//! is three base64url parts, and `jsonwebtoken` would need the key as PEM and a second copy of
//! the public key in its own `Jwk` type.

use std::sync::Mutex;

use aws_lc_rs::digest::{digest, SHA256};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use base64::Engine;
use serde_json::json;

use super::store::{now_secs, Secret};

/// The one algorithm this client proves with.
pub const ALG: &str = "ES256";

/// The `error` of a challenge asking for a nonce.
pub const USE_NONCE: &str = "use_dpop_nonce";

/// The header a server names its nonce in.
pub const NONCE_HEADER: &str = "dpop-nonce";

/// When a login proves possession (`--oauth-dpop`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// When the authorization server lists ES256 in `dpop_signing_alg_values_supported` and
    /// the resource says it takes DPoP-bound tokens (its challenge or its metadata).
    #[default]
    Auto,
    /// Always (servers that support DPoP without saying so in their metadata).
    Always,
    /// Never: Bearer tokens only.
    Never,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "always" => Ok(Mode::Always),
            "never" => Ok(Mode::Never),
            _ => Err(format!("{s:?}: expected auto, always or never")),
        }
    }

    /// Does a login at an authorization server that lists `algs`, for a resource that does
    /// (`resource`) or does not say it takes DPoP, prove possession?
    pub fn wanted(self, algs: &[String], resource: bool) -> bool {
        match self {
            Mode::Auto => resource && algs.iter().any(|a| a == ALG),
            Mode::Always => true,
            Mode::Never => false,
        }
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// base64url(SHA-256(token)): the `ath` of a proof sent with `token`.
pub fn token_hash(token: &str) -> String {
    b64(digest(&SHA256, token.as_bytes()).as_ref())
}

/// A proof's `htu`: `uri` without query and fragment (RFC 9449 §4.2).
pub fn htu(uri: &str) -> &str {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    &uri[..end]
}

/// One login's key pair.
pub struct Key {
    pair: EcdsaKeyPair,
    pkcs8: Secret,
    /// The public key as a JWK (RFC 7517: `crv`, `kty`, `x`, `y`, in that order, which is
    /// also the member order the RFC 7638 thumbprint hashes).
    jwk: serde_json::Value,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("thumbprint", &self.thumbprint())
            .finish_non_exhaustive()
    }
}

impl Key {
    /// A new key pair.
    pub fn generate() -> Result<Key, String> {
        let doc =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| "cannot generate a DPoP key".to_owned())?;
        Key::from_pkcs8(&Secret(b64(doc.as_ref())))
    }

    /// The key kept in a login file (base64url PKCS#8).
    pub fn from_pkcs8(kept: &Secret) -> Result<Key, String> {
        let der = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(kept.0.as_bytes())
            .map_err(|_| "the stored DPoP key is not base64url".to_owned())?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
            .map_err(|_| "the stored DPoP key is not a P-256 PKCS#8 key".to_owned())?;
        let point = pair.public_key().as_ref();
        // An uncompressed point: 0x04, x (32 bytes), y (32 bytes).
        if point.len() != 65 || point[0] != 4 {
            return Err("the DPoP public key is not an uncompressed P-256 point".into());
        }
        let jwk = json!({
            "crv": "P-256",
            "kty": "EC",
            "x": b64(&point[1..33]),
            "y": b64(&point[33..65]),
        });
        Ok(Key {
            pair,
            pkcs8: kept.clone(),
            jwk,
        })
    }

    /// What the login file keeps.
    pub fn kept(&self) -> &Secret {
        &self.pkcs8
    }

    /// The RFC 7638 thumbprint (`jkt`) a server binds the token to.
    pub fn thumbprint(&self) -> String {
        // serde_json keeps the members sorted (no preserve_order): crv, kty, x, y.
        token_hash(&self.jwk.to_string())
    }

    /// A fresh proof for `method` on `uri`, with the hash of `token` when one is sent and the
    /// server's `nonce` when it gave one.
    pub fn proof(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        nonce: Option<&str>,
    ) -> Result<String, String> {
        let rng = SystemRandom::new();
        let mut jti = [0u8; 16];
        rng.fill(&mut jti)
            .map_err(|_| "no randomness for a DPoP proof".to_owned())?;
        let header = json!({ "typ": "dpop+jwt", "alg": ALG, "jwk": self.jwk });
        let mut claims = json!({
            "jti": b64(&jti),
            "htm": method,
            "htu": htu(uri),
            "iat": now_secs(),
        });
        if let Some(t) = token {
            claims["ath"] = token_hash(t).into();
        }
        if let Some(n) = nonce {
            claims["nonce"] = n.into();
        }
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self
            .pair
            .sign(&rng, input.as_bytes())
            .map_err(|_| "cannot sign a DPoP proof".to_owned())?;
        Ok(format!("{input}.{}", b64(sig.as_ref())))
    }
}

/// The last nonce a server gave (none until it asks).
#[derive(Debug, Default)]
pub struct Nonce(Mutex<Option<String>>);

/// Longest nonce kept (RFC 9449 gives none; servers send a few dozen characters).
const MAX_NONCE: usize = 1024;

impl Nonce {
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keep `v` (from a `DPoP-Nonce` header) if it is a nonce (RFC 9449 §8.1: NQCHAR, bounded).
    pub fn set(&self, v: &str) -> bool {
        let ok = !v.is_empty()
            && v.len() <= MAX_NONCE
            && v.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if ok {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(v.to_owned());
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    fn part(p: &str) -> serde_json::Value {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(p)
            .unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn a_proof_is_signed_by_its_jwk_and_names_the_request() {
        let k = Key::generate().unwrap();
        let p = k
            .proof(
                "POST",
                "https://rs.example/mcp?x=1#f",
                Some("tok"),
                Some("n-1"),
            )
            .unwrap();
        let parts: Vec<&str> = p.split('.').collect();
        assert_eq!(parts.len(), 3);
        let (h, c) = (part(parts[0]), part(parts[1]));
        assert_eq!(h["typ"], "dpop+jwt");
        assert_eq!(h["alg"], "ES256");
        assert!(h["jwk"].get("d").is_none(), "no private part: {h}");
        assert_eq!(c["htm"], "POST");
        assert_eq!(c["htu"], "https://rs.example/mcp");
        assert_eq!(c["ath"], token_hash("tok"));
        assert_eq!(c["nonce"], "n-1");
        let mut point = vec![4u8];
        for xy in ["x", "y"] {
            point.extend(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(h["jwk"][xy].as_str().unwrap())
                    .unwrap(),
            );
        }
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[2])
            .unwrap();
        let input = format!("{}.{}", parts[0], parts[1]);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
            .verify(input.as_bytes(), &sig)
            .unwrap();
        // A token request's proof has no ath; two proofs never share a jti.
        let q = k
            .proof("POST", "https://as.example/token", None, None)
            .unwrap();
        let qc = part(q.split('.').nth(1).unwrap());
        assert!(qc.get("ath").is_none() && qc.get("nonce").is_none());
        assert_ne!(qc["jti"], c["jti"]);
    }

    #[test]
    fn the_kept_key_is_the_same_key() {
        let k = Key::generate().unwrap();
        let again = Key::from_pkcs8(k.kept()).unwrap();
        assert_eq!(k.thumbprint(), again.thumbprint());
        assert!(Key::from_pkcs8(&Secret("not a key".into())).is_err());
        // RFC 7638 §3.1's member order.
        let t = k.jwk.to_string();
        assert!(t.starts_with(r#"{"crv":"P-256","kty":"EC","x":"#), "{t}");
    }

    #[test]
    fn modes_and_nonces() {
        let es = vec!["RS256".to_owned(), "ES256".to_owned()];
        assert!(Mode::Auto.wanted(&es, true));
        // A resource that reads only Bearer gets a Bearer token, whatever the AS offers.
        assert!(!Mode::Auto.wanted(&es, false));
        assert!(!Mode::Auto.wanted(&["RS256".to_owned()], true));
        assert!(Mode::Always.wanted(&[], false));
        assert!(!Mode::Never.wanted(&es, true));
        assert!(Mode::parse("sometimes").is_err());
        let n = Nonce::default();
        assert!(!n.set("has space") && !n.set("") && !n.set("quo\"te"));
        assert_eq!(n.get(), None);
        assert!(n.set("eyJ7S_zG.eyJH0-Z.HX4w-7v"));
        assert_eq!(n.get().as_deref(), Some("eyJ7S_zG.eyJH0-Z.HX4w-7v"));
    }
}
