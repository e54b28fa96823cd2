//! `tools/call` and the demo's tools, except those that need the client's input (`sample`,
//! `elicit`, `elicit_url`, `roots`: see [`super::input`]) or reach listens (`notify`: see
//! [`super::listen`]).
//!
//! The tools exist to exercise a bridge: plain answers (`echo`, `add`, `lookup`), tool and
//! JSON-RPC errors (`fail`, `error`), long cancellable calls with progress (`slow`), big
//! answers (`bytes`), a broken child (`crash`, `junk`) and logging (`log`). [`tools_list`] is
//! their declaration; [`Shared::call_tool`] their table, one small function per tool.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::input::InputKind;
use super::server::{lock, Reply, Request, Shared};
use super::wire::{
    id_key, notification_line, parse_obj, push_id, raw_str, result_line, Level, RpcError,
    ToolResult, INTERNAL_ERROR,
};

/// Largest `bytes` tool payload.
const MAX_BYTES: u64 = 64 << 20;
/// Largest `junk` oversize line.
const MAX_JUNK: u64 = 256 << 20;
/// Longest `slow` call.
const MAX_SLOW_SECONDS: f64 = 3600.0;
/// Most `slow` progress steps.
const MAX_SLOW_STEPS: u64 = 100_000;

/// A tool's raw `arguments` (an object, `{}` when absent), with the tool's name for errors.
#[derive(Clone, Copy)]
pub(super) struct Args<'a> {
    tool: &'a str,
    raw: &'a str,
}

impl<'a> Args<'a> {
    /// The arguments as the tool's own argument struct.
    pub(super) fn parse<T: Deserialize<'a>>(self) -> Result<T, RpcError> {
        parse_obj::<T>(self.raw).map_err(|e| {
            RpcError::invalid_params(format!("invalid arguments for {}: {e}", self.tool))
        })
    }
}

impl Shared {
    /// `tools/call`: look the tool up by name and run it.
    pub(super) async fn call_tool(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        let name = req
            .params
            .name
            .and_then(raw_str)
            .ok_or_else(|| RpcError::invalid_params("missing tool name"))?;
        let raw = match req.params.arguments {
            Some(a) if a.get() != "null" => a.get(),
            _ => "{}",
        };
        let args = Args { tool: &name, raw };
        match name.as_ref() {
            "echo" => echo(req, args),
            "add" => add(req, args),
            "slow" => self.slow(req, args),
            "fail" => fail(req, args),
            "bytes" => bytes(req, args),
            "error" => error(args),
            "sample" => self.sample(req, args),
            "elicit" => self.elicit(req, args),
            "elicit_url" => self.elicit_url(req, args),
            "roots" => self.input_tool(req, InputKind::Roots, json!({})),
            "lookup" => lookup(req, args),
            "whoami" => req.text(&format!("pid {}", std::process::id())),
            "crash" => crash(),
            "junk" => self.junk(req, args).await,
            "notify" => self.notify(req, args).await,
            "log" => self.log(req, args).await,
            other => Err(RpcError::invalid_params(format!("unknown tool {other:?}"))),
        }
    }

    /// `slow`: wait, with progress when asked, in a cancellable task of its own.
    fn slow(self: &Arc<Self>, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A {
            #[serde(default = "default_seconds")]
            seconds: f64,
            #[serde(default = "default_steps")]
            steps: u64,
        }
        fn default_seconds() -> f64 {
            5.0
        }
        fn default_steps() -> u64 {
            10
        }
        let a: A = args.parse()?;
        if !(0.0..=MAX_SLOW_SECONDS).contains(&a.seconds) {
            return Err(RpcError::invalid_params(format!(
                "seconds must be between 0 and {MAX_SLOW_SECONDS}"
            )));
        }
        if a.steps > MAX_SLOW_STEPS {
            return Err(RpcError::invalid_params(format!(
                "steps must be at most {MAX_SLOW_STEPS}"
            )));
        }
        let display = id_key(req.id).map(|(_, d)| d).unwrap_or_default();
        let fut = run_slow(
            Arc::clone(self),
            req.id.to_owned(),
            req.progress_token.map(ToOwned::to_owned),
            a.seconds,
            a.steps,
            req.ex(),
        );
        self.spawn_tracked(req.id, fut)?;
        eprintln!("demo: slow started id={display}");
        Ok(None)
    }

