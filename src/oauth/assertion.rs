//! `private_key_jwt` (RFC 7523 §2.2, OIDC Core §9): the client authenticates at the token
//! endpoint with a short-lived JWT signed by its own key: `iss` = `sub` = the client id, `aud`
//! = the authorization server (its issuer and its token endpoint, both: RFC 7523 names the
//! server and allows the endpoint, and servers check one or the other), a random `jti`, `exp`
//! a minute ahead. The key is a PEM file (PKCS#8,
//! or PKCS#1 for RSA, SEC1 for EC): RSA signs RS256, a P-256 key ES256; other keys are refused
//! when the flags are read. Signed with aws-lc-rs directly (the crate `jsonwebtoken` and rustls
//! already use): `jsonwebtoken` without its PEM feature reads only PKCS#1 RSA keys, and the
//! JWT itself is three base64url parts.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING, RSA_PKCS1_SHA256,
};
use base64::Engine;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use serde_json::json;

use super::store::{now_secs, Secret};

/// `client_assertion_type` for a JWT.
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long an assertion is valid.
pub const LIFETIME: u64 = 60;

/// The signing algorithm of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
}

impl Alg {
    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Es256 => "ES256",
        }
    }
}

/// The client's private key (the PEM kept as a [`Secret`]: `Debug` never shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientKey {
    pem: Secret,
    pub alg: Alg,
    pub kid: Option<String>,
}

enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn signer(pem: &str) -> Result<Signer, String> {
    let der = PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| format!("no private key in PEM form ({e})"))?;
    let bytes = der.secret_der();
    let rsa = match &der {
        PrivateKeyDer::Pkcs1(_) => RsaKeyPair::from_der(bytes).ok(),
        PrivateKeyDer::Pkcs8(_) => RsaKeyPair::from_pkcs8(bytes).ok(),
        _ => None,
    };
    if let Some(k) = rsa {
        return Ok(Signer::Rsa(k));
    }
    if matches!(der, PrivateKeyDer::Pkcs8(_) | PrivateKeyDer::Sec1(_)) {
        if let Ok(k) = EcdsaKeyPair::from_private_key_der(&ECDSA_P256_SHA256_FIXED_SIGNING, bytes) {
            return Ok(Signer::Ec(k));
        }
    }
    Err("the key is neither RSA nor EC P-256 (private_key_jwt signs RS256 or ES256)".into())
}

impl ClientKey {
    /// Read a PEM key (the text of `--oauth-private-key-file`); refused unless it can sign.
    pub fn from_pem(pem: &str, kid: Option<String>) -> Result<Self, String> {
        let alg = match signer(pem)? {
            Signer::Rsa(_) => Alg::Rs256,
            Signer::Ec(_) => Alg::Es256,
        };
        let k = ClientKey {
            pem: Secret(pem.to_owned()),
            alg,
            kid,
        };
        k.assertion("probe", &["https://probe.invalid/token"])?;
        Ok(k)
    }

    /// A fresh client assertion for `client_id` at `audience` (the issuer and the token
    /// endpoint; one value when they are the same).
    pub fn assertion(&self, client_id: &str, audience: &[&str]) -> Result<String, String> {
        let audience = match audience {
            [one] => json!(one),
            many => json!(many),
        };
        let mut header = json!({"alg": self.alg.name(), "typ": "JWT"});
        if let Some(k) = &self.kid {
            header["kid"] = json!(k);
        }
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| format!("no randomness for jti: {e}"))?;
        let now = now_secs();
        let claims = json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "jti": b64(&jti),
            "iat": now,
            "exp": now.saturating_add(LIFETIME),
        });
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match signer(&self.pem.0)? {
            Signer::Rsa(k) => {
                let mut sig = vec![0u8; k.public_modulus_len()];
                k.sign(&RSA_PKCS1_SHA256, &rng, input.as_bytes(), &mut sig)
                    .map_err(|_| "signing the client assertion failed".to_owned())?;
                sig
            }
            Signer::Ec(k) => k
                .sign(&rng, input.as_bytes())
                .map_err(|_| "signing the client assertion failed".to_owned())?
                .as_ref()
                .to_vec(),
        };
        Ok(format!("{input}.{}", b64(&sig)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::signature::{KeyPair, UnparsedPublicKey};

    fn pem(label: &str, der: &[u8]) -> String {
        let b = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    fn parts(jwt: &str) -> (serde_json::Value, serde_json::Value, Vec<u8>, String) {
        let p: Vec<&str> = jwt.split('.').collect();
        let d = |s: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .unwrap()
        };
        (
            serde_json::from_slice(&d(p[0])).unwrap(),
            serde_json::from_slice(&d(p[1])).unwrap(),
            d(p[2]),
            format!("{}.{}", p[0], p[1]),
        )
    }

    #[test]
    fn es256_assertions_verify_and_carry_the_claims() {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let text = pem("PRIVATE KEY", doc.as_ref());
        let k = ClientKey::from_pem(&text, Some("k1".into())).unwrap();
        assert_eq!(k.alg, Alg::Es256);
        assert!(!format!("{k:?}").contains("BEGIN"));
        let jwt = k.assertion("cid", &["https://as/token"]).unwrap();
        let (h, c, sig, input) = parts(&jwt);
        assert_eq!(h["alg"], "ES256");
        assert_eq!(h["kid"], "k1");
        assert_eq!(
            (c["iss"].as_str(), c["sub"].as_str()),
            (Some("cid"), Some("cid"))
        );
        assert_eq!(c["aud"], "https://as/token");
        assert!(c["exp"].as_u64().unwrap() <= now_secs() + LIFETIME);
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref()).unwrap();
        UnparsedPublicKey::new(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED,
            pair.public_key().as_ref(),
        )
        .verify(input.as_bytes(), &sig)
        .unwrap();
        let other = k
            .assertion("cid", &["https://as", "https://as/token"])
            .unwrap();
        assert_ne!(parts(&other).1["jti"], c["jti"], "jti is fresh");
        assert_eq!(
            parts(&other).1["aud"],
            json!(["https://as", "https://as/token"])
        );
    }

    #[test]
    fn rs256_keys_sign_and_other_keys_are_refused() {
        let pair = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).unwrap();
        let k = ClientKey::from_pem(&pem("PRIVATE KEY", der.as_ref()), None).unwrap();
        assert_eq!(k.alg, Alg::Rs256);
        let (h, _, sig, input) = parts(&k.assertion("c", &["https://as/t"]).unwrap());
        assert_eq!(h["alg"], "RS256");
        assert!(h.get("kid").is_none());
        UnparsedPublicKey::new(
            &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
            pair.public_key().as_ref(),
        )
        .verify(input.as_bytes(), &sig)
        .unwrap();
        let rng = SystemRandom::new();
        let p384 = EcdsaKeyPair::generate_pkcs8(
            &aws_lc_rs::signature::ECDSA_P384_SHA384_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        assert!(ClientKey::from_pem(&pem("PRIVATE KEY", p384.as_ref()), None).is_err());
        assert!(ClientKey::from_pem("not a key", None).is_err());
    }
}
