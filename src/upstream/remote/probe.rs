//! Era detection and tool rules of the remote upstream: the probe (a 2026 request first, then
//! `initialize`), the 2026 request headers, the tool list it learns from (`Mcp-Param-*`
//! header rules) and the discover result built for a 2025 remote.

use http::header::{HeaderName, HeaderValue};
use std::time::Duration;

use http::HeaderMap;
use serde_json::json;
use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::fault::Fault;
use super::{Answer, Mode, Remote, ToolInfo};
use crate::jsonrpc::{self, code, Envelope, Fields};
use crate::protocol;

impl Remote {
    /// The remote's era, probed on first use. Known (every call but the first): no await, and
    /// the probe's future (the largest of the remote's) is boxed so that a call's does not
    /// carry it.
    pub(super) async fn mode(&self) -> Result<Mode, Fault> {
        match self.mode.get() {
            Some(m) => Ok(m.clone()),
            None => Box::pin(self.first_mode()).await,
        }
    }

    async fn first_mode(&self) -> Result<Mode, Fault> {
        self.mode
            .get_or_try_init(|| async {
                let m = self.probe().await?;
                match &m {
                    Mode::Modern => info!("remote {} speaks 2026-07-28", self.origin),
                    Mode::Legacy { version } => {
                        info!("remote {} is a 2025-era server ({version})", self.origin)
                    }
                }
                Ok(m)
            })
            .await
            .cloned()
    }

