//! The config-file daemon as the tests run it: `[servers.<name>]` tables whose server is the
//! binary's own demo server, config files written into a temp dir, `serve --config` on a free
//! port, the URL of a named server, and each server's child pids read from the log.

use std::path::{Path, PathBuf};

use super::bridge::{bin, Bridge, BridgeBuilder};
use super::http::Reply;
use super::log::word_after;

/// A `[servers.<name>]` table running the demo server (`extra` args after `demo-server`).
pub fn demo_server(name: &str, extra: &[&str]) -> String {
    let mut args = vec!["\"demo-server\"".to_owned()];
    args.extend(extra.iter().map(|a| format!("{a:?}")));
    format!(
        "[servers.{name}]\ncommand = {:?}\nargs = [{}]\n",
        bin(),
        args.join(", ")
    )
}

/// Write `text` to `dir/name` and return the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p
}

/// `serve --config FILE <extra>`, not yet started (more args and env may follow).
pub fn daemon_builder(config: &Path, extra: &[&str]) -> BridgeBuilder {
    Bridge::builder().config(config).args(extra)
}

/// Start the daemon on a free port (`--port 0` overrides the file's addresses).
pub async fn daemon(config: &Path) -> Bridge {
    daemon_builder(config, &["--port", "0"]).spawn().await
}

/// `http://ADDR/servers/<name>/mcp`.
pub fn server_url(b: &Bridge, name: &str) -> String {
    b.endpoint(&format!("/servers/{name}/mcp"))
}

/// Pids of every child started for `server`, in order, from the log.
pub fn child_pids(b: &Bridge, server: &str) -> Vec<u32> {
    let needle = format!("child started server={server} pid=");
    b.log
        .lines()
        .iter()
        .filter_map(|l| word_after(l, &needle))
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// A finished echo answered `text`.
pub fn echoed(r: &Reply, text: &str) -> bool {
    r.status == 200
        && r.messages
            .last()
            .is_some_and(|m| m["result"]["content"][0]["text"] == text)
}
