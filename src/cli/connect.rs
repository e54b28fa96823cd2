//! `mcp-bridge connect URL`: the remote's flags ([`RemoteArgs`], shared with `serve
//! --upstream`) and the two of its own, for the host side. The wiring is `app::run_connect`.

use std::time::Duration;

use clap::Args;

use super::parse::{parse_duration, parse_size};
use super::remote::{Naming, RemoteArgs};
use crate::upstream::remote::RemoteConfig;

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The remote MCP endpoint, e.g. https://mcp.example.com/mcp
    pub url: String,
    /// Longest line accepted from the host on stdin.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_line: usize,
    /// How long a 2026 host's call parked as `input_required` (a 2025 remote asked it
    /// something) waits for the host's retry before it is cancelled at the remote.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub park_timeout: Duration,
    /// How long era detection waits for an answer before assuming a 2025 server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,
    /// Name of the server in logs and metrics (the `server` label; default: the URL's host).
    #[arg(long)]
    pub name: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics on a listener of their own (off unless set).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

impl ConnectArgs {
    pub fn config(&self) -> Result<RemoteConfig, String> {
        self.remote
            .config(&self.url, self.probe_timeout, Naming::Flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn connect(args: &[&str]) -> ConnectArgs {
        let c = Cli::try_parse_from(["mcp-bridge", "connect"].iter().chain(args)).unwrap();
        let Command::Connect(a) = c.command else {
            panic!()
        };
        *a
    }

    #[test]
    fn connect_flags_parse() {
        let a = connect(&[
            "https://mcp.example.com/mcp",
            "-H",
            "X-Tenant: acme",
            "--protocol",
            "2025-06-18",
            "--request-timeout",
            "30s",
        ]);
        let cfg = a.config().unwrap();
        assert_eq!(cfg.protocol.as_deref(), Some("2025-06-18"));
        assert_eq!(cfg.request_timeout, Some(Duration::from_secs(30)));
        assert_eq!(cfg.headers[0].0, "x-tenant");
        assert!(cfg.headers[0].1.is_sensitive());
        assert_eq!(
            connect(&["http://h/mcp"]).config().unwrap().request_timeout,
            None
        );
    }

    #[test]
    fn bad_urls_are_usage_errors() {
        assert!(connect(&["ftp://h/x"]).config().is_err());
        assert!(Cli::try_parse_from([
            "mcp-bridge",
            "connect",
            "http://h/mcp",
            "--bearer-token-file",
            "f",
            "--bearer-token-env",
            "V"
        ])
        .is_err());
    }
}
