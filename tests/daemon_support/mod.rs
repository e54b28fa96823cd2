//! Helpers for the daemon tests: configuration files whose servers are the bridge's own demo
//! server, starting `serve --config` with extra environment, and finding each server's child
//! from the log.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

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

/// `mcp-bridge --log-level info serve --config FILE <extra>`, not yet started.
pub fn daemon_command(config: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("--log-level")
        .arg("info")
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("MCP_BRIDGE_LOG")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// Start the daemon on a free port (`--port 0` overrides the file's addresses).
pub async fn daemon(config: &Path) -> Bridge {
    Bridge::spawn(daemon_command(config, &["--port", "0"])).await
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

/// A finished echo through `url` answered `text`.
pub fn echoed(r: &Reply, text: &str) -> bool {
    r.status == 200
        && r.messages
            .last()
            .is_some_and(|m| m["result"]["content"][0]["text"] == text)
}
