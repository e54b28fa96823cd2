//! README "Observability": `--log-format json` writes stderr as one JSON object per line
//! (timestamp, level, fields with the message, target), and a line logged during a call
//! carries the `call` span's fields: `server`, `method`, `id` (the caller's, as JSON text) and
//! `upstream_id` (the bridge's id, which the child sees).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_with_the_calls_span() {
    let mut b = Bridge::builder()
        .serve()
        .log_level("debug")
        .args(["--demo", "--port", "0", "--log-format", "json"])
        .spawn()
        .await;
    // (`b.url` is read from a text line; the JSON line ends in quotes.)
    let r = call_modern(
        &client(),
        &b.endpoint("/mcp"),
        json!("json-1"),
        "echo",
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(r.last()["id"], "json-1", "{r:?}");
    let line = b.log.expect("responding", T).await;
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let span = &v["span"];
    assert_eq!(span["name"], "call", "{v}");
    assert_eq!(span["server"], "default", "{v}");
    assert_eq!(span["method"], "tools/call", "{v}");
    assert_eq!(span["id"], "\"json-1\"", "{v}");
    assert!(span["upstream_id"].is_u64(), "{v}");
    assert_eq!(v["fields"]["status"], 200, "{v}");

    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(b.wait_exit(T).await.is_some_and(|s| s.success()));
    let lines = b.log.lines();
    assert!(lines.len() > 5, "{lines:?}");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        for k in ["timestamp", "level", "target"] {
            assert!(v[k].is_string(), "no {k}: {l}");
        }
        assert!(v["fields"]["message"].is_string(), "no message: {l}");
    }
}