    /// `junk`: write one bad line (not JSON, over-long, or a response to no request), then
    /// answer normally.
    async fn junk(&self, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            kind: Cow<'a, str>,
            #[serde(default)]
            size: u64,
        }
        let a: A = args.parse()?;
        let bad = match a.kind.as_ref() {
            "malformed" => b"this is not json\n".to_vec(),
            "unknown_id" => b"{\"jsonrpc\":\"2.0\",\"id\":987654321,\"result\":{}}\n".to_vec(),
            "oversize" => {
                if a.size > MAX_JUNK {
                    return Err(RpcError::invalid_params(format!(
                        "size must be at most {MAX_JUNK}"
                    )));
                }
                oversize_line(a.size as usize)
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown junk kind {other:?} (malformed, oversize, unknown_id)"
                )))
            }
        };
        self.emit(bad).await;
        req.text("ok")
    }

    /// `log`: a `notifications/message` if the level passes the floor (2025: the session's,
    /// everything by default; 2026: the request's `_meta` logLevel, nothing without one).
    async fn log(&self, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            level: Cow<'a, str>,
            #[serde(borrow)]
            message: Cow<'a, str>,
        }
        let a: A = args.parse()?;
        let level = Level::parse(&a.level).ok_or_else(|| {
            RpcError::invalid_params(format!("invalid logging level {:?}", a.level))
        })?;
        let threshold = match &req.modern {
            Some(m) => m.log_level,
            None => Some(lock(&self.legacy).log_level.unwrap_or(Level::Debug)),
        };
        if threshold.is_some_and(|t| level >= t) {
            let params = json!({ "level": level.as_str(), "logger": "demo", "data": a.message });
            self.emit(notification_line("notifications/message", params))
                .await;
        }
        req.text("ok")
    }
}

fn echo(req: &Request<'_>, args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A<'a> {
        #[serde(borrow)]
        text: Cow<'a, str>,
    }
    let a: A = args.parse()?;
    req.text(&a.text)
}

/// `add`: exact for integers that do not overflow, floating point otherwise.
fn add(req: &Request<'_>, args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A {
        a: serde_json::Number,
        b: serde_json::Number,
    }
    let a: A = args.parse()?;
    let sum = match (a.a.as_i64(), a.b.as_i64()) {
        (Some(x), Some(y)) => x.checked_add(y).map(Value::from),
        _ => None,
    }
    .or_else(|| {
        let s = a.a.as_f64().unwrap_or(f64::NAN) + a.b.as_f64().unwrap_or(f64::NAN);
        serde_json::Number::from_f64(s).map(Value::Number)
    })
    .ok_or_else(|| RpcError::invalid_params("sum is not a finite number"))?;
    let text = sum.to_string();
    let result = ToolResult {
        structured: Some(json!({ "sum": sum })),
        ..ToolResult::text(&text)
    };
    req.reply(&result, req.ex())
}

fn fail(req: &Request<'_>, args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A<'a> {
        #[serde(borrow, default)]
        message: Option<Cow<'a, str>>,
    }
    let a: A = args.parse()?;
    let msg = a.message.unwrap_or(Cow::Borrowed("demo failure"));
    req.reply(&ToolResult::error(&msg), req.ex())
}

fn bytes(req: &Request<'_>, args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A {
        n: u64,
    }
    let a: A = args.parse()?;
    if a.n > MAX_BYTES {
        return Err(RpcError::invalid_params(format!(
            "n must be at most {MAX_BYTES}"
        )));
    }
    Ok(Some(bytes_line(req.id, a.n as usize, req.ex())))
}

/// `error`: a JSON-RPC error with the given code, message and data.
fn error(args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A<'a> {
        #[serde(default = "default_code")]
        code: i64,
        #[serde(borrow, default)]
        message: Option<Cow<'a, str>>,
        #[serde(default)]
        data: Option<Value>,
    }
    fn default_code() -> i64 {
        INTERNAL_ERROR
    }
    let a: A = args.parse()?;
    let message = a
        .message
        .map(Cow::into_owned)
        .unwrap_or_else(|| "demo error".to_owned());
    let mut e = RpcError::new(a.code, message);
    e.data = a.data;
    Err(e)
}

fn lookup(req: &Request<'_>, args: Args<'_>) -> Reply {
    #[derive(Deserialize)]
    struct A<'a> {
        #[serde(borrow)]
        region: Cow<'a, str>,
        id: i64,
    }
    let a: A = args.parse()?;
    req.text(&format!("region={} id={}", a.region, a.id))
}

/// `crash`: exit at once with status 3 (stdio back in blocking mode first).
fn crash() -> Reply {
    eprintln!("demo: crash requested, exiting with status 3");
    mcp_bridge::pipes::restore();
    std::process::exit(3);
}

