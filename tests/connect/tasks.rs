//! The tasks extension's refusals at `connect`'s stdio face for a 2026 host
//! (`crate::core::tasks::modern_refusal`, the same as serve's 2026 face): `tasks/result` and
//! `tasks/list` are not methods of the 2026 extension (-32601), and `tasks/get|update|cancel`
//! of a request that does not declare the extension are -32021 naming it (the demo remote,
//! which has no tasks, would answer -32601: a -32021 is connect's own).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_host_gets_the_tasks_extension_refusals() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &[]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let mut n = 0;
    for (method, want) in [
        ("tasks/result", -32601),
        ("tasks/list", -32601),
        ("tasks/get", -32021),
        ("tasks/cancel", -32021),
        ("tasks/update", -32021),
    ] {
        n += 1;
        h.request(
            json!(n),
            method,
            json!({"taskId": "mb-00000000000000000000000000000000", "_meta": meta}),
        );
        let r = h.response(&json!(n), T);
        assert_eq!(r["error"]["code"], want, "{method}: {r}");
        if want == -32021 {
            let ext = &r["error"]["data"]["requiredCapabilities"]["extensions"];
            assert!(ext.get("io.modelcontextprotocol/tasks").is_some(), "{r}");
        }
    }
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}
