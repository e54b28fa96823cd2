//! How to reach a remote Streamable HTTP server: the flags `connect URL` and `serve --upstream
//! URL` share ([`RemoteArgs`], flattened into both), and the one function that turns them —
//! or a config file's `url` server, through the same struct — into a [`RemoteConfig`]
//! (headers and credentials read from files or the environment, never echoed).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use http::header::{HeaderValue, AUTHORIZATION};
use serde::Deserialize;

use super::units::{parse_duration, parse_header, parse_size};
use crate::upstream::remote::RemoteConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
pub enum ProtocolChoice {
    #[serde(rename = "auto")]
    Auto,
    #[value(name = "2026-07-28")]
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
    #[value(name = "2025-11-25")]
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    #[value(name = "2025-06-18")]
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    #[value(name = "2025-03-26")]
    #[serde(rename = "2025-03-26")]
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

/// The remote upstream's settings, as flags (`connect`, `serve --upstream`). A config file's
/// `url` server fills the same struct from its keys (`headers`, `header_file`, …).
#[derive(Clone, PartialEq, Eq, Args)]
#[command(next_help_heading = "Remote server (connect URL, serve --upstream URL)")]
pub struct RemoteArgs {
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
    /// Treat an SSE stream with no event and no keep-alive for this long as dead (default: no
    /// limit; TCP keep-alive still notices a vanished peer).
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
}

impl std::fmt::Debug for RemoteArgs {
    /// Header values stay out (they may be credentials); names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .header
            .iter()
            .map(|h| h.split(':').next().unwrap_or("").trim())
            .collect();
        f.debug_struct("RemoteArgs")
            .field("header_names", &names)
            .field("header_file", &self.header_file)
            .field("bearer_token_file", &self.bearer_token_file)
            .field("bearer_token_env", &self.bearer_token_env)
            .field("protocol", &self.protocol)
            .field("ca_file", &self.ca_file)
            .field("system_roots", &self.system_roots)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("retry_idempotent", &self.retry_idempotent)
            .field("max_response", &self.max_response)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

impl Default for RemoteArgs {
    /// The flags' defaults (a unit test holds the two together).
    fn default() -> Self {
        RemoteArgs {
            header: Vec::new(),
            header_file: None,
            bearer_token_file: None,
            bearer_token_env: None,
            protocol: ProtocolChoice::Auto,
            ca_file: None,
            system_roots: false,
            connect_timeout: Duration::from_secs(10),
            request_timeout: None,
            retry_idempotent: false,
            max_response: 16 << 20,
            idle_timeout: None,
        }
    }
}

/// Whose names the messages use: the flags, or the config file's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    Flags,
    File,
}

impl Naming {
    /// `flag` is the long flag without dashes (`header-file`): `--header-file` or `header_file`.
    fn name(self, flag: &str) -> String {
        match (self, flag) {
            (Naming::Flags, "header") => "-H".into(),
            (Naming::File, "header") => "headers".into(),
            (Naming::Flags, f) => format!("--{f}"),
            (Naming::File, f) => f.replace('-', "_"),
        }
    }
}

/// The clap ids of [`RemoteArgs`] (its field names), e.g. to refuse them where they do not
/// apply.
pub fn ids() -> Vec<String> {
    RemoteArgs::augment_args(clap::Command::new("remote"))
        .get_arguments()
        .map(|a| a.get_id().as_str().to_owned())
        .collect()
}

/// Check a remote endpoint URL: `http(s)://HOST/…`, without credentials. Messages never repeat
/// the URL (it could carry a secret).
pub fn check_url(url: &str, naming: Naming) -> Result<http::Uri, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err("the URL must be http://HOST/… or https://HOST/…".into());
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(format!(
            "put credentials in {} or {}, not in the URL",
            naming.name("bearer-token-file"),
            naming.name("header")
        ));
    }
    Ok(uri)
}

