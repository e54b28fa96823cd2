//! SIGHUP reload of the daemon's auth settings against the real binary: a new JWKS file and
//! issuer take effect on the running server (old tokens refused, new ones accepted) without
//! restarting its child; a switch to bearer tokens works the same way; a reload whose JWKS
//! cannot be loaded is rejected and the running auth stays; with unchanged settings, SIGHUP
//! re-reads the JWKS file (key rotation). One part's failed reload (a token file that no longer
//! parses) keeps the old tokens, says why and is counted in `mcp_bridge_reloads_total`.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;
use support::{
    child_pids, daemon_builder, demo_server, jwks, now, post_init, sample, server_url, write,
    Bridge, Scraper, TestKey,
};

const AUD: &str = "mcp-bridge-test";

fn token(key: &TestKey, iss: &str) -> String {
    let t = now();
    key.token(
        &json!({"iss": iss, "sub": "u", "aud": AUD, "iat": t, "nbf": t - 5,
                      "exp": t + 600}),
    )
}

fn jwt_auth(jwks_file: &std::path::Path, issuer: &str) -> String {
    format!(
        "[auth]\nmode = \"jwt\"\njwks_file = {:?}\nissuer = {issuer:?}\naudience = [{AUD:?}]\n\n",
        jwks_file.to_str().unwrap_or_default()
    )
}

async fn status(url: &str, token: &str) -> u16 {
    post_init(url, Some(token)).await.status().as_u16()
}

/// Wait for the `nth` (1-based) log line holding `needle`; the line.
async fn nth_line(b: &Bridge, needle: &str, nth: usize) -> String {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let hits: Vec<String> = b
            .log
            .lines()
            .into_iter()
            .filter(|l| l.contains(needle))
            .collect();
        if hits.len() >= nth {
            return hits[nth - 1].clone();
        }
        assert!(
            std::time::Instant::now() < until,
            "no {nth}. {needle:?} in the log:\n{}",
            b.log.lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_settings_reload_without_restarting_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (k1, k2, k3) = (
        TestKey::es256("k1"),
        TestKey::es256("k2"),
        TestKey::es256("k3"),
    );
    let keys1 = write(dir.path(), "keys1.json", &jwks(&[&k1]));
    let keys2 = write(dir.path(), "keys2.json", &jwks(&[&k2]));
    let servers = demo_server("a", &[]);
    let cfg = write(
        dir.path(),
        "d.toml",
        &format!("{}{servers}", jwt_auth(&keys1, "https://iss-a")),
    );
    let b = daemon_builder(&cfg, &["--port", "0"]).spawn().await;
    b.wait_ready(Duration::from_secs(20)).await;
    let url = server_url(&b, "a");
    let (old, new) = (token(&k1, "https://iss-a"), token(&k2, "https://iss-b"));
    assert_eq!(status(&url, &old).await, 200);
    assert_eq!(status(&url, &new).await, 401);
    let pids = child_pids(&b, "a");
    assert_eq!(pids.len(), 1, "{:?}", b.log.lines());

    // 1. New JWKS file and issuer: applied to the running server.
    std::fs::write(
        &cfg,
        format!("{}{servers}", jwt_auth(&keys2, "https://iss-b")),
    )
    .unwrap();
    b.signal(Signal::SIGHUP);
    nth_line(&b, "authentication settings reloaded", 1).await;
    assert_eq!(status(&url, &new).await, 200, "{:?}", b.log.lines());
    assert_eq!(status(&url, &old).await, 401);
    assert_eq!(
        child_pids(&b, "a"),
        pids,
        "the server's child was restarted"
    );

    // 2. Same settings, rotated key in the same file: SIGHUP re-reads it.
    std::fs::write(&keys2, jwks(&[&k3])).unwrap();
    // The first SIGHUP may have made the replaced verifier log a reload too: count from here.
    let before = b.log.count("JWKS reloaded");
    b.signal(Signal::SIGHUP);
    nth_line(&b, "JWKS reloaded", before + 1).await;
    assert_eq!(status(&url, &token(&k3, "https://iss-b")).await, 200);
    assert_eq!(status(&url, &new).await, 401);

    // 3. A JWKS URL nobody serves: the reload is rejected, the running auth stays.
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nmode = \"jwt\"\njwks_url = \"http://127.0.0.1:9/jwks\"\n\
             issuer = \"https://iss-c\"\naudience = [{AUD:?}]\n\n{servers}"
        ),
    )
    .unwrap();
    b.signal(Signal::SIGHUP);
    let line = nth_line(&b, "configuration reload rejected", 1).await;
    assert!(line.contains("JWKS"), "{line}");
    assert_eq!(status(&url, &token(&k3, "https://iss-b")).await, 200);

    // 4. Switch to bearer tokens.
    let tokens = write(dir.path(), "tokens", "ops:0123456789abcdef0123\n");
    std::fs::write(
        &cfg,
        format!(
            "[auth]\nmode = \"bearer\"\ntoken_file = {:?}\n\n{servers}",
            tokens.to_str().unwrap_or_default()
        ),
    )
    .unwrap();
    b.signal(Signal::SIGHUP);
    nth_line(&b, "authentication settings reloaded", 2).await;
    assert_eq!(status(&url, "0123456789abcdef0123").await, 200);
    assert_eq!(status(&url, &token(&k3, "https://iss-b")).await, 401);
    assert_eq!(
        child_pids(&b, "a"),
        pids,
        "the server's child was restarted"
    );
}

