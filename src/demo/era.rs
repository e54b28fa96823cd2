//! Which era a request is in, and the era-specific entry points: `initialize` (2025) and
//! `server/discover` (2026).
//!
//! The demo decides per request, not per connection: a request whose `_meta` names the 2026
//! revision is served statelessly with what that `_meta` carries (capabilities, log level),
//! anything else with the 2025 session's semantics. [`DemoMode`] narrows this for the
//! single-era servers the tests need: a 2025-only server ignores 2026 `_meta` and has no
//! `server/discover`; a 2026-only server refuses `initialize` and `_meta`-less requests.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::server::{lock, Modern, Reply, Request, Shared};
use super::wire::{
    is_object, parse_obj, raw_str, Level, Meta, Params, RpcError, EX_CACHED, EX_NONE,
    LATEST_LEGACY, LEGACY_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSION,
};
use mcp_bridge::protocol::Era;

const SERVER_NAME: &str = "mcp-bridge-demo";
const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
const INSTRUCTIONS: &str = "Demo server bundled with mcp-bridge. Tools: echo, add, slow, fail, \
bytes, error, sample, elicit, roots, lookup, crash, junk, notify, log. Resource: demo://readme. \
Prompt: greet.";

fn server_capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "prompts": { "listChanged": true },
        "logging": {}
    })
}

impl Shared {
    /// Parse a request's params and `_meta`, decide its era, and run its method.
    pub(super) async fn handle_request<'a>(
        self: &Arc<Self>,
        id: &'a RawValue,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Reply {
        let params: Params = match params {
            Some(p) if p.get() != "null" => parse_obj(p.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))?,
            _ => Params::default(),
        };
        let meta: Meta = match params.meta {
            Some(m) if m.get() != "null" => parse_obj(m.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid _meta: {e}")))?,
            _ => Meta::default(),
        };
        let modern = self.classify(method, &params, &meta)?;
        let req = Request {
            id,
            method,
            params,
            progress_token: meta.progress_token,
            modern,
        };
        self.dispatch(&req).await
    }

    /// The request's era: `Some` (with what its `_meta` carries) for a 2026 request, `None`
    /// for a 2025 one, an error for one this server's mode refuses.
    fn classify<'a>(
        &self,
        method: &str,
        params: &Params<'a>,
        meta: &Meta<'a>,
    ) -> Result<Option<Modern<'a>>, RpcError> {
        if method == "initialize" {
            if !self.mode.speaks(Era::Legacy) {
                let requested = params
                    .protocol_version
                    .and_then(raw_str)
                    .map(Cow::into_owned)
                    .unwrap_or_default();
                return Err(RpcError::unsupported_version(&requested));
            }
            return Ok(None);
        }
        if let (Some(v), true) = (meta.protocol_version, self.mode.speaks(Era::Modern)) {
            let version = raw_str(v).ok_or_else(|| {
                RpcError::invalid_params(format!("{META_PROTOCOL_VERSION} must be a string"))
            })?;
            if version != MODERN_VERSION {
                return Err(RpcError::unsupported_version(&version));
            }
            let caps = meta.client_capabilities.ok_or_else(|| {
                RpcError::invalid_params("missing _meta io.modelcontextprotocol/clientCapabilities")
            })?;
            if !is_object(caps) {
                return Err(RpcError::invalid_params(
                    "io.modelcontextprotocol/clientCapabilities must be an object",
                ));
            }
            let log_level = meta.log_level.map(Level::from_raw).transpose()?;
            return Ok(Some(Modern { caps, log_level }));
        }
        if !self.mode.speaks(Era::Legacy) && method != "server/discover" {
            return Err(RpcError::invalid_params(format!(
                "missing _meta {META_PROTOCOL_VERSION}: this server only speaks {MODERN_VERSION}"
            )));
        }
        Ok(None)
    }

    /// `initialize` (2025): negotiate the version and remember the client's capabilities.
    pub(super) fn initialize(&self, req: &Request<'_>) -> Reply {
        let requested = req.params.protocol_version.and_then(raw_str);
        let version = match requested.as_deref() {
            Some(v) if LEGACY_VERSIONS.contains(&v) => v,
            _ => LATEST_LEGACY,
        };
        let caps = req
            .params
            .capabilities
            .and_then(|c| serde_json::from_str::<Value>(c.get()).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        {
            let mut s = lock(&self.legacy);
            s.version = version.to_owned();
            s.client_caps = caps;
        }
        eprintln!("demo: initialize (protocol {version})");
        let result = json!({
            "protocolVersion": version,
            "capabilities": server_capabilities(),
            "serverInfo": { "name": SERVER_NAME, "version": SERVER_VERSION },
            "instructions": INSTRUCTIONS,
        });
        req.reply(&result, EX_NONE)
    }

    /// `server/discover` (2026): what this server speaks and offers; cacheable. A 2025-only
    /// server does not have the method.
    pub(super) fn discover(&self, req: &Request<'_>) -> Reply {
        if !self.mode.speaks(Era::Modern) {
            return Err(RpcError::method_not_found(req.method));
        }
        let result = json!({
            "supportedVersions": [MODERN_VERSION],
            "capabilities": server_capabilities(),
            "instructions": INSTRUCTIONS,
        });
        req.reply(&result, EX_CACHED)
    }
}