    pub(super) fn modern_meta(&self) -> String {
        json!({
            protocol::META_PROTOCOL_VERSION: protocol::MODERN,
            protocol::META_CLIENT_CAPABILITIES: {},
            protocol::META_CLIENT_INFO: {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        })
        .to_string()
    }

    pub(super) fn modern_headers(&self, version: &str, method: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(version) {
            h.insert(HeaderName::from_static(protocol::H_PROTOCOL_VERSION), v);
        }
        if let Ok(v) = HeaderValue::from_str(&protocol::encode_header_value(method)) {
            h.insert(HeaderName::from_static(protocol::H_METHOD), v);
        }
        h
    }

    /// Wait for the probe's answer for `--probe-timeout`, or, while an OAuth login it
    /// started is under way, for as long as that login may take (its own bound) on top.
    async fn probe_wait<F: std::future::Future>(&self, fut: F) -> Result<F::Output, ()> {
        let mut fut = std::pin::pin!(fut);
        if let Ok(r) = tokio::time::timeout(self.cfg.probe_timeout, &mut fut).await {
            return Ok(r);
        }
        match &self.oauth {
            Some(o) if o.logging_in() => {
                let limit = o.login_timeout() + Duration::from_secs(60);
                tokio::time::timeout(limit, fut).await.map_err(|_| ())
            }
            _ => Err(()),
        }
    }

    pub(super) async fn probe(&self) -> Result<Mode, Fault> {
        match self.cfg.protocol.as_deref() {
            Some(protocol::MODERN) => return Ok(Mode::Modern),
            Some(v) => {
                return Ok(Mode::Legacy {
                    version: v.to_owned(),
                })
            }
            None => {}
        }
        let id = self.mint();
        let params = format!("{{\"_meta\":{}}}", self.modern_meta());
        let frame = jsonrpc::request(&id.to_string(), "server/discover", Some(&params));
        let headers = self.modern_headers(protocol::MODERN, "server/discover");
        let fut = self.exchange(frame, &headers, Some(id), None, None);
        let legacy = Mode::Legacy {
            version: protocol::LEGACY_LATEST.to_owned(),
        };
        let ans = match self.probe_wait(fut).await {
            Err(_) => {
                debug!("no answer to server/discover in time: assuming a 2025 server");
                return Ok(legacy);
            }
            Ok(Ok(a)) => a,
            Ok(Err(
                f @ (Fault::Unreachable { .. }
                | Fault::Auth(_)
                | Fault::Login(_)
                | Fault::Scope(_)
                | Fault::Broken(_)),
            )) => return Err(f),
            Ok(Err(f)) => {
                debug!(
                    "server/discover failed ({}): assuming a 2025 server",
                    f.reason()
                );
                return Ok(legacy);
            }
        };
        let Some(frame) = ans.frame else {
            return Ok(legacy);
        };
        let Ok(env) = Envelope::parse(&frame) else {
            return Ok(legacy);
        };
        if let Some(r) = env.result {
            if Fields::parse(r).is_some_and(|f| f.has("supportedVersions")) {
                *self.discover.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(r.to_owned().into());
                return Ok(Mode::Modern);
            }
            return Ok(legacy);
        }
        let err = env.error.and_then(protocol::error_code);
        match err {
            Some(code::UNSUPPORTED_PROTOCOL_VERSION) => {
                // A 2026-era server that does not speak our revision: try 2025 if it lists one.
                let v: serde_json::Value = env
                    .error
                    .and_then(|e| serde_json::from_str(e.get()).ok())
                    .unwrap_or_default();
                let supported: Vec<String> = v["data"]["supported"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if supported.iter().any(|s| s == protocol::MODERN) {
                    Ok(Mode::Modern)
                } else if let Some(l) = supported.iter().find(|s| protocol::is_legacy_version(s)) {
                    Ok(Mode::Legacy { version: l.clone() })
                } else {
                    Err(Fault::Status(
                        400,
                        format!("the remote supports none of our protocol versions: {supported:?}"),
                    ))
                }
            }
            Some(code::HEADER_MISMATCH | code::MISSING_CLIENT_CAPABILITY) => Ok(Mode::Modern),
            _ => Ok(legacy),
        }
    }

    /// Record the tools of a `tools/list` page; for a 2026 remote drop the ones with invalid
    /// `x-mcp-header` annotations (logged). Returns the result to pass on if it changed.
    pub(super) fn learn_tools(&self, result: &RawValue, filter: bool) -> Option<String> {
        let mut v: serde_json::Value = serde_json::from_str(result.get()).ok()?;
        let tools = v.get_mut("tools")?.as_array_mut()?;
        let before = tools.len();
        let mut cache = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        tools.retain(|t| {
            let name = t["name"].as_str().unwrap_or("").to_owned();
            let headers = match protocol::tool_param_headers(&t["inputSchema"]) {
                Ok(h) => h
                    .into_iter()
                    .map(|(lower, prop)| {
                        let shown = t["inputSchema"]["properties"][&prop]["x-mcp-header"]
                            .as_str()
                            .unwrap_or(&lower)
                            .to_owned();
                        (shown, prop)
                    })
                    .collect(),
                Err(why) => {
                    if filter {
                        warn!("dropping tool {name:?} from tools/list: {why}");
                        cache.remove(&name);
                        return false;
                    }
                    Vec::new()
                }
            };
            let ann = &t["annotations"];
            let retry_safe =
                ann["readOnlyHint"] == json!(true) || ann["idempotentHint"] == json!(true);
            cache.insert(
                name,
                ToolInfo {
                    headers,
                    retry_safe,
                },
            );
            true
        });
        self.obs
            .tools_listed(tools.iter().filter_map(|t| t["name"].as_str()));
        if tools.len() == before {
            return None;
        }
        Some(v.to_string())
    }

    /// Fetch the whole tool list from a 2026 remote (bridge's own requests).
    pub(super) async fn refresh_tools(&self) {
        let mut cursor: Option<String> = None;
        for _ in 0..50 {
            let id = self.mint();
            let params = match &cursor {
                Some(c) => json!({"cursor": c, "_meta": serde_json::from_str::<serde_json::Value>(&self.modern_meta()).unwrap_or_default()}).to_string(),
                None => format!("{{\"_meta\":{}}}", self.modern_meta()),
            };
            let frame = jsonrpc::request(&id.to_string(), "tools/list", Some(&params));
            let h = self.modern_headers(protocol::MODERN, "tools/list");
            let Ok(Answer {
                frame: Some(frame), ..
            }) = self.exchange(frame, &h, Some(id), None, None).await
            else {
                return;
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return;
            };
            let Some(r) = env.result else { return };
            let _ = self.learn_tools(r, true);
            cursor = Fields::parse(r)
                .and_then(|f| f.get("nextCursor"))
                .and_then(|c| serde_json::from_str::<String>(c.get()).ok());
            if cursor.is_none() {
                return;
            }
        }
    }

    pub(super) fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// `Mcp-Name` and `Mcp-Param-*` headers for a request, from its params' top-level
    /// fields (parsed once by the caller: borrowed, so a large argument is never copied; only
    /// a tool with `x-mcp-header` mappings has its arguments parsed).
    pub(super) fn name_headers(&self, h: &mut HeaderMap, method: &str, p: Option<&Fields<'_>>) {
        let Some(field) = protocol::name_field(method) else {
            return;
        };
        let Some(p) = p else { return };
        let name = p
            .get(field)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
        if let Some(n) = &name {
            if let Ok(v) = HeaderValue::from_str(&protocol::encode_header_value(n)) {
                h.insert(HeaderName::from_static(protocol::H_NAME), v);
            }
        }
        if method != "tools/call" {
            return;
        }
        let Some(tool) = name.as_deref().and_then(|n| self.tool(n)) else {
            return;
        };
        if tool.headers.is_empty() {
            return;
        }
        let args: serde_json::Value = p
            .get("arguments")
            .and_then(|a| serde_json::from_str(a.get()).ok())
            .unwrap_or_default();
        for (header, prop) in &tool.headers {
            let value = match &args[prop] {
                serde_json::Value::String(s) => protocol::encode_header_value(s),
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => {
                        format!("{}", f as i64)
                    }
                    _ => continue,
                },
                _ => continue,
            };
            let name = format!(
                "{}{}",
                protocol::H_PARAM_PREFIX,
                header.to_ascii_lowercase()
            );
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                h.insert(n, v);
            }
        }
    }
}

/// A 2026 `DiscoverResult` built from a 2025 `InitializeResult`.
/// A 2025 remote's `InitializeResult` as a 2026 `server/discover` result.
pub(super) fn discover_from_init(init: &RawValue) -> String {
    crate::era::lifecycle::discover_from_initialize(Some(init))
}