/// `mcp_bridge_reloads_total` for `part` and `outcome`, read from one scrape; a missing
/// series fails the test (it is exported at 0 from the start).
fn reloads(text: &str, part: &str, outcome: &str) -> f64 {
    let series = format!("mcp_bridge_reloads_total{{outcome=\"{outcome}\",part=\"{part}\"}}");
    sample(text, &series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
}

/// One part's reload fails (a token file that no longer parses): SIGHUP keeps serving with the
/// old tokens, logs the part and the reason, and counts `outcome="failed"`; the other parts of
/// the pass (the configuration) still run. A good file on the next SIGHUP counts `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reload_keeps_the_old_tokens_and_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = ("0123456789abcdef0123", "fedcba9876543210fedc");
    let tokens = write(dir.path(), "tokens", &format!("ops:{old}\n"));
    let cfg = write(
        dir.path(),
        "d.toml",
        &format!(
            "[auth]\nmode = \"bearer\"\ntoken_file = {:?}\n\n{}",
            tokens.to_str().unwrap_or_default(),
            demo_server("a", &[])
        ),
    );
    let b = daemon_builder(&cfg, &["--port", "0", "--metrics-listen", "127.0.0.1:0"])
        .spawn()
        .await;
    b.wait_ready(Duration::from_secs(20)).await;
    let url = server_url(&b, "a");
    let m = Scraper::of(&b).await;
    let text = m.scrape().await;
    for part in ["config", "tls", "jwt", "bearer"] {
        for outcome in ["ok", "failed"] {
            assert_eq!(reloads(&text, part, outcome), 0.0, "{part} {outcome}");
        }
    }
    assert_eq!(status(&url, old).await, 200);

    // 1. The token file no longer parses: the old token still works.
    std::fs::write(&tokens, "ops has no colon and spaces\n").unwrap();
    b.signal(Signal::SIGHUP);
    let line = nth_line(&b, "bearer token reload failed", 1).await;
    assert!(line.contains("part=\"bearer\""), "{line}");
    assert!(line.contains("keeping the previous tokens"), "{line}");
    assert!(
        line.contains(tokens.to_str().unwrap()) && line.contains("line 1: a token must"),
        "{line}"
    );
    assert!(
        !line.contains("spaces"),
        "the file's text is not logged: {line}"
    );
    nth_line(&b, "configuration reload done", 1).await;
    let text = m.scrape().await;
    assert_eq!(reloads(&text, "bearer", "failed"), 1.0);
    assert_eq!(reloads(&text, "bearer", "ok"), 0.0);
    assert_eq!(reloads(&text, "config", "ok"), 1.0);
    assert_eq!(reloads(&text, "config", "failed"), 0.0);
    assert_eq!(status(&url, old).await, 200, "{}", b.log.dump());
    assert_eq!(status(&url, new).await, 401);

    // 2. A good file: the new token replaces the old one, counted ok.
    std::fs::write(&tokens, format!("ops:{new}\n")).unwrap();
    b.signal(Signal::SIGHUP);
    let line = nth_line(&b, "bearer tokens reloaded", 1).await;
    assert!(line.contains("part=\"bearer\""), "{line}");
    let text = m.scrape().await;
    assert_eq!(reloads(&text, "bearer", "ok"), 1.0);
    assert_eq!(reloads(&text, "bearer", "failed"), 1.0);
    assert_eq!(reloads(&text, "config", "ok"), 2.0);
    assert_eq!(reloads(&text, "tls", "ok"), 0.0);
    assert_eq!(status(&url, new).await, 200);
    assert_eq!(status(&url, old).await, 401);
}