/// `notifications/progress` params of a `slow` step.
#[derive(Serialize)]
struct ProgressParams<'a> {
    #[serde(rename = "progressToken")]
    progress_token: &'a RawValue,
    progress: u64,
    total: u64,
    message: String,
}

/// The body of a `slow` call: sleep in `steps` steps (progress after each when a token was
/// given), then the answer; `None` once the output is gone.
async fn run_slow(
    shared: Arc<Shared>,
    id: Box<RawValue>,
    token: Option<Box<RawValue>>,
    seconds: f64,
    steps: u64,
    extras: &'static str,
) -> Option<Vec<u8>> {
    if steps == 0 {
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    } else {
        let step = Duration::from_secs_f64(seconds / steps as f64);
        for i in 1..=steps {
            tokio::time::sleep(step).await;
            if let Some(token) = &token {
                let params = ProgressParams {
                    progress_token: token,
                    progress: i,
                    total: steps,
                    message: format!("step {i} of {steps}"),
                };
                if !shared
                    .emit(notification_line("notifications/progress", params))
                    .await
                {
                    return None;
                }
            }
        }
    }
    Some(result_line(&id, &ToolResult::text("done"), extras))
}

/// Response with one text block of `n` 'x' characters, built without an
/// intermediate string.
fn bytes_line(id: &RawValue, n: usize, extras: &str) -> Vec<u8> {
    const HEAD: &[u8] = b",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"";
    let mut buf = Vec::with_capacity(n + 256);
    push_id(&mut buf, Some(id));
    buf.extend_from_slice(HEAD);
    buf.resize(buf.len() + n, b'x');
    buf.extend_from_slice(b"\"}]");
    if !extras.is_empty() {
        buf.push(b',');
        buf.extend_from_slice(extras.as_bytes());
    }
    buf.extend_from_slice(b"}}\n");
    buf
}

/// A JSON-looking line of exactly `size` bytes (plus the newline).
fn oversize_line(size: usize) -> Vec<u8> {
    const HEAD: &[u8] = b"{\"junk\":\"";
    const TAIL: &[u8] = b"\"}";
    let mut buf = Vec::with_capacity(size + 1);
    if size >= HEAD.len() + TAIL.len() {
        buf.extend_from_slice(HEAD);
        buf.resize(size - TAIL.len(), b'x');
        buf.extend_from_slice(TAIL);
    } else {
        buf.resize(size, b'x');
    }
    buf.push(b'\n');
    buf
}

/// The `tools/list` result, built once.
/// Tools per `tools/list` page (0: every tool on one page).
pub(super) static TOOLS_PAGE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Page `cursor` (None: the first) of the tool list, `size` tools a page; Err: not a cursor
/// this server minted.
pub(super) fn tools_page(cursor: Option<&RawValue>, size: usize) -> Result<Value, ()> {
    let start = match cursor.map(RawValue::get) {
        None | Some("null") => 0,
        Some(c) => serde_json::from_str::<String>(c)
            .ok()
            .and_then(|c| c.strip_prefix("demo-page-")?.parse::<usize>().ok())
            .ok_or(())?,
    };
    let all: Value = serde_json::from_str(tools_list().get()).map_err(|_| ())?;
    let tools = all["tools"].as_array().cloned().unwrap_or_default();
    if start > tools.len() {
        return Err(());
    }
    let end = (start + size).min(tools.len());
    let mut out = json!({ "tools": tools[start..end] });
    if end < tools.len() {
        out["nextCursor"] = json!(format!("demo-page-{end}"));
    }
    Ok(out)
}

pub(super) fn tools_list() -> &'static RawValue {
    static TOOLS: OnceLock<Box<RawValue>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let tools: Vec<Value> = [
            answer_tools(),
            client_tools(),
            transport_tools(),
            server_tools(),
        ]
        .into_iter()
        .flatten()
        .collect();
        serde_json::value::to_raw_value(&json!({ "tools": tools })).unwrap_or_default()
    })
}

/// The input schema of a tool without arguments.
fn no_args() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

