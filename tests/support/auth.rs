//! The auth fixtures: bearer requests against a bridge, JWTs signed with keys made at test
//! time (aws-lc-rs: ES256, RS256, EdDSA, and the HMAC and `alg: none` forgeries), a JWKS
//! served over HTTP from the test (on the canned server in `http`), a self-signed TLS
//! certificate (rcgen), and a `serve` that must refuse to start.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use base64::Engine;
use serde_json::{json, Value};

use super::bridge::Bridge;
use super::http::{client, initialize_body, tiny_server, LEGACY};

/// Run `serve <args>` expecting it to refuse to start: (exit code, stderr).
pub fn run_refused(args: &[&str]) -> (Option<i32>, String) {
    let out = Bridge::builder()
        .serve()
        .args(args)
        .run(Duration::from_secs(15));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// POST a 2025 `initialize` with an optional bearer token.
pub async fn post_init(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut rb = client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize_body(json!(1), LEGACY));
    if let Some(t) = token {
        rb = rb.header("authorization", format!("Bearer {t}"));
    }
    rb.send().await.expect("POST")
}

pub fn www_auth(r: &reqwest::Response) -> String {
    r.headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, made now.
pub fn self_signed() -> rcgen::CertifiedKey {
    rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("self-signed certificate")
}

// ---------------------------------------------------------------------------------------------
// JWTs
// ---------------------------------------------------------------------------------------------

pub fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A signing key made at test time, with its public JWK.
pub enum Signer {
    Es256(EcdsaKeyPair),
    Rs256(aws_lc_rs::rsa::KeyPair),
    EdDsa(Ed25519KeyPair),
}

pub struct TestKey {
    pub kid: String,
    pub signer: Signer,
}

impl TestKey {
    pub fn es256(kid: &str) -> TestKey {
        let k = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("p256");
        TestKey {
            kid: kid.into(),
            signer: Signer::Es256(k),
        }
    }
    pub fn rs256(kid: &str) -> TestKey {
        let k = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
        TestKey {
            kid: kid.into(),
            signer: Signer::Rs256(k),
        }
    }
    pub fn eddsa(kid: &str) -> TestKey {
        let k = Ed25519KeyPair::generate().expect("ed25519");
        TestKey {
            kid: kid.into(),
            signer: Signer::EdDsa(k),
        }
    }

    pub fn alg(&self) -> &'static str {
        match self.signer {
            Signer::Es256(_) => "ES256",
            Signer::Rs256(_) => "RS256",
            Signer::EdDsa(_) => "EdDSA",
        }
    }

    /// The public JWK.
    pub fn jwk(&self) -> Value {
        match &self.signer {
            Signer::Es256(k) => {
                let p = k.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
                       "x": b64(&p[1..33]), "y": b64(&p[33..65])})
            }
            Signer::Rs256(k) => {
                let p = k.public_key();
                json!({"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                       "n": b64(p.modulus().big_endian_without_leading_zero()),
                       "e": b64(p.exponent().big_endian_without_leading_zero())})
            }
            Signer::EdDsa(k) => {
                json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig", "alg": "EdDSA",
                       "x": b64(k.public_key().as_ref())})
            }
        }
    }

    /// The public key bytes (for the HMAC-with-public-key confusion attack).
    pub fn public_bytes(&self) -> Vec<u8> {
        match &self.signer {
            Signer::Es256(k) => k.public_key().as_ref().to_vec(),
            Signer::Rs256(k) => k.public_key().as_ref().to_vec(),
            Signer::EdDsa(k) => k.public_key().as_ref().to_vec(),
        }
    }

    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Es256(k) => k.sign(&rng, msg).expect("sign").as_ref().to_vec(),
            Signer::Rs256(k) => {
                let mut sig = vec![0u8; k.public_modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, msg, &mut sig)
                    .expect("sign");
                sig
            }
            Signer::EdDsa(k) => k.sign(msg).as_ref().to_vec(),
        }
    }

    /// A signed JWT with this key's `alg` and `kid`.
    pub fn token(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "typ": "at+jwt", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.sign(input.as_bytes());
        format!("{input}.{}", b64(&sig))
    }
}

/// An unsigned JWT with any header (for `alg: none` and HMAC confusion tests).
pub fn token_with_header(header: &Value, claims: &Value, sig: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(sig)
    )
}

pub fn hs256(secret: &[u8], input: &str) -> Vec<u8> {
    let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    aws_lc_rs::hmac::sign(&k, input.as_bytes())
        .as_ref()
        .to_vec()
}

pub fn jwks(keys: &[&TestKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

// ---------------------------------------------------------------------------------------------
// A JWKS over HTTP, served by the test
// ---------------------------------------------------------------------------------------------

/// A JWKS document over HTTP: every request gets the current document.
pub struct JwksServer {
    pub url: String,
    doc: Arc<Mutex<String>>,
    hits: Arc<AtomicUsize>,
}

impl JwksServer {
    pub async fn start(doc: String) -> JwksServer {
        let doc = Arc::new(Mutex::new(doc));
        let hits = Arc::new(AtomicUsize::new(0));
        let (d, h) = (doc.clone(), hits.clone());
        let addr = tiny_server(move |_, _| {
            h.fetch_add(1, Ordering::SeqCst);
            let body = d.lock().unwrap_or_else(|p| p.into_inner()).clone();
            (200, "application/json", body)
        })
        .await;
        JwksServer {
            url: format!("http://{addr}/jwks.json"),
            doc,
            hits,
        }
    }

    /// Serve `doc` from now on.
    pub fn set(&self, doc: String) {
        *self.doc.lock().unwrap_or_else(|p| p.into_inner()) = doc;
    }

    /// How many requests it answered.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}
