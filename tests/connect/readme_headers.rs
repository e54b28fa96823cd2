//! README "connect": `--header-file FILE` adds its `Name: value` lines (blank lines and `#`
//! comments skipped) to every request to the remote, beside `-H`; a header file connect cannot
//! read, or a line that is no header, is a usage error (exit 64: a flag's file, as plain
//! `serve`'s are) that names the file and the line number, never the line.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn header_file_lines_reach_the_remote_on_every_request() {
    // A 2026 remote that answers every request with an empty result for its id.
    let remote = fake_remote_with(RemoteEra::Modern, |v, _| {
        Some(rpc_result(
            &v["id"],
            json!({"resultType": "complete", "tools": []}),
        ))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("headers");
    std::fs::write(
        &file,
        "# the tenant\n\nX-Tenant: acme\nX-Secret-Key: k-123\n",
    )
    .unwrap();
    let mut h = Host::start(
        &remote.url,
        &[
            "--protocol",
            "2026-07-28",
            "--header-file",
            file.to_str().unwrap(),
            "-H",
            "X-Flag: on",
        ],
    );
    for i in 1..=2 {
        h.request(json!(i), "tools/list", json!({"_meta": modern_meta()}));
        let r = h.response(&json!(i), T);
        assert!(r["result"]["tools"].is_array(), "{r}");
    }
    let seen = remote.headers();
    assert!(seen.len() >= 2, "{} requests", seen.len());
    for hs in seen.iter() {
        assert_eq!(hs.get("x-tenant").unwrap(), "acme", "{hs:?}");
        assert_eq!(hs.get("x-secret-key").unwrap(), "k-123", "{hs:?}");
        assert_eq!(hs.get("x-flag").unwrap(), "on", "{hs:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_header_file_is_a_usage_error_that_keeps_its_contents_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("headers");
    std::fs::write(&file, "X-Ok: fine\nsecret-without-colon-987\n").unwrap();
    let out = Bridge::builder()
        .connect("http://127.0.0.1:9/mcp")
        .args(["--header-file", file.to_str().unwrap()])
        .output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains(file.to_str().unwrap()),
        "names the file: {err}"
    );
    assert!(
        !err.contains("secret-without-colon-987"),
        "leaks the line: {err}"
    );
    let missing = dir.path().join("nope");
    let out = Bridge::builder()
        .connect("http://127.0.0.1:9/mcp")
        .args(["--header-file", missing.to_str().unwrap()])
        .output();
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