/// The tools that answer from their arguments alone: text, sums, waits with progress, tool
/// and JSON-RPC errors, sized results.
fn answer_tools() -> Vec<Value> {
    vec![
        json!({
            "name": "echo",
            "description": "Return the given text unchanged.",
            "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] },
            "annotations": { "readOnlyHint": true, "openWorldHint": false },
        }),
        json!({
            "name": "add",
            "description": "Add two numbers.",
            "inputSchema": { "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] },
            "outputSchema": { "type": "object", "properties": { "sum": { "type": "number" } }, "required": ["sum"] },
            "annotations": { "readOnlyHint": true, "openWorldHint": false },
        }),
        json!({
            "name": "slow",
            "description": "Wait `seconds`, sending progress in `steps` steps when a progressToken is given; cancellable.",
            "inputSchema": { "type": "object", "properties": {
                "seconds": { "type": "number", "default": 5, "minimum": 0, "maximum": MAX_SLOW_SECONDS },
                "steps": { "type": "integer", "default": 10, "minimum": 0, "maximum": MAX_SLOW_STEPS },
            } },
        }),
        json!({
            "name": "fail",
            "description": "Return a tool error (isError: true) with the given message.",
            "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } } },
        }),
        json!({
            "name": "bytes",
            "description": "Return one text block of exactly n 'x' characters.",
            "inputSchema": { "type": "object", "properties": { "n": { "type": "integer", "minimum": 0, "maximum": MAX_BYTES } }, "required": ["n"] },
        }),
        json!({
            "name": "error",
            "description": "Answer with a JSON-RPC error of the given code and message.",
            "inputSchema": { "type": "object", "properties": {
                "code": { "type": "integer", "default": INTERNAL_ERROR },
                "message": { "type": "string" },
                "data": {},
            } },
        }),
    ]
}

/// The tools that ask the client: sampling, elicitation (form and URL), roots.
fn client_tools() -> Vec<Value> {
    let no_args = no_args();
    vec![
        json!({
            "name": "sample",
            "description": "Ask the client's model (sampling) to answer the prompt.",
            "inputSchema": { "type": "object", "properties": { "prompt": { "type": "string" } }, "required": ["prompt"] },
        }),
        json!({
            "name": "elicit",
            "description": "Ask the user (elicitation, form mode) for a name.",
            "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } }, "required": ["message"] },
        }),
        json!({
            "name": "elicit_url",
            "description": "Ask the user to visit a URL (elicitation, URL mode; needs elicitation.url).",
            "inputSchema": { "type": "object", "properties": {
                "url": { "type": "string" },
                "message": { "type": "string" },
            }, "required": ["url"] },
        }),
        json!({
            "name": "roots",
            "description": "List the client's roots.",
            "inputSchema": no_args,
        }),
    ]
}

/// The tools that exercise the bridge's transport: `Mcp-Param-*` headers, a crash, a bad line
/// on stdout.
fn transport_tools() -> Vec<Value> {
    let no_args = no_args();
    vec![
        json!({
            "name": "lookup",
            "description": "Echo region and id; both are mirrored into Mcp-Param-* headers.",
            "inputSchema": { "type": "object", "properties": {
                "region": { "type": "string", "x-mcp-header": "Region" },
                "id": { "type": "integer", "x-mcp-header": "Item-Id" },
            }, "required": ["region", "id"] },
        }),
        json!({
            "name": "crash",
            "description": "Exit the server process immediately with status 3.",
            "inputSchema": no_args,
        }),
        json!({
            "name": "junk",
            "description": "Write one bad line to stdout, then answer \"ok\".",
            "inputSchema": { "type": "object", "properties": {
                "kind": { "type": "string", "enum": ["malformed", "oversize", "unknown_id"] },
                "size": { "type": "integer", "default": 0, "minimum": 0, "maximum": MAX_JUNK },
            }, "required": ["kind"] },
        }),
    ]
}

/// The tools that make the server speak on its own or about itself: list_changed and
/// resource updates, log messages, its process id.
fn server_tools() -> Vec<Value> {
    let no_args = no_args();
    let levels = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];
    vec![
        json!({
            "name": "notify",
            "description": "Emit a list_changed notification of the given kind, or (kind \"updated\") notifications/resources/updated for demo://readme to its subscribers.",
            "inputSchema": { "type": "object", "properties": {
                "kind": { "type": "string", "enum": ["tools", "resources", "prompts", "updated"] },
            }, "required": ["kind"] },
        }),
        json!({
            "name": "log",
            "description": "Emit notifications/message at the given level (subject to the log level).",
            "inputSchema": { "type": "object", "properties": {
                "level": { "type": "string", "enum": levels },
                "message": { "type": "string" },
            }, "required": ["level", "message"] },
        }),
        json!({
            "name": "whoami",
            "description": "Name the demo server's process id (which child of a pool answered).",
            "inputSchema": no_args,
            "annotations": { "readOnlyHint": true, "openWorldHint": false },
        }),
    ]
}
