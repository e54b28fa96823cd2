//! `mcp-bridge connect`: its flags, their translation into a `RemoteConfig` (headers and
//! credentials read from files or the environment, never echoed), and the wiring of the stdio
//! face to the remote upstream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use http::header::{HeaderName, HeaderValue, AUTHORIZATION};
use tokio_util::sync::CancellationToken;

use crate::cli::{parse_duration, parse_size};
use crate::upstream::remote::{Remote, RemoteConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolChoice {
    Auto,
    #[value(name = "2026-07-28")]
    V2026_07_28,
    #[value(name = "2025-11-25")]
    V2025_11_25,
    #[value(name = "2025-06-18")]
    V2025_06_18,
    #[value(name = "2025-03-26")]
    V2025_03_26,
}

impl ProtocolChoice {
    fn version(self) -> Option<&'static str> {
        match self {
            ProtocolChoice::Auto => None,
            ProtocolChoice::V2026_07_28 => Some("2026-07-28"),
            ProtocolChoice::V2025_11_25 => Some("2025-11-25"),
            ProtocolChoice::V2025_06_18 => Some("2025-06-18"),
            ProtocolChoice::V2025_03_26 => Some("2025-03-26"),
        }
    }
}

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The remote MCP endpoint, e.g. https://mcp.example.com/mcp
    pub url: String,
    /// Extra request header "Name: value" (repeatable). Prefer --header-file for secrets.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// File of "Name: value" lines (blank lines and # comments skipped).
    #[arg(long, value_name = "FILE")]
    pub header_file: Option<PathBuf>,
    /// File holding a bearer token (sent as Authorization: Bearer …).
    #[arg(long, value_name = "FILE", conflicts_with = "bearer_token_env")]
    pub bearer_token_file: Option<PathBuf>,
    /// Environment variable holding a bearer token.
    #[arg(long, value_name = "VAR")]
    pub bearer_token_env: Option<String>,
    /// Protocol revision of the remote: auto-detect, or pin one.
    #[arg(long, value_enum, default_value = "auto")]
    pub protocol: ProtocolChoice,
    /// Extra trusted CA certificates (PEM).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Trust the operating system's root certificates instead of the built-in webpki roots.
    #[arg(long)]
    pub system_roots: bool,
    /// Time allowed to open a TCP connection.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Longest a request may take before it is cancelled (default: no limit).
    #[arg(long, value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Re-send a call once after a broken connection when it is a read or a tool annotated
    /// read-only or idempotent.
    #[arg(long)]
    pub retry_idempotent: bool,
    /// Largest JSON response or SSE event accepted from the remote.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_response: usize,
    /// Longest line accepted from the host on stdin.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_line: usize,
    /// Treat an SSE stream with no event and no keep-alive for this long as dead (default: no
    /// limit; TCP keep-alive still notices a vanished peer).
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// How long era detection waits for an answer before assuming a 2025 server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,
    /// Name of the server in logs and metrics (the `server` label; default: the URL's host).
    #[arg(long)]
    pub name: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics on a listener of their own (off unless set).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

