//! What the bridge asks a child on its own behalf: the era probe (`server/discover` first,
//! then `initialize`), and the tool list (its `x-mcp-header` rules for `Mcp-Param-*` checks
//! and the tool names allowed as metric labels), read once the child is ready and again,
//! one refresh at a time, after `notifications/tools/list_changed`.
//!
//! These are internal calls through the process's multiplexer (`mux`) with a timeout of
//! their own; the supervisor (`process`) and the output router (`route`) start them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::mux::Proc;
use super::ChildUpstream;
use crate::call::{Call, CallCtx, Outcome, UpstreamInfo};
use crate::jsonrpc::{self, Fields};
use crate::protocol::{self, Era};

impl ChildUpstream {
    /// An internal request (probe, tools/list) with a timeout; returns the result or None.
    async fn internal(
        &self,
        proc: &Arc<Proc>,
        era: Era,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
    ) -> Option<Result<Box<RawValue>, Box<RawValue>>> {
        let call = Call {
            method: method.to_owned(),
            params: params.map(jsonrpc::raw),
            ctx: CallCtx::modern(),
        };
        let mut h = self.start_on(proc, era, &call, true).ok()?;
        h.set_cancel_reason("timeout");
        match tokio::time::timeout(timeout, &mut h.outcome).await {
            Ok(Ok(Outcome::Result(r))) => Some(Ok(r)),
            Ok(Ok(Outcome::Error(e))) => Some(Err(e)),
            _ => None,
        }
    }

    /// Decide the child's era: `server/discover` first; a 2026 answer (or a recognised 2026
    /// error) means 2026; anything else (other error, silence) means `initialize`.
    pub(super) async fn probe(&self, proc: &Arc<Proc>) -> Option<UpstreamInfo> {
        let t = self.inner.cfg.probe_timeout;
        let meta = serde_json::json!({"_meta": {
            protocol::META_PROTOCOL_VERSION: protocol::MODERN,
            protocol::META_CLIENT_CAPABILITIES: {},
            protocol::META_CLIENT_INFO: {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        }})
        .to_string();
        match self
            .internal(proc, Era::Modern, "server/discover", Some(&meta), t)
            .await
        {
            Some(Ok(r)) => {
                let supports = Fields::parse(&r)
                    .and_then(|f| {
                        f.get("supportedVersions")
                            .map(|v| v.get().contains(protocol::MODERN))
                    })
                    .unwrap_or(true);
                if supports {
                    return Some(UpstreamInfo {
                        era: Era::Modern,
                        discover: Some(Arc::from(r)),
                        initialize: None,
                    });
                }
            }
            Some(Err(e)) => {
                if protocol::error_code(&e) == Some(jsonrpc::code::UNSUPPORTED_PROTOCOL_VERSION) {
                    warn!(server = %self.inner.cfg.name, "child is 2026-era but does not support {}", protocol::MODERN);
                }
            }
            None => debug!(server = %self.inner.cfg.name, "no answer to server/discover"),
        }
        let init = serde_json::json!({
            "protocolVersion": protocol::LEGACY_LATEST,
            "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        })
        .to_string();
        match self
            .internal(proc, Era::Legacy, "initialize", Some(&init), t)
            .await
        {
            Some(Ok(r)) => {
                let _ = proc
                    .stdin
                    .send(jsonrpc::notification("notifications/initialized", None))
                    .await;
                Some(UpstreamInfo {
                    era: Era::Legacy,
                    discover: None,
                    initialize: Some(Arc::from(r)),
                })
            }
            Some(Err(e)) => {
                warn!(server = %self.inner.cfg.name, error = %e.get(), "child refused initialize");
                None
            }
            None => None,
        }
    }

    /// Learn which tools carry `x-mcp-header` annotations (for `Mcp-Param-*` validation).
    pub(super) async fn refresh_tools(&self, proc: &Arc<Proc>, era: Era) -> usize {
        let mut map = HashMap::new();
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        for _page in 0..20 {
            let mut params = serde_json::Map::new();
            if era == Era::Modern {
                params.insert(
                    "_meta".into(),
                    serde_json::json!({
                        protocol::META_PROTOCOL_VERSION: protocol::MODERN,
                        protocol::META_CLIENT_CAPABILITIES: {},
                    }),
                );
            }
            if let Some(c) = &cursor {
                params.insert("cursor".into(), serde_json::Value::String(c.clone()));
            }
            let p = serde_json::Value::Object(params).to_string();
            let Some(Ok(r)) = self
                .internal(
                    proc,
                    era,
                    "tools/list",
                    Some(&p),
                    self.inner.cfg.probe_timeout,
                )
                .await
            else {
                break;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(r.get()) else {
                break;
            };
            for t in v
                .get("tools")
                .and_then(|t| t.as_array())
                .into_iter()
                .flatten()
            {
                names.extend(t.get("name").and_then(|n| n.as_str()).map(str::to_owned));
                let (Some(name), Some(schema)) =
                    (t.get("name").and_then(|n| n.as_str()), t.get("inputSchema"))
                else {
                    continue;
                };
                match protocol::tool_param_headers(schema) {
                    Ok(h) if !h.is_empty() => {
                        map.insert(name.to_owned(), h);
                    }
                    Ok(_) => {}
                    Err(why) => {
                        warn!(server = %self.inner.cfg.name, tool = name, "invalid x-mcp-header: {why}")
                    }
                }
            }
            cursor = v
                .get("nextCursor")
                .and_then(|c| c.as_str())
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        if let Ok(mut g) = proc.tool_headers.write() {
            *g = map;
        }
        if let Ok(mut g) = proc.tool_names.write() {
            *g = crate::metrics::ToolNames::new(names.iter().map(String::as_str));
        }
        names.len()
    }

    /// The child's tool list changed: read it again (header rules and metric labels), one
    /// refresh at a time; a change announced during a refresh gets one more.
    pub(super) fn tools_changed(&self, proc: &Arc<Proc>) {
        use std::sync::atomic::Ordering::SeqCst;
        if proc.tools_changed.fetch_add(1, SeqCst) > 0 {
            return;
        }
        let (me, proc) = (self.clone(), proc.clone());
        self.inner.tracker.spawn(async move {
            loop {
                let era = proc.info().map(|i| i.era).unwrap_or(Era::Legacy);
                let n = me.refresh_tools(&proc, era).await;
                info!(server = %me.inner.cfg.name, tools = n, "tool list re-read after list_changed");
                if proc
                    .tools_changed
                    .compare_exchange(1, 0, SeqCst, SeqCst)
                    .is_ok()
                {
                    break;
                }
                proc.tools_changed.store(1, SeqCst);
            }
        });
    }
}
