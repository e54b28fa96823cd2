//! JWT access tokens and JWKS documents (`auth::jwt`): the JWKS parse, and `Verifier::verify`
//! on tokens a client sends.
//!
//! Input: byte 0 picks the mode and token options; the rest is a JWKS document (mode 0), a
//! token (mode 1), or claims to sign (modes 2 and 3; mode 3 also changes one byte of the
//! signed token, at a place and to a value the input picks).
//!
//! The verifier holds two keys: an Ed25519 key whose private half only this target has
//! (`kid` "k1") and a P-256 key whose private half nobody has (`kid` "k2").
//!
//! Invariants: a JWKS that parses holds at least one key; what `verify` accepts was signed by
//! the Ed25519 key (Ed25519 is deterministic: its signature is recomputed and compared), for
//! this issuer and audience, unexpired; a token this target signs for valid claims is
//! accepted with those claims; a signed token with one byte changed is accepted only if it
//! still carries the same signed text and signature bytes.
#![no_main]

use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use libfuzzer_sys::fuzz_target;
use mcp_bridge::auth::jwt::{fuzzing, Config, Source, Verifier};
use serde_json::{json, Value};

/// A throwaway test key made for this target; it guards nothing.
const ED_PEM: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMVJM2Wq7mVBfJJlW5QiY0WE1ihrPMjVGH/mvO2ymgdj
-----END PRIVATE KEY-----
";
const JWKS: &str = r#"{"keys":[
 {"kty":"OKP","crv":"Ed25519","x":"x-C05vx_3bB6zJH0h8jRXaxxvRUibXAhujFjyzK6uxQ","kid":"k1","alg":"EdDSA"},
 {"kty":"EC","crv":"P-256","x":"4HxO85m4Tkab1SbglReigJiU9oANPJyrFGovJ6RDfag","y":"gt97YBeL4OaMCi8rwTDXsb_OOjlOhr8Wb9LbFBSQkBo","kid":"k2"},
 {"kty":"oct","k":"c2VjcmV0","kid":"h"}]}"#;
const ISS: &str = "https://as.example";
const AUD: &str = "https://rs.example/mcp";

static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});
static VERIFIER: LazyLock<Arc<Verifier>> = LazyLock::new(|| {
    let cfg = Config {
        source: Source::File("/nonexistent/mcp-bridge-fuzz/jwks.json".into()),
        issuer: Some(ISS.into()),
        audiences: vec![AUD.into()],
        leeway: 0,
    };
    fuzzing::verifier(cfg, JWKS.as_bytes()).expect("the fixed JWKS loads")
});
static KEY: LazyLock<EncodingKey> = LazyLock::new(|| {
    let body: String = ED_PEM.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("the test key is base64");
    EncodingKey::from_ed_der(&der)
});

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn verify(token: &str) -> Result<Value, mcp_bridge::auth::Refusal> {
    RT.block_on(VERIFIER.verify(token))
}

/// An accepted token must be ours: recompute its Ed25519 signature.
fn assert_signed_by_us(token: &str, claims: &Value) {
    let (signed, sig) = token
        .rsplit_once('.')
        .expect("an accepted token has three parts");
    let ours = jsonwebtoken::crypto::sign(signed.as_bytes(), &KEY, Algorithm::EdDSA)
        .expect("signing works");
    let (a, b) = (b64().decode(sig), b64().decode(ours));
    assert!(
        a.is_ok() && a == b,
        "accepted a token the key did not sign: {token}"
    );
    assert!(
        claims["exp"].as_u64().is_some_and(|e| e >= now()),
        "accepted an expired token"
    );
    let aud_ok = match &claims["aud"] {
        Value::String(s) => s == AUD,
        Value::Array(a) => a.iter().any(|v| v == AUD),
        _ => false,
    };
    assert!(aud_ok, "accepted a token for another audience");
    assert_eq!(claims["iss"], ISS, "accepted a token from another issuer");
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            if let Ok(n) = fuzzing::jwks_keys(rest) {
                assert!(n >= 1, "an empty key set was accepted");
            }
        }
        1 => {
            let token = String::from_utf8_lossy(rest);
            if let Ok(claims) = verify(&token) {
                assert_signed_by_us(&token, &claims);
            }
        }
        mode => {
            let Ok(Value::Object(mut claims)) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let valid = sel & 0x10 != 0;
            if valid {
                claims.insert("exp".into(), json!(now() + 3600));
                claims.insert("aud".into(), json!(AUD));
                claims.insert("iss".into(), json!(ISS));
                claims.remove("nbf");
                // RFC 7519: `sub` is a string; a token with another one is rightly refused
                // (a long run stopped on `"sub":["a","b"]`, a harness fault).
                if !claims.get("sub").is_none_or(Value::is_string) {
                    claims.remove("sub");
                }
            }
            let mut header = Header::new(Algorithm::EdDSA);
            header.kid = (sel & 0x20 != 0).then(|| "k1".to_owned());
            let claims = Value::Object(claims);
            let Ok(token) = jsonwebtoken::encode(&header, &claims, &KEY) else {
                return;
            };
            match verify(&token) {
                Ok(got) => {
                    // Compare through the parse the verifier's decode used: serde_json's
                    // default float parse does not round-trip every f64 (a first run stopped
                    // on 9.999555555555556e63 vs …555e63, a harness fault, not the bridge's).
                    let reparsed: Value =
                        serde_json::from_str(&claims.to_string()).unwrap_or(Value::Null);
                    assert_eq!(got, reparsed);
                    assert_signed_by_us(&token, &got);
                }
                Err(r) => assert!(!valid, "a valid token was refused: {}", r.reason),
            }
            if mode == 3 {
                let mut bytes = token.clone().into_bytes();
                let at = usize::from(sel >> 6) * 31 + rest.len();
                let at = at % bytes.len();
                bytes[at] = rest.first().copied().unwrap_or(b'A');
                let Ok(t) = String::from_utf8(bytes) else {
                    return;
                };
                if t != token {
                    if let Ok(got) = verify(&t) {
                        let (s1, g1) = token.rsplit_once('.').unwrap_or_default();
                        let (s2, g2) = t.rsplit_once('.').unwrap_or_default();
                        assert_eq!(s1, s2, "an altered token was accepted: {t}");
                        assert_eq!(
                            b64().decode(g1).ok(),
                            b64().decode(g2).ok(),
                            "an altered signature was accepted: {t}"
                        );
                        assert_signed_by_us(&t, &got);
                    }
                }
            }
        }
    }
});
