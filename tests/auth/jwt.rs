//! `serve --auth jwt`: real JWTs signed at test time (ES256, RS256, EdDSA) against a JWKS the
//! test serves over HTTP; every rejection reason; key rotation; scope 403; the metadata.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};

use support::*;

const ISS: &str = "https://as.test.example";

struct Setup {
    bridge: Bridge,
    jwks: JwksServer,
    es: TestKey,
    rs: TestKey,
    ed: TestKey,
}

async fn setup(extra: &[&str]) -> Setup {
    let (es, rs, ed) = (
        TestKey::es256("k-es"),
        TestKey::rs256("k-rs"),
        TestKey::eddsa("k-ed"),
    );
    let jwks = JwksServer::start(jwks(&[&es, &rs, &ed])).await;
    let mut args = vec![
        "--demo",
        "--port",
        "0",
        "--auth",
        "jwt",
        "--jwks-url",
        &jwks.url,
        "--issuer",
        ISS,
    ];
    args.extend_from_slice(extra);
    let bridge = Bridge::builder()
        .log_level("debug")
        .serve()
        .args(&args)
        .spawn()
        .await;
    Setup {
        bridge,
        jwks,
        es,
        rs,
        ed,
    }
}

fn claims(aud: &str) -> Value {
    let t = now();
    json!({"iss": ISS, "sub": "user-1", "aud": aud, "iat": t, "nbf": t - 5, "exp": t + 600,
           "scope": "mcp:tools files"})
}

