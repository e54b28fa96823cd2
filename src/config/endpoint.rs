//! `[endpoints.NAME]`: one published path that merges several `[servers.NAME]` (an
//! aggregation endpoint, [`crate::upstream::aggregate`]). What is written (`EndpointFile`)
//! and what it resolves to (`EndpointSpec`, the `Target` of a `ServerSpec` like any server's,
//! so that reloads compare and restart endpoints the way they do servers).
//!
//! Checked here, where a mistake is reported before anything starts: the path (absolute, not
//! a named server's and not the bridge's own), the members (each a `[servers.NAME]`, no
//! repeats, at least one), the separator (1-8 characters that cannot start a server name's
//! own characters ambiguously) and the prefix mode. Name collisions of `prefix = "never"`
//! need the members' lists: the daemon checks them when it starts the endpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// How a member's tool and prompt names are published.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Prefix {
    /// `<server><separator><name>`.
    #[default]
    Always,
    /// The bare name; two members with one name is an error at start.
    Never,
}

/// One `[endpoints.NAME]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointFile {
    /// Where it is published (default `/endpoints/NAME/mcp`).
    pub path: Option<String>,
    /// The `[servers.NAME]` it merges, in order (the first wins a resource URI two list).
    pub servers: Vec<String>,
    /// Between the server's name and the tool's (default `__`).
    pub separator: Option<String>,
    #[serde(default)]
    pub prefix: Prefix,
    /// The `serverInfo.title` clients see (default: the endpoint's name).
    pub title: Option<String>,
    /// Calls per caller: `"100/min"` (also `/sec`, `/hour`).
    pub rate: Option<String>,
    /// How many calls over the rate a caller may make at once (default: the rate's count).
    pub burst: Option<u32>,
    /// Calls in flight per caller, at most.
    pub concurrency: Option<usize>,
}

/// An endpoint's limits per caller (`crate::upstream::aggregate::limits`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateSpec {
    /// (calls, per this long).
    pub rate: Option<(u32, Duration)>,
    pub burst: u32,
    pub concurrency: Option<usize>,
}

/// An endpoint, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    /// Member server names, in the order written.
    pub members: Vec<String>,
    pub separator: String,
    pub prefix: Prefix,
    pub title: Option<String>,
    /// Who may use what (`[[policy]]`).
    pub policy: super::policy::Policy,
    pub limits: RateSpec,
}

/// The path an endpoint is published at when its table names none.
pub fn endpoint_path(name: &str) -> String {
    format!("/endpoints/{name}/mcp")
}

/// Check one endpoint table against the servers of the same file; returns its path and spec.
pub fn resolve(
    name: &str,
    e: &EndpointFile,
    servers: &BTreeMap<String, super::ServerFile>,
) -> Result<(String, EndpointSpec), String> {
    let at = |m: String| format!("endpoint {name:?}: {m}");
    if servers.contains_key(name) {
        return Err(at("a [servers] entry has the same name".into()));
    }
    let path = e.path.clone().unwrap_or_else(|| endpoint_path(name));
    check_path(&path).map_err(at)?;
    if e.servers.is_empty() {
        return Err(at("servers = [...] names no server".into()));
    }
    let mut seen = Vec::new();
    for m in &e.servers {
        if !servers.contains_key(m) {
            return Err(at(format!("server {m:?} is not among [servers]")));
        }
        if seen.contains(&m) {
            return Err(at(format!("server {m:?} is named twice")));
        }
        seen.push(m);
    }
    let separator = e.separator.clone().unwrap_or_else(|| "__".to_owned());
    let sep_ok = !separator.is_empty()
        && separator.len() <= 8
        && separator
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '/' | '"' | '\\'));
    if !sep_ok {
        return Err(at(format!(
            "separator {separator:?}: use 1-8 printable ASCII characters (no '/', '\"' or '\\')"
        )));
    }
    Ok((
        path,
        EndpointSpec {
            members: e.servers.clone(),
            separator,
            prefix: e.prefix,
            title: e.title.clone(),
            policy: super::policy::Policy::default(),
            limits: rate_spec(e).map_err(at)?,
        },
    ))
}

/// The `rate`, `burst` and `concurrency` of a table, checked.
fn rate_spec(e: &EndpointFile) -> Result<RateSpec, String> {
    let rate = e.rate.as_deref().map(parse_rate).transpose()?;
    if e.burst.is_some() && rate.is_none() {
        return Err("burst needs a rate".into());
    }
    if e.concurrency == Some(0) {
        return Err("concurrency = 0 would refuse every call".into());
    }
    Ok(RateSpec {
        rate,
        burst: e.burst.or(rate.map(|(n, _)| n)).unwrap_or(1).max(1),
        concurrency: e.concurrency,
    })
}

/// `"100/min"` as (100, one minute); units `s`/`sec`/`second`, `m`/`min`/`minute`,
/// `h`/`hour`.
pub fn parse_rate(s: &str) -> Result<(u32, Duration), String> {
    let bad = || format!("rate {s:?}: use N/sec, N/min or N/hour (N from 1)");
    let (n, unit) = s.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(bad());
    }
    Ok((n, per))
}

/// An endpoint path: absolute, plain characters, and not one the bridge answers itself.
fn check_path(p: &str) -> Result<(), String> {
    let plain = p.starts_with('/')
        && p.len() <= 200
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
        && !p.contains("//")
        && !p.split('/').any(|s| s == "." || s == "..");
    if !plain {
        return Err(format!(
            "path {p:?}: use an absolute path of letters, digits, '/', '-', '_' and '.'"
        ));
    }
    let reserved = p == "/mcp"
        || p == "/metrics"
        || p == "/healthz"
        || p == "/readyz"
        || p.starts_with("/servers/")
        || p.starts_with("/.well-known/");
    if reserved {
        return Err(format!(
            "path {p:?} is the bridge's own (/mcp, /metrics, /healthz, /readyz, /servers/..., \
             /.well-known/...)"
        ));
    }
    Ok(())
}