/// Parse "Name: value" into a header (value marked sensitive).
pub fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some((k, v)) = line.split_once(':') else {
        return Err("expected \"Name: value\"".into());
    };
    let name = HeaderName::from_bytes(k.trim().as_bytes())
        .map_err(|_| format!("invalid header name {:?}", k.trim()))?;
    let mut value =
        HeaderValue::from_str(v.trim()).map_err(|_| format!("invalid value for header {name}"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

impl ConnectArgs {
    pub fn config(&self) -> Result<RemoteConfig, String> {
        let url: http::Uri = self.url.parse().map_err(|e| format!("invalid URL: {e}"))?;
        if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
            return Err("the URL must be http://HOST/… or https://HOST/…".into());
        }
        if url.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err("put credentials in --bearer-token-file or -H, not in the URL".into());
        }
        let mut headers = Vec::new();
        for h in &self.header {
            headers.push(parse_header(h).map_err(|e| format!("-H: {e}"))?);
        }
        if let Some(f) = &self.header_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("--header-file {}: {e}", f.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                headers.push(
                    parse_header(line).map_err(|e| {
                        format!("--header-file {} line {}: {e}", f.display(), i + 1)
                    })?,
                );
            }
        }
        let token = match (&self.bearer_token_file, &self.bearer_token_env) {
            (Some(f), _) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("--bearer-token-file {}: {e}", f.display()))?,
            ),
            (None, Some(var)) => Some(
                std::env::var(var).map_err(|_| format!("--bearer-token-env: ${var} is not set"))?,
            ),
            (None, None) => None,
        };
        let has_token = token.is_some();
        if let Some(t) = token {
            let t = t.trim();
            if t.is_empty() {
                return Err("the bearer token is empty".into());
            }
            let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| "the bearer token contains characters not allowed in a header")?;
            v.set_sensitive(true);
            headers.retain(|(k, _)| *k != AUTHORIZATION);
            headers.push((AUTHORIZATION, v));
        }
        Ok(RemoteConfig {
            url,
            headers,
            has_token,
            protocol: self.protocol.version().map(str::to_owned),
            ca_file: self.ca_file.clone(),
            system_roots: self.system_roots,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            retry_idempotent: self.retry_idempotent,
            max_response: self.max_response,
            probe_timeout: self.probe_timeout,
            idle_timeout: self.idle_timeout,
        })
    }
}

/// Run `connect`: the stdio face on our stdin/stdout, the remote behind it, counted under
/// the server name `name` (default: the URL's host) and, with `metrics_listen`, exposed at
/// `http://ADDR/metrics`.
pub async fn run(
    cfg: RemoteConfig,
    max_line: usize,
    name: Option<&str>,
    metrics_listen: Option<SocketAddr>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    // One crypto provider for the process, installed explicitly.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = name
        .or(cfg.url.host())
        .unwrap_or("remote")
        .trim_matches(['[', ']'])
        .to_owned();
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let metrics_stop = CancellationToken::new();
    if let Some(addr) = metrics_listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot bind the metrics listener {addr}: {e}"))?;
        let at = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!("metrics on http://{at}/metrics");
        tokio::spawn(crate::face::metrics_http::serve(
            l,
            metrics.clone(),
            metrics_stop.clone(),
        ));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(crate::call::EVENT_QUEUE);
    let remote = Remote::new(cfg, tx, metrics.clone(), &server)?;
    tracing::info!("connect: forwarding stdio to {}", remote.origin());
    crate::face::stdio::serve(
        remote,
        rx,
        tokio::io::stdin(),
        tokio::io::stdout(),
        max_line,
        crate::face::stdio_observe::HostObserver::new(metrics, &server),
        shutdown,
    )
    .await;
    metrics_stop.cancel();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn connect_flags_parse() {
        let c = Cli::try_parse_from([
            "mcp-bridge",
            "connect",
            "https://mcp.example.com/mcp",
            "-H",
            "X-Tenant: acme",
            "--protocol",
            "2025-06-18",
            "--request-timeout",
            "30s",
        ])
        .unwrap();
        let Command::Connect(a) = c.command else {
            panic!()
        };
        let cfg = a.config().unwrap();
        assert_eq!(cfg.protocol.as_deref(), Some("2025-06-18"));
        assert_eq!(cfg.request_timeout, Some(Duration::from_secs(30)));
        assert_eq!(cfg.headers[0].0, "x-tenant");
        assert!(cfg.headers[0].1.is_sensitive());
        let c = Cli::try_parse_from(["mcp-bridge", "connect", "http://h/mcp"]).unwrap();
        let Command::Connect(a) = c.command else {
            panic!()
        };
        assert_eq!(a.config().unwrap().request_timeout, None);
    }

    #[test]
    fn bad_headers_and_urls_are_usage_errors() {
        assert!(parse_header("no colon").is_err());
        assert!(parse_header("Bad Name: x").is_err());
        assert!(parse_header("X-Ok:  v ").is_ok());
        let c = Cli::try_parse_from(["mcp-bridge", "connect", "ftp://h/x"]).unwrap();
        let Command::Connect(a) = c.command else {
            panic!()
        };
        assert!(a.config().is_err());
    }
}