impl RemoteArgs {
    /// The one way to a [`RemoteConfig`]: check `url`, read the header file and the bearer
    /// token (file or variable); every header value is marked sensitive. `probe_timeout` is the
    /// caller's (`connect`'s and `serve`'s `--probe-timeout`).
    pub fn config(
        &self,
        url: &str,
        probe_timeout: Duration,
        naming: Naming,
    ) -> Result<RemoteConfig, String> {
        let n = |f: &str| naming.name(f);
        let url = check_url(url, naming)?;
        let mut headers = Vec::new();
        for h in &self.header {
            headers.push(parse_header(h).map_err(|e| format!("{}: {e}", n("header")))?);
        }
        if let Some(f) = &self.header_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("{} {}: {e}", n("header-file"), f.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                headers.push(parse_header(line).map_err(|e| {
                    format!("{} {} line {}: {e}", n("header-file"), f.display(), i + 1)
                })?);
            }
        }
        let token = match (&self.bearer_token_file, &self.bearer_token_env) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "give {} or {}, not both",
                    n("bearer-token-file"),
                    n("bearer-token-env")
                ))
            }
            (Some(f), None) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("{} {}: {e}", n("bearer-token-file"), f.display()))?,
            ),
            (None, Some(var)) => Some(
                std::env::var(var)
                    .map_err(|_| format!("{}: ${var} is not set", n("bearer-token-env")))?,
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
            probe_timeout,
            idle_timeout: self.idle_timeout,
            oauth: None,
            learn_tools_first: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{FromArgMatches, Parser};

    #[derive(Parser)]
    struct Only {
        #[command(flatten)]
        remote: RemoteArgs,
    }

    fn parse(args: &[&str]) -> RemoteArgs {
        let m = <Only as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap();
        Only::from_arg_matches(&m).unwrap().remote
    }

    #[test]
    fn default_is_the_flags_defaults() {
        assert_eq!(parse(&[]), RemoteArgs::default());
        assert!(ids().contains(&"bearer_token_file".to_owned()));
        assert!(ids().contains(&"header".to_owned()));
    }

    #[test]
    fn token_replaces_authorization_and_is_sensitive() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "s3cr3t-token\n").unwrap();
        let mut a = parse(&["-H", "Authorization: Basic x", "-H", "X-Tenant: acme"]);
        a.bearer_token_file = Some(f);
        let cfg = a
            .config(
                "https://h.example/mcp",
                Duration::from_secs(3),
                Naming::Flags,
            )
            .unwrap();
        assert!(cfg.has_token);
        assert_eq!(cfg.probe_timeout, Duration::from_secs(3));
        let auth: Vec<_> = cfg
            .headers
            .iter()
            .filter(|(k, _)| *k == AUTHORIZATION)
            .collect();
        assert_eq!(auth.len(), 1);
        assert_eq!(auth[0].1, "Bearer s3cr3t-token");
        assert!(cfg.headers.iter().all(|(_, v)| v.is_sensitive()));
        assert!(!format!("{cfg:?}").contains("s3cr3t"), "{cfg:?}");
        let a = parse(&["-H", "X-Key: hidden-value"]);
        assert!(!format!("{a:?}").contains("hidden-value"), "{a:?}");
    }

    #[test]
    fn errors_use_the_callers_names_and_hide_the_url() {
        let a = RemoteArgs {
            bearer_token_env: Some("MCPB_SURELY_UNSET_VAR".into()),
            ..RemoteArgs::default()
        };
        let e = a
            .config("http://h/mcp", Duration::ZERO, Naming::File)
            .unwrap_err();
        assert!(e.starts_with("bearer_token_env:"), "{e}");
        let e = check_url("https://user:pw@h/mcp", Naming::Flags).unwrap_err();
        assert!(
            e.contains("--bearer-token-file") && !e.contains("pw"),
            "{e}"
        );
        let e = check_url("https://user:pw@h/mcp", Naming::File).unwrap_err();
        assert!(
            e.contains("bearer_token_file") && e.contains("headers"),
            "{e}"
        );
        assert!(check_url("ftp://h/x", Naming::Flags).is_err());
        assert!(check_url("/relative", Naming::Flags).is_err());
        let a = RemoteArgs {
            header: vec!["Bad Name: v".into()],
            ..RemoteArgs::default()
        };
        let e = a
            .config("http://h/mcp", Duration::ZERO, Naming::File)
            .unwrap_err();
        assert!(e.starts_with("headers: "), "{e}");
    }
}