/// `mcp_bridge_auth_failures_total` by reason, from a scrape (a reason appears at its first
/// refusal, as the README says).
fn refusals(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("mcp_bridge_auth_failures_total{reason=\"")?;
            let (reason, v) = rest.split_once("\"} ")?;
            Some((reason.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The refusal counts after one refusal for `reason`: exactly `before` with that reason one up.
fn one_more(
    before: &std::collections::BTreeMap<String, f64>,
    reason: &str,
) -> std::collections::BTreeMap<String, f64> {
    let mut want = before.clone();
    *want.entry(reason.to_owned()).or_insert(0.0) += 1.0;
    want
}

async fn status_of(s: &Setup, token: &str) -> (u16, String) {
    let r = post_init(&s.bridge.url, Some(token)).await;
    (r.status().as_u16(), www_auth(&r))
}

#[tokio::test]
async fn each_algorithm_is_accepted_with_the_canonical_audience() {
    let s = setup(&[]).await;
    // The default audience is the endpoint's canonical URL (RFC 8707).
    let aud = s.bridge.url.clone();
    for k in [&s.es, &s.rs, &s.ed] {
        let (st, _) = status_of(&s, &k.token(&claims(&aud))).await;
        assert_eq!(
            st,
            200,
            "{} token refused; log:\n{}",
            k.alg(),
            s.bridge.log.dump()
        );
    }
    // aud as an array holding ours also passes.
    let mut c = claims(&aud);
    c["aud"] = json!(["https://other.example/mcp", aud]);
    assert_eq!(status_of(&s, &s.es.token(&c)).await.0, 200);
}

#[tokio::test]
async fn every_rejection_reason_is_a_401_with_a_challenge() {
    let s = setup(&["--metrics-listen", "127.0.0.1:0"]).await;
    let m = Scraper::of(&s.bridge).await;
    let aud = s.bridge.url.clone();
    let good = claims(&aud);
    let t = now();
    let mut cases: Vec<(&str, String)> = Vec::new();

    let mut c = good.clone();
    c["exp"] = json!(t - 600);
    c["nbf"] = json!(t - 1200);
    cases.push(("expired", s.es.token(&c)));

    let mut c = good.clone();
    c["nbf"] = json!(t + 600);
    cases.push(("not_yet_valid", s.rs.token(&c)));

    let mut c = good.clone();
    c["iss"] = json!("https://evil.example");
    cases.push(("issuer", s.ed.token(&c)));

    let mut c = good.clone();
    c["aud"] = json!("https://some-other-server.example/mcp");
    cases.push(("audience", s.es.token(&c)));

    let mut c = good.clone();
    c.as_object_mut().map(|o| o.remove("aud"));
    cases.push(("missing_claim", s.es.token(&c)));

    let stranger = TestKey::es256("k-stranger");
    cases.push(("unknown_kid", stranger.token(&good)));

    cases.push((
        "algorithm",
        token_with_header(&json!({"alg": "none", "kid": "k-es"}), &good, b""),
    ));

    // HS256 "signed" with the RSA public key: the classic key-confusion attack.
    let h = json!({"alg": "HS256", "kid": "k-rs"});
    let input = format!(
        "{}.{}",
        b64(h.to_string().as_bytes()),
        b64(good.to_string().as_bytes())
    );
    let mac = hs256(&s.rs.public_bytes(), &input);
    cases.push(("algorithm", format!("{input}.{}", b64(&mac))));

    // Signed by a different key under a known kid.
    let impostor = TestKey::es256("k-es");
    cases.push(("signature", impostor.token(&good)));

    // A valid token with one signature byte changed.
    let tok = s.ed.token(&good);
    let (head, sig) = tok.rsplit_once('.').unwrap();
    let mut raw =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, sig).unwrap();
    raw[10] ^= 0x01;
    cases.push(("signature", format!("{head}.{}", b64(&raw))));

    cases.push(("malformed", "not-a-jwt".into()));

    for (reason, token) in &cases {
        // This case's own line: the count of its exact reason grows by one with its request
        // (an earlier case's line with the same reason does not satisfy it); likewise its
        // counter, and no other reason's.
        let counted = refusals(&m.scrape().await);
        let needle = "request refused: ";
        let exact = format!("reason=\"{reason}\"");
        let seen = s.bridge.log.count(&exact);
        let refused = s.bridge.log.count(needle);
        let (st, ch) = status_of(&s, token).await;
        assert_eq!(
            st,
            401,
            "{reason}: expected 401; log:\n{}",
            s.bridge.log.dump()
        );
        assert!(ch.starts_with("Bearer "), "{reason}: {ch}");
        assert!(ch.contains("error=\"invalid_token\""), "{reason}: {ch}");
        assert!(
            ch.contains(&format!(
                "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
                s.bridge.origin()
            )),
            "{reason}: {ch}"
        );
        let log = &s.bridge.log;
        let after = log
            .wait_count(&exact, seen + 1, Duration::from_secs(2))
            .await;
        assert_eq!(
            after,
            seen + 1,
            "{reason}: its refusal line; log:\n{}",
            log.dump()
        );
        // One refusal logged for this request, and it is this reason's.
        assert_eq!(
            log.count(needle),
            refused + 1,
            "{reason}; log:\n{}",
            log.dump()
        );
        assert_eq!(
            refusals(&m.scrape().await),
            one_more(&counted, reason),
            "{reason}: auth_failures_total"
        );
    }

    // No token at all: 401, a challenge without an error code (RFC 6750 §3.1).
    let counted = refusals(&m.scrape().await);
    let r = post_init(&s.bridge.url, None).await;
    assert_eq!(r.status().as_u16(), 401);
    let ch = www_auth(&r);
    assert!(ch.starts_with("Bearer resource_metadata="), "{ch}");
    assert!(!ch.contains("error="), "{ch}");
    let counted = one_more(&counted, "missing");
    assert_eq!(refusals(&m.scrape().await), counted, "missing");

    // A token in the query string is refused even when it is valid.
    let tok = s.es.token(&good);
    let r = client()
        .post(format!("{}?access_token={tok}", s.bridge.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize_body(json!(1), LEGACY))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(www_auth(&r).contains("invalid_request"));
    assert_eq!(
        refusals(&m.scrape().await),
        one_more(&counted, "query_token"),
        "query_token"
    );

    // The tokens never reach the log.
    let log = s.bridge.log.dump();
    for (_, token) in &cases {
        if token.len() > 20 {
            assert!(!log.contains(token.as_str()), "a token leaked into the log");
        }
    }
}

/// `exp` and `nbf` have the README's 30 s leeway: a token expired 10 s ago, or valid from 10 s
/// from now, is accepted; 60 s either way is refused with its own reason.
#[tokio::test]
async fn exp_and_nbf_have_a_30_s_leeway() {
    let s = setup(&[]).await;
    let aud = s.bridge.url.clone();
    let t = now();
    let with = |k: &str, v: i64| {
        let mut c = claims(&aud);
        c[k] = json!(v);
        if k == "exp" {
            c["nbf"] = json!(v - 600);
            c["iat"] = json!(v - 600);
        }
        s.es.token(&c)
    };
    for (what, token, want) in [
        ("expired 10 s ago", with("exp", t - 10), 200),
        ("valid in 10 s", with("nbf", t + 10), 200),
        ("expired 60 s ago", with("exp", t - 60), 401),
        ("valid in 60 s", with("nbf", t + 60), 401),
    ] {
        let (st, ch) = status_of(&s, &token).await;
        assert_eq!(st, want, "{what}: {ch}");
    }
    // Refused for its own reason, once each (the log is read apart: wait for the lines).
    let log = &s.bridge.log;
    for reason in ["reason=\"expired\"", "reason=\"not_yet_valid\""] {
        log.expect_count(reason, 1, Duration::from_secs(5)).await;
        assert_eq!(log.count(reason), 1, "{reason}; log:\n{}", log.dump());
    }
}

#[tokio::test]
async fn unknown_kid_refreshes_the_jwks_and_rotation_works() {
    let s = setup(&[]).await;
    let aud = s.bridge.url.clone();
    let fetched_at_start = s.jwks.hits();
    assert!(fetched_at_start >= 1, "the JWKS was not fetched at start");
    let new_key = TestKey::rs256("k-rotated");
    let tok = new_key.token(&claims(&aud));
    s.jwks.set(jwks(&[&s.es, &new_key]));
    // The unknown kid triggers one refresh; the new key is then used.
    assert_eq!(
        status_of(&s, &tok).await.0,
        200,
        "log:\n{}",
        s.bridge.log.dump()
    );
    assert_eq!(s.jwks.hits(), fetched_at_start + 1);
    // The rotated-out key is gone.
    assert_eq!(status_of(&s, &s.ed.token(&claims(&aud))).await.0, 401);
    // Unknown kids do not hammer the authorization server: refreshes are rate-limited.
    for i in 0..5 {
        let k = TestKey::es256(&format!("junk-{i}"));
        assert_eq!(status_of(&s, &k.token(&claims(&aud))).await.0, 401);
    }
    assert!(
        s.jwks.hits() <= fetched_at_start + 2,
        "hits: {}",
        s.jwks.hits()
    );
}

#[tokio::test]
async fn missing_scope_is_403_insufficient_scope_and_metadata_is_published() {
    let s = setup(&[
        "--required-scope",
        "mcp:tools",
        "--required-scope",
        "mcp:admin",
        "--authorization-server",
        "https://login.test.example",
    ])
    .await;
    let aud = s.bridge.url.clone();
    let (st, ch) = status_of(&s, &s.es.token(&claims(&aud))).await;
    assert_eq!(st, 403);
    assert!(ch.contains("error=\"insufficient_scope\""), "{ch}");
    assert!(ch.contains("scope=\"mcp:tools mcp:admin\""), "{ch}");
    assert!(ch.contains("resource_metadata="), "{ch}");
    let mut c = claims(&aud);
    c["scope"] = json!("mcp:tools mcp:admin");
    assert_eq!(status_of(&s, &s.es.token(&c)).await.0, 200);
    // `scp` as an array is understood too.
    let mut c = claims(&aud);
    c.as_object_mut().map(|o| o.remove("scope"));
    c["scp"] = json!(["mcp:tools", "mcp:admin"]);
    assert_eq!(status_of(&s, &s.ed.token(&c)).await.0, 200);

    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let r = client()
            .get(format!("{}{path}", s.bridge.origin()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["resource"], json!(aud));
        assert_eq!(
            doc["authorization_servers"],
            json!(["https://login.test.example"])
        );
        assert_eq!(doc["scopes_supported"], json!(["mcp:tools", "mcp:admin"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
}

#[tokio::test]
async fn explicit_audience_and_jwks_file() {
    let k = TestKey::eddsa("file-key");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[&k])).unwrap();
    let p = path.to_str().unwrap();
    let b = Bridge::builder()
        .log_level("info")
        .serve()
        .args([
            "--demo",
            "--port",
            "0",
            "--auth",
            "jwt",
            "--jwks-file",
            p,
            "--audience",
            "api://bridge",
        ])
        .spawn()
        .await;
    let t = now();
    let ok = json!({"sub": "svc", "aud": "api://bridge", "exp": t + 60});
    assert_eq!(
        post_init(&b.url, Some(&k.token(&ok)))
            .await
            .status()
            .as_u16(),
        200
    );
    let other = json!({"sub": "svc", "aud": b.url, "exp": t + 60});
    assert_eq!(
        post_init(&b.url, Some(&k.token(&other)))
            .await
            .status()
            .as_u16(),
        401
    );
    // Without an issuer the metadata has no authorization server to name: not served.
    let r = client()
        .get(format!(
            "{}/.well-known/oauth-protected-resource",
            b.origin()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[test]
fn jwt_set_up_errors_refuse_to_start() {
    let (code, log) = run_refused(&["--demo", "--port", "0", "--auth", "jwt"]);
    assert_eq!(code, Some(64), "{log}");
    assert!(log.contains("--jwks-url"), "{log}");
    let (code, log) = run_refused(&[
        "--demo",
        "--port",
        "0",
        "--auth",
        "jwt",
        "--jwks-file",
        "/nonexistent/jwks.json",
    ]);
    assert_eq!(code, Some(64), "{log}");
}
