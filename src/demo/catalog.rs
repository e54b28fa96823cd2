//! The method table of the demo server and its plain methods: `ping`, resources, prompts,
//! completion, and the 2025 session's `logging/setLevel` and `resources/(un)subscribe`.
//!
//! [`Shared::dispatch`] is the one place that maps a method name to its handler, with the
//! era conditions visible in the table (2025-only methods do not exist for 2026 requests and
//! vice versa); the handlers with more to them live with their job (`era`, `tools`,
//! `listen`). Everything here is constant content: the one resource ([`README_URI`]) and the
//! one prompt (`greet`), cacheable for 2026 clients.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::server::{lock, Reply, Request, Shared};
use super::wire::{
    parse_obj, raw_str, Level, RpcError, EX_NONE, INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND,
};

pub(super) const README_URI: &str = "demo://readme";
const README_TEXT: &str = "mcp-bridge demo server\n\nThis resource exists so that bridges and \
clients have something to list and read. It never changes.\n";

impl Shared {
    /// Run a classified request's method.
    pub(super) async fn dispatch(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        let modern = req.is_modern();
        match req.method {
            "tools/call" => self.call_tool(req).await,
            "ping" => req.reply(&json!({}), req.ex()),
            "initialize" => self.initialize(req),
            "server/discover" => self.discover(req),
            "tools/list" => {
                let size = super::tools::TOOLS_PAGE.load(std::sync::atomic::Ordering::Relaxed);
                if size > 0 {
                    let page = super::tools::tools_page(req.params.cursor, size)
                        .map_err(|()| RpcError::invalid_params("invalid cursor"))?;
                    return req.reply(&page, req.ex_cached());
                }
                req.reject_cursor()?;
                req.reply(super::tools::tools_list(), req.ex_cached())
            }
            "resources/list" => resources_list(req),
            "resources/templates/list" => {
                req.reject_cursor()?;
                req.reply(&json!({ "resourceTemplates": [] }), req.ex_cached())
            }
            "resources/read" => resources_read(req),
            "prompts/list" => prompts_list(req),
            "prompts/get" => prompts_get(req),
            "completion/complete" => req.reply(
                &json!({ "completion": { "values": [], "hasMore": false } }),
                req.ex(),
            ),
            "logging/setLevel" if !modern => self.set_level(req),
            "resources/subscribe" | "resources/unsubscribe" if !modern => self.subscribe(req),
            "subscriptions/listen" if modern => self.listen(req),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// `logging/setLevel` (2025): the session-wide floor for `notifications/message`.
    fn set_level(&self, req: &Request<'_>) -> Reply {
        let level = req
            .params
            .level
            .ok_or_else(|| RpcError::invalid_params("missing level"))
            .and_then(Level::from_raw)?;
        lock(&self.legacy).log_level = Some(level);
        req.reply(&json!({}), EX_NONE)
    }

    /// `resources/subscribe` and `resources/unsubscribe` (2025): the session's subscriptions.
    fn subscribe(&self, req: &Request<'_>) -> Reply {
        let uri = req
            .params
            .uri
            .and_then(raw_str)
            .ok_or_else(|| RpcError::invalid_params("missing uri"))?;
        {
            let mut s = lock(&self.legacy);
            if req.method == "resources/subscribe" {
                s.subscriptions.insert(uri.into_owned());
            } else {
                s.subscriptions.remove(uri.as_ref());
            }
        }
        req.reply(&json!({}), EX_NONE)
    }
}

fn resources_list(req: &Request<'_>) -> Reply {
    req.reject_cursor()?;
    let result = json!({ "resources": [{
        "uri": README_URI,
        "name": "readme",
        "title": "Demo README",
        "description": "A small, constant text resource.",
        "mimeType": "text/plain",
    }]});
    req.reply(&result, req.ex_cached())
}

/// `resources/read`: the README; an unknown URI is `-32002` for 2025, `-32602` for 2026.
fn resources_read(req: &Request<'_>) -> Reply {
    let uri = req
        .params
        .uri
        .and_then(raw_str)
        .ok_or_else(|| RpcError::invalid_params("missing uri"))?;
    if uri != README_URI {
        let code = if req.is_modern() {
            INVALID_PARAMS
        } else {
            LEGACY_RESOURCE_NOT_FOUND
        };
        return Err(RpcError::new(code, "Resource not found").with_data(json!({ "uri": uri })));
    }
    let result = json!({ "contents": [{
        "uri": README_URI,
        "mimeType": "text/plain",
        "text": README_TEXT,
    }]});
    req.reply(&result, req.ex_cached())
}

fn prompts_list(req: &Request<'_>) -> Reply {
    req.reject_cursor()?;
    let result = json!({ "prompts": [{
        "name": "greet",
        "title": "Greeting",
        "description": "Greet someone by name.",
        "arguments": [{ "name": "name", "description": "Who to greet", "required": true }],
    }]});
    req.reply(&result, req.ex_cached())
}

/// `prompts/get` of `greet`: a one-message greeting for `arguments.name`.
fn prompts_get(req: &Request<'_>) -> Reply {
    let name = req
        .params
        .name
        .and_then(raw_str)
        .ok_or_else(|| RpcError::invalid_params("missing prompt name"))?;
    if name != "greet" {
        return Err(RpcError::invalid_params(format!("unknown prompt {name:?}")));
    }
    #[derive(Deserialize)]
    struct GreetArgs<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
    }
    let args: GreetArgs = parse_obj(req.params.arguments.map_or("{}", |a| a.get()))
        .map_err(|e| RpcError::invalid_params(format!("invalid prompt arguments: {e}")))?;
    let result = json!({
        "description": "A greeting",
        "messages": [{
            "role": "user",
            "content": { "type": "text", "text": format!("Hello, {}!", args.name) },
        }],
    });
    req.reply(&result, req.ex())
}
