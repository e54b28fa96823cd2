//! Built-in demo MCP server (`mcp-bridge demo-server`).
//!
//! This module owns a small, self-contained stdio MCP server used as the
//! bridge's test and benchmark child. It speaks both protocol eras:
//!
//! * **2025 (legacy)**: `initialize` handshake, server->client requests
//!   (`sampling/createMessage`, `elicitation/create` in form and URL mode,
//!   `roots/list`) sent on the output stream with server-minted ids
//!   (`"demo-N"`; URL elicitations carry an `elicitationId` and, once
//!   accepted, are followed by `notifications/elicitation/complete`),
//!   session-wide `logging/setLevel`, untagged list-changed notifications.
//! * **2026-07-28 (modern)**: stateless requests identified by
//!   `params._meta["io.modelcontextprotocol/protocolVersion"]`,
//!   `server/discover`, `resultType` / cache hints on results, multi
//!   round-trip (`input_required`) instead of server->client requests,
//!   request-scoped logging and `subscriptions/listen`.
//!
//! Wire format: one JSON-RPC message per line in each direction. The output
//! stream carries only MCP messages; human-readable logs go to stderr, each
//! line prefixed `demo: `. Requests are handled concurrently: quick ones
//! inline in the reader loop, long-running ones (`slow`, legacy
//! `sample`/`elicit`/`elicit_url`/`roots`) in their own tasks that `notifications/cancelled`
//! can stop. A single writer task owns the output and batches queued lines
//! into one flush.
//!
//! Nothing here panics on peer input: malformed lines get JSON-RPC errors.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::sync::{mpsc, oneshot};

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

/// Which protocol eras the demo server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// Both eras: modern `_meta` requests are served statelessly, everything
    /// else with 2025 semantics.
    #[default]
    Dual,
    /// A 2025-only server: no `server/discover`, modern `_meta` is ignored.
    Legacy,
    /// A 2026-only server: `initialize` and `_meta`-less requests are refused.
    Modern,
}

impl Era {
    /// The command-line spelling of this era.
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Dual => "dual",
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an unknown era name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseEraError(String);

impl fmt::Display for ParseEraError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown era {:?} (expected dual, legacy or modern)",
            self.0
        )
    }
}

impl std::error::Error for ParseEraError {}

impl FromStr for Era {
    type Err = ParseEraError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dual" => Ok(Era::Dual),
            "legacy" => Ok(Era::Legacy),
            "modern" => Ok(Era::Modern),
            other => Err(ParseEraError(other.to_owned())),
        }
    }
}

/// Blocking entry for the `demo-server` subcommand: builds a tokio
/// current-thread runtime and serves MCP on stdin/stdout until stdin closes.
///
/// When stdin/stdout are pipes (the normal case for a spawned child) they
/// are driven by the reactor directly instead of through tokio's
/// blocking-pool stdio, which cuts per-message latency by an order of
/// magnitude; blocking mode is restored on exit.
///
/// May be called from inside another tokio runtime: the server then runs on
/// a thread of its own (the caller's thread blocks until it returns).
pub fn main_with_era(era: Era) -> io::Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return std::thread::scope(|s| s.spawn(|| run_stdio(era)).join())
            .unwrap_or_else(|_| Err(io::Error::other("demo server thread panicked")));
    }
    run_stdio(era)
}

fn run_stdio(era: Era) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let (input, output) = stdio::open();
        let result = serve(input, output, era).await;
        stdio::restore();
        result
    });
    // A stdin read may still sit in the blocking pool; do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

/// Process stdin/stdout as async streams.
mod stdio {
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    pub(super) enum Input {
        #[cfg(unix)]
        Pipe(tokio::net::unix::pipe::Receiver),
        Std(tokio::io::Stdin),
    }

    pub(super) enum Output {
        #[cfg(unix)]
        Pipe(tokio::net::unix::pipe::Sender),
        Std(tokio::io::Stdout),
    }

    /// Reactor-driven pipes when both ends are pipes, tokio's stdio otherwise.
    /// Must be called inside the runtime.
    #[cfg(unix)]
    pub(super) fn open() -> (Input, Output) {
        use std::os::fd::AsFd;
        use tokio::net::unix::pipe;

        let pipes = io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .and_then(pipe::Receiver::from_owned_fd)
            .and_then(|rx| {
                let tx = io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .and_then(pipe::Sender::from_owned_fd);
                match tx {
                    Ok(tx) => Ok((rx, tx)),
                    Err(e) => {
                        // Undo O_NONBLOCK on stdin before falling back.
                        let _ = rx.into_blocking_fd();
                        Err(e)
                    }
                }
            });
        match pipes {
            Ok((rx, tx)) => (Input::Pipe(rx), Output::Pipe(tx)),
            Err(_) => (
                Input::Std(tokio::io::stdin()),
                Output::Std(tokio::io::stdout()),
            ),
        }
    }

    #[cfg(not(unix))]
    pub(super) fn open() -> (Input, Output) {
        (
            Input::Std(tokio::io::stdin()),
            Output::Std(tokio::io::stdout()),
        )
    }

    /// Put stdin/stdout back into blocking mode (O_NONBLOCK lives on the
    /// shared open file description, so it would outlive this process).
    #[cfg(unix)]
    pub(super) fn restore() {
        use std::os::fd::AsFd;
        use tokio::net::unix::pipe;

        if let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() {
            if let Ok(rx) = pipe::Receiver::from_owned_fd_unchecked(fd) {
                let _ = rx.into_blocking_fd();
            }
        }
        if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
            if let Ok(tx) = pipe::Sender::from_owned_fd_unchecked(fd) {
                let _ = tx.into_blocking_fd();
            }
        }
    }

    #[cfg(not(unix))]
    pub(super) fn restore() {}

    impl AsyncRead for Input {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            match self.get_mut() {
                #[cfg(unix)]
                Input::Pipe(p) => Pin::new(p).poll_read(cx, buf),
                Input::Std(s) => Pin::new(s).poll_read(cx, buf),
            }
        }
    }

    impl AsyncWrite for Output {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            match self.get_mut() {
                #[cfg(unix)]
                Output::Pipe(p) => Pin::new(p).poll_write(cx, buf),
                Output::Std(s) => Pin::new(s).poll_write(cx, buf),
            }
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match self.get_mut() {
                #[cfg(unix)]
                Output::Pipe(p) => Pin::new(p).poll_flush(cx),
                Output::Std(s) => Pin::new(s).poll_flush(cx),
            }
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match self.get_mut() {
                #[cfg(unix)]
                Output::Pipe(p) => Pin::new(p).poll_shutdown(cx),
                Output::Std(s) => Pin::new(s).poll_shutdown(cx),
            }
        }
    }
}

/// Serve MCP over the given byte streams until input EOF (then return Ok).
///
/// Returns an error if reading the input fails or the output stream breaks.
/// At EOF, requests still in flight are abandoned (no further output for
/// them); everything already queued is flushed before returning.
pub async fn serve<R, W>(input: R, output: W, era: Era) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
    let writer = tokio::spawn(write_loop(output, rx));
    let shared = Arc::new(Shared::new(era, tx));
    eprintln!("demo: serving MCP on stdio (era={era})");

    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::with_capacity(4096);
    let mut read_result = Ok(());
    loop {
        line.clear();
        let alive = match read_line(&mut reader, &mut line, MAX_LINE).await {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::Line) => shared.handle_line(&line).await,
            Ok(LineRead::TooLong) => {
                eprintln!("demo: input line longer than {MAX_LINE} bytes discarded");
                shared
                    .emit(error_line(
                        None,
                        PARSE_ERROR,
                        "Parse error: line too long",
                        None,
                    ))
                    .await
            }
            Err(e) => {
                read_result = Err(e);
                break;
            }
        };
        if !alive {
            break;
        }
        if line.capacity() > 1 << 20 {
            line = Vec::with_capacity(4096);
        }
    }

    let abandoned = shared.shutdown();
    if abandoned > 0 {
        eprintln!("demo: input closed, abandoning {abandoned} in-flight request(s)");
    } else {
        eprintln!("demo: input closed");
    }
    drop(shared);
    let write_result = match writer.await {
        Ok(r) => r,
        Err(e) => Err(io::Error::other(format!("writer task failed: {e}"))),
    };
    read_result.and(write_result)
}

// ---------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------

const MODERN_VERSION: &str = "2026-07-28";
const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
const LATEST_LEGACY: &str = "2025-11-25";
const SERVER_NAME: &str = "mcp-bridge-demo";
const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
const INSTRUCTIONS: &str = "Demo server bundled with mcp-bridge. Tools: echo, add, slow, fail, \
bytes, error, sample, elicit, roots, lookup, crash, junk, notify, log. Resource: demo://readme. \
Prompt: greet.";
const README_URI: &str = "demo://readme";
const README_TEXT: &str = "mcp-bridge demo server\n\nThis resource exists so that bridges and \
clients have something to list and read. It never changes.\n";

const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Longest accepted input line (bytes, without the newline).
const MAX_LINE: usize = 256 << 20;
/// Largest `bytes` tool payload.
const MAX_BYTES: u64 = 64 << 20;
/// Largest `junk` oversize line.
const MAX_JUNK: u64 = 256 << 20;
/// Longest `slow` call.
const MAX_SLOW_SECONDS: f64 = 3600.0;
/// Most `slow` progress steps.
const MAX_SLOW_STEPS: u64 = 100_000;
/// Output queue depth (lines).
const OUT_QUEUE: usize = 1024;
/// How long a legacy server->client request may stay unanswered.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(120);

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
const MISSING_CLIENT_CAPABILITY: i64 = -32021;
const UNSUPPORTED_VERSION: i64 = -32022;

macro_rules! server_info_meta {
    () => {
        concat!(
            "\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"mcp-bridge-demo\",\"version\":\"",
            env!("CARGO_PKG_VERSION"),
            "\"}}"
        )
    };
}

/// Members appended to results, spliced in as raw JSON.
/// Legacy results get nothing.
const EX_NONE: &str = "";
/// Modern interim results (already carry their own `resultType`).
const EX_META: &str = server_info_meta!();
/// Modern final results.
const EX_COMPLETE: &str = concat!("\"resultType\":\"complete\",", server_info_meta!());
/// Modern final results that must carry cache hints.
const EX_CACHED: &str = concat!(
    "\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"public\",",
    server_info_meta!()
);

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct RpcError {
    code: i64,
    message: Cow<'static, str>,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, "Method not found").with_data(json!({ "method": method }))
    }

    fn unsupported_version(requested: &str) -> Self {
        Self::new(
            UNSUPPORTED_VERSION,
            format!(
                "Unsupported protocol version {requested:?}; this server supports {MODERN_VERSION}"
            ),
        )
        .with_data(json!({ "supported": [MODERN_VERSION], "requested": requested }))
    }
}

// ---------------------------------------------------------------------------
// Incoming message shapes (borrowed from the input line)
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "raw_present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// Keeps an explicit `null` as `Some("null")` so it can be told from absence.
fn raw_present<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: Deserializer<'de>,
{
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Union of the params members any method here looks at; each is decoded
/// lazily so that a surprising type in an unrelated member does not matter.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Params<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    uri: Option<&'a RawValue>,
    #[serde(rename = "protocolVersion", borrow)]
    protocol_version: Option<&'a RawValue>,
    #[serde(borrow)]
    capabilities: Option<&'a RawValue>,
    #[serde(borrow)]
    level: Option<&'a RawValue>,
    #[serde(rename = "requestId", borrow)]
    request_id: Option<&'a RawValue>,
    #[serde(borrow)]
    reason: Option<&'a RawValue>,
    #[serde(rename = "inputResponses", borrow)]
    input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow)]
    request_state: Option<&'a RawValue>,
    #[serde(borrow)]
    cursor: Option<&'a RawValue>,
    #[serde(borrow)]
    notifications: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Meta<'a> {
    #[serde(rename = "progressToken", borrow)]
    progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    protocol_version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
    client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow)]
    log_level: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

/// Decode a raw JSON string without copying when it has no escapes.
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Str>(raw.get()).ok().map(|s| s.0)
}

/// Parse a JSON object into `T`. Refuses non-objects up front (derived
/// structs would otherwise also accept arrays positionally).
fn parse_obj<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, String> {
    if !raw.trim_start().starts_with('{') {
        return Err("expected a JSON object".to_owned());
    }
    serde_json::from_str(raw).map_err(|e| e.to_string())
}

fn is_object(raw: &RawValue) -> bool {
    raw.get().trim_start().starts_with('{')
}

/// Ids must be strings or numbers.
fn id_is_valid(raw: &RawValue) -> bool {
    matches!(
        raw.get().as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9')
    )
}

/// Normalised request id, for the in-flight table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IdKey {
    Num(String),
    Str(String),
}

/// Key plus compact-JSON display form of a request id.
fn id_key(raw: &RawValue) -> Option<(IdKey, String)> {
    match serde_json::from_str::<Value>(raw.get()).ok()? {
        Value::Number(n) => {
            let s = n.to_string();
            Some((IdKey::Num(s.clone()), s))
        }
        Value::String(s) => {
            let display = serde_json::to_string(&s).ok()?;
            Some((IdKey::Str(s), display))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Logging levels
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "debug" => Level::Debug,
            "info" => Level::Info,
            "notice" => Level::Notice,
            "warning" => Level::Warning,
            "error" => Level::Error,
            "critical" => Level::Critical,
            "alert" => Level::Alert,
            "emergency" => Level::Emergency,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Critical => "critical",
            Level::Alert => "alert",
            Level::Emergency => "emergency",
        }
    }

    fn from_raw(raw: &RawValue) -> Result<Level, RpcError> {
        raw_str(raw)
            .and_then(|s| Level::parse(&s))
            .ok_or_else(|| RpcError::invalid_params(format!("invalid logging level {}", raw.get())))
    }
}

// ---------------------------------------------------------------------------
// Outgoing lines
// ---------------------------------------------------------------------------

fn push_id(buf: &mut Vec<u8>, id: Option<&RawValue>) {
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    buf.extend_from_slice(id.map_or("null", |r| r.get()).as_bytes());
}

/// A complete response line. `extras` are raw JSON members spliced into the
/// (object) result.
fn result_line<T: Serialize + ?Sized>(id: &RawValue, result: &T, extras: &str) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    push_id(&mut buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    let start = buf.len();
    if serde_json::to_writer(&mut buf, result).is_err() {
        return error_line(Some(id), INTERNAL_ERROR, "failed to encode result", None);
    }
    splice_extras(&mut buf, start, extras);
    buf.extend_from_slice(b"}\n");
    buf
}

fn splice_extras(buf: &mut Vec<u8>, start: usize, extras: &str) {
    if extras.is_empty() || buf.last() != Some(&b'}') {
        return;
    }
    buf.pop();
    if buf.len() > start + 1 {
        buf.push(b',');
    }
    buf.extend_from_slice(extras.as_bytes());
    buf.push(b'}');
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

fn error_line(id: Option<&RawValue>, code: i64, message: &str, data: Option<&Value>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(96);
    push_id(&mut buf, id);
    buf.extend_from_slice(b",\"error\":");
    let body = ErrorBody {
        code,
        message,
        data,
    };
    if serde_json::to_writer(&mut buf, &body).is_err() {
        buf.truncate(0);
        push_id(&mut buf, id);
        buf.extend_from_slice(b",\"error\":{\"code\":-32603,\"message\":\"Internal error\"}");
    }
    buf.extend_from_slice(b"}\n");
    buf
}

fn rpc_error_line(id: Option<&RawValue>, e: &RpcError) -> Vec<u8> {
    error_line(id, e.code, &e.message, e.data.as_ref())
}

#[derive(Serialize)]
struct Notification<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    params: P,
}

fn notification_line<P: Serialize>(method: &str, params: P) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    let n = Notification {
        jsonrpc: "2.0",
        method,
        params,
    };
    if serde_json::to_writer(&mut buf, &n).is_err() {
        buf.clear();
        buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
        let _ = serde_json::to_writer(&mut buf, method);
        buf.push(b'}');
    }
    buf.push(b'\n');
    buf
}

#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct ToolResult<'a> {
    content: [TextBlock<'a>; 1],
    #[serde(rename = "structuredContent", skip_serializing_if = "Option::is_none")]
    structured: Option<Value>,
    #[serde(rename = "isError", skip_serializing_if = "std::ops::Not::not")]
    is_error: bool,
}

impl<'a> ToolResult<'a> {
    fn text(text: &'a str) -> Self {
        ToolResult {
            content: [TextBlock { kind: "text", text }],
            structured: None,
            is_error: false,
        }
    }

    fn error(text: &'a str) -> Self {
        ToolResult {
            is_error: true,
            ..Self::text(text)
        }
    }
}

#[derive(Serialize)]
struct ProgressParams<'a> {
    #[serde(rename = "progressToken")]
    progress_token: &'a RawValue,
    progress: u64,
    total: u64,
    message: String,
}

#[derive(Serialize)]
struct ServerRequest<'a> {
    jsonrpc: &'static str,
    id: &'a str,
    method: &'a str,
    params: &'a Value,
}

// ---------------------------------------------------------------------------
// Input reading
// ---------------------------------------------------------------------------

enum LineRead {
    Eof,
    Line,
    TooLong,
}

/// Read one newline-terminated line (newline and trailing `\r` stripped)
/// into `buf`, refusing to buffer more than `cap` bytes.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<LineRead> {
    let mut too_long = false;
    let mut seen_any = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(if !seen_any {
                LineRead::Eof
            } else if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
        seen_any = true;
        let (chunk, used, done) = match memchr::memchr(b'\n', avail) {
            Some(i) => (&avail[..i], i + 1, true),
            None => (avail, avail.len(), false),
        };
        if !too_long {
            if buf.len() + chunk.len() > cap {
                too_long = true;
                *buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        r.consume(used);
        if done {
            if too_long {
                return Ok(LineRead::TooLong);
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

// ---------------------------------------------------------------------------
// Output writing
// ---------------------------------------------------------------------------

/// Writes every queued line, then flushes once per batch.
async fn write_loop<W: AsyncWrite + Unpin>(
    output: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(64 * 1024, output);
    while let Some(first) = rx.recv().await {
        let mut result = w.write_all(&first).await;
        while result.is_ok() {
            match rx.try_recv() {
                Ok(next) => result = w.write_all(&next).await,
                Err(_) => break,
            }
        }
        if let Err(e) = result.and(w.flush().await) {
            eprintln!("demo: output write failed: {e}");
            return Err(e);
        }
    }
    let _ = w.shutdown().await;
    Ok(())
}

// ---------------------------------------------------------------------------
// Server state
// ---------------------------------------------------------------------------

struct LegacySession {
    initialized: bool,
    version: String,
    client_caps: Value,
    log_level: Option<Level>,
    /// Resources the client subscribed to (`resources/subscribe`).
    subscriptions: std::collections::BTreeSet<String>,
}

struct InFlight {
    cancel: oneshot::Sender<()>,
    display: String,
}

#[derive(Debug, Default, Clone, Copy)]
struct ListenFilter {
    tools: bool,
    prompts: bool,
    resources: bool,
}

struct Listen {
    id: Box<RawValue>,
    filter: ListenFilter,
    /// Honoured `resourceSubscriptions`.
    uris: Vec<String>,
}

enum ClientReply {
    Result(Value),
    Error { code: i64, message: String },
}

struct Shared {
    era: Era,
    out: mpsc::Sender<Vec<u8>>,
    legacy: Mutex<LegacySession>,
    inflight: Mutex<HashMap<IdKey, InFlight>>,
    listens: Mutex<HashMap<IdKey, Listen>>,
    pending: Mutex<HashMap<String, oneshot::Sender<ClientReply>>>,
    next_server_id: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Per-request context of a modern (2026-07-28) request.
struct Modern<'a> {
    caps: &'a RawValue,
    log_level: Option<Level>,
}

struct Request<'a> {
    id: &'a RawValue,
    method: &'a str,
    params: Params<'a>,
    progress_token: Option<&'a RawValue>,
    modern: Option<Modern<'a>>,
}

impl Request<'_> {
    fn is_modern(&self) -> bool {
        self.modern.is_some()
    }

    /// Extras for an ordinary final result.
    fn ex(&self) -> &'static str {
        if self.is_modern() {
            EX_COMPLETE
        } else {
            EX_NONE
        }
    }

    /// Extras for a cacheable final result.
    fn ex_cached(&self) -> &'static str {
        if self.is_modern() {
            EX_CACHED
        } else {
            EX_NONE
        }
    }

    fn reply<T: Serialize + ?Sized>(&self, result: &T, extras: &str) -> Reply {
        Ok(Some(result_line(self.id, result, extras)))
    }

    fn text(&self, text: &str) -> Reply {
        self.reply(&ToolResult::text(text), self.ex())
    }

    fn reject_cursor(&self) -> Result<(), RpcError> {
        match self.params.cursor {
            Some(c) if c.get() != "null" => Err(RpcError::invalid_params("invalid cursor")),
            _ => Ok(()),
        }
    }
}

/// `Ok(Some(line))`: answer now; `Ok(None)`: answered elsewhere (or never).
type Reply = Result<Option<Vec<u8>>, RpcError>;

fn server_capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "prompts": { "listChanged": true },
        "logging": {}
    })
}

impl Shared {
    fn new(era: Era, out: mpsc::Sender<Vec<u8>>) -> Self {
        Shared {
            era,
            out,
            legacy: Mutex::new(LegacySession {
                initialized: false,
                version: LATEST_LEGACY.to_owned(),
                client_caps: Value::Null,
                log_level: None,
                subscriptions: std::collections::BTreeSet::new(),
            }),
            inflight: Mutex::new(HashMap::new()),
            listens: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_server_id: AtomicU64::new(1),
        }
    }

    /// Queue one line for output; false if the output is gone.
    async fn emit(&self, line: Vec<u8>) -> bool {
        self.out.send(line).await.is_ok()
    }

    /// Stop everything in flight (input is closed). Returns how many
    /// requests were abandoned.
    fn shutdown(&self) -> usize {
        let n = lock(&self.inflight).drain().count();
        lock(&self.pending).clear();
        lock(&self.listens).clear();
        n
    }

    /// Handle one input line. Returns false once the output is gone.
    async fn handle_line(self: &Arc<Self>, line: &[u8]) -> bool {
        let line = line.trim_ascii();
        if line.is_empty() {
            return true;
        }
        if line[0] != b'{' {
            if serde_json::from_slice::<IgnoredAny>(line).is_ok() {
                eprintln!("demo: ignoring a JSON message that is not an object");
                return true;
            }
            return self
                .emit(error_line(None, PARSE_ERROR, "Parse error", None))
                .await;
        }
        let env: Envelope = match serde_json::from_slice(line) {
            Ok(env) => env,
            Err(e) => {
                let (code, message) = if e.is_data() {
                    (INVALID_REQUEST, "Invalid Request")
                } else {
                    (PARSE_ERROR, "Parse error")
                };
                eprintln!("demo: bad input line: {e}");
                return self.emit(error_line(None, code, message, None)).await;
            }
        };
        match (env.method, env.id) {
            (Some(method), Some(id)) => {
                if !id_is_valid(id) {
                    return self
                        .emit(error_line(
                            None,
                            INVALID_REQUEST,
                            "Invalid Request: id must be a string or an integer",
                            None,
                        ))
                        .await;
                }
                let line = match self.handle_request(id, &method, env.params).await {
                    Ok(Some(line)) => line,
                    Ok(None) => return true,
                    Err(e) => rpc_error_line(Some(id), &e),
                };
                self.emit(line).await
            }
            (Some(method), None) => {
                self.handle_notification(&method, env.params);
                true
            }
            (None, Some(id)) if env.result.is_some() || env.error.is_some() => {
                self.handle_response(id, env.result, env.error);
                true
            }
            (None, id) => {
                let id = id.filter(|id| id_is_valid(id));
                self.emit(error_line(
                    id,
                    INVALID_REQUEST,
                    "Invalid Request: no method",
                    None,
                ))
                .await
            }
        }
    }

    // -- responses from the client to our own (legacy) requests -------------

    fn handle_response(&self, id: &RawValue, result: Option<&RawValue>, error: Option<&RawValue>) {
        let sender = raw_str(id).and_then(|sid| lock(&self.pending).remove(sid.as_ref()));
        let Some(sender) = sender else {
            eprintln!("demo: ignoring response for unknown id {}", id.get());
            return;
        };
        let reply = match (result, error) {
            (_, Some(err)) => {
                #[derive(Deserialize, Default)]
                #[serde(default)]
                struct ErrObj {
                    code: i64,
                    message: String,
                }
                let e: ErrObj = parse_obj(err.get()).unwrap_or_default();
                ClientReply::Error {
                    code: e.code,
                    message: e.message,
                }
            }
            (Some(res), None) => match serde_json::from_str::<Value>(res.get()) {
                Ok(v) => ClientReply::Result(v),
                Err(_) => ClientReply::Error {
                    code: INVALID_REQUEST,
                    message: "unreadable result".to_owned(),
                },
            },
            (None, None) => return,
        };
        let _ = sender.send(reply);
    }

    // -- notifications -----------------------------------------------------

    fn handle_notification(&self, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/cancelled" => {
                let Some(params) = params.and_then(|p| parse_obj::<Params>(p.get()).ok()) else {
                    eprintln!("demo: ignoring notifications/cancelled with bad params");
                    return;
                };
                let Some((key, _)) = params.request_id.and_then(id_key) else {
                    eprintln!("demo: ignoring notifications/cancelled without a usable requestId");
                    return;
                };
                let reason = params
                    .reason
                    .and_then(raw_str)
                    .map(|r| r.replace(['\n', '\r'], " "))
                    .unwrap_or_default();
                let entry = lock(&self.inflight).remove(&key);
                if let Some(entry) = entry {
                    let _ = entry.cancel.send(());
                    eprintln!("demo: cancelled id={} reason={}", entry.display, reason);
                    return;
                }
                let listen = lock(&self.listens).remove(&key);
                if let Some(listen) = listen {
                    eprintln!(
                        "demo: listen ended id={} reason={}",
                        listen.id.get(),
                        reason
                    );
                }
            }
            "notifications/initialized" => {
                lock(&self.legacy).initialized = true;
            }
            _ => {}
        }
    }

    // -- requests ------------------------------------------------------------

    async fn handle_request<'a>(
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

        let modern = if method == "initialize" {
            if self.era == Era::Modern {
                let requested = params
                    .protocol_version
                    .and_then(raw_str)
                    .map(Cow::into_owned)
                    .unwrap_or_default();
                return Err(RpcError::unsupported_version(&requested));
            }
            None
        } else if let (Some(v), false) = (meta.protocol_version, self.era == Era::Legacy) {
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
            Some(Modern { caps, log_level })
        } else {
            if self.era == Era::Modern && method != "server/discover" {
                return Err(RpcError::invalid_params(format!(
                    "missing _meta {META_PROTOCOL_VERSION}: this server only speaks {MODERN_VERSION}"
                )));
            }
            None
        };

        let req = Request {
            id,
            method,
            params,
            progress_token: meta.progress_token,
            modern,
        };
        self.dispatch(&req).await
    }

    async fn dispatch(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        let modern = req.is_modern();
        match req.method {
            "tools/call" => self.call_tool(req).await,
            "ping" => req.reply(&json!({}), req.ex()),
            "initialize" => self.initialize(req),
            "server/discover" => {
                if self.era == Era::Legacy {
                    return Err(RpcError::method_not_found(req.method));
                }
                let result = json!({
                    "supportedVersions": [MODERN_VERSION],
                    "capabilities": server_capabilities(),
                    "instructions": INSTRUCTIONS,
                });
                req.reply(&result, EX_CACHED)
            }
            "tools/list" => {
                req.reject_cursor()?;
                req.reply(tools_list(), req.ex_cached())
            }
            "resources/list" => {
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
            "resources/templates/list" => {
                req.reject_cursor()?;
                req.reply(&json!({ "resourceTemplates": [] }), req.ex_cached())
            }
            "resources/read" => {
                let uri = req
                    .params
                    .uri
                    .and_then(raw_str)
                    .ok_or_else(|| RpcError::invalid_params("missing uri"))?;
                if uri != README_URI {
                    let code = if modern {
                        INVALID_PARAMS
                    } else {
                        LEGACY_RESOURCE_NOT_FOUND
                    };
                    return Err(
                        RpcError::new(code, "Resource not found").with_data(json!({ "uri": uri }))
                    );
                }
                let result = json!({ "contents": [{
                    "uri": README_URI,
                    "mimeType": "text/plain",
                    "text": README_TEXT,
                }]});
                req.reply(&result, req.ex_cached())
            }
            "prompts/list" => {
                req.reject_cursor()?;
                let result = json!({ "prompts": [{
                    "name": "greet",
                    "title": "Greeting",
                    "description": "Greet someone by name.",
                    "arguments": [{ "name": "name", "description": "Who to greet", "required": true }],
                }]});
                req.reply(&result, req.ex_cached())
            }
            "prompts/get" => {
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
                    .map_err(|e| {
                        RpcError::invalid_params(format!("invalid prompt arguments: {e}"))
                    })?;
                let result = json!({
                    "description": "A greeting",
                    "messages": [{
                        "role": "user",
                        "content": { "type": "text", "text": format!("Hello, {}!", args.name) },
                    }],
                });
                req.reply(&result, req.ex())
            }
            "completion/complete" => req.reply(
                &json!({ "completion": { "values": [], "hasMore": false } }),
                req.ex(),
            ),
            "logging/setLevel" if !modern => {
                let level = req
                    .params
                    .level
                    .ok_or_else(|| RpcError::invalid_params("missing level"))
                    .and_then(Level::from_raw)?;
                lock(&self.legacy).log_level = Some(level);
                req.reply(&json!({}), EX_NONE)
            }
            "resources/subscribe" | "resources/unsubscribe" if !modern => {
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
            "subscriptions/listen" if modern => self.listen(req),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    fn initialize(&self, req: &Request<'_>) -> Reply {
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

    fn listen(&self, req: &Request<'_>) -> Reply {
        #[derive(Deserialize, Default)]
        #[serde(default, rename_all = "camelCase")]
        struct Filter {
            tools_list_changed: bool,
            prompts_list_changed: bool,
            resources_list_changed: bool,
            resource_subscriptions: Vec<String>,
        }
        let filter: Filter = match req.params.notifications {
            Some(n) => parse_obj(n.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid notifications: {e}")))?,
            None => Filter::default(),
        };
        let (key, _) = id_key(req.id)
            .ok_or_else(|| RpcError::new(INVALID_REQUEST, "Invalid Request: bad id"))?;
        if lock(&self.inflight).contains_key(&key) {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "duplicate in-flight request id",
            ));
        }
        let honoured_uris: Vec<&String> = filter
            .resource_subscriptions
            .iter()
            .filter(|u| u.as_str() == README_URI)
            .collect();
        let mut honoured = serde_json::Map::new();
        for (name, on) in [
            ("toolsListChanged", filter.tools_list_changed),
            ("promptsListChanged", filter.prompts_list_changed),
            ("resourcesListChanged", filter.resources_list_changed),
        ] {
            if on {
                honoured.insert(name.to_owned(), Value::Bool(true));
            }
        }
        if !honoured_uris.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), json!(honoured_uris));
        }
        let sub_id: Value = serde_json::from_str(req.id.get()).unwrap_or(Value::Null);
        let ack = notification_line(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": honoured, "_meta": { META_SUBSCRIPTION_ID: sub_id } }),
        );
        {
            let mut listens = lock(&self.listens);
            if listens.contains_key(&key) {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "duplicate in-flight request id",
                ));
            }
            listens.insert(
                key,
                Listen {
                    id: req.id.to_owned(),
                    filter: ListenFilter {
                        tools: filter.tools_list_changed,
                        prompts: filter.prompts_list_changed,
                        resources: filter.resources_list_changed,
                    },
                    uris: honoured_uris.iter().map(|u| u.to_string()).collect(),
                },
            );
        }
        eprintln!("demo: listen started id={}", req.id.get());
        Ok(Some(ack))
    }

    /// Run `fut` as a cancellable task registered under the request's id.
    /// Its output line (if any) is sent unless the request was cancelled.
    fn spawn_tracked<F>(self: &Arc<Self>, id: &RawValue, fut: F) -> Result<(), RpcError>
    where
        F: Future<Output = Option<Vec<u8>>> + Send + 'static,
    {
        let (key, display) =
            id_key(id).ok_or_else(|| RpcError::new(INVALID_REQUEST, "Invalid Request: bad id"))?;
        let (cancel_tx, cancel_rx) = oneshot::channel();
        {
            let mut map = lock(&self.inflight);
            if map.contains_key(&key) || lock(&self.listens).contains_key(&key) {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "duplicate in-flight request id",
                ));
            }
            map.insert(
                key.clone(),
                InFlight {
                    cancel: cancel_tx,
                    display,
                },
            );
        }
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let line = tokio::select! {
                biased;
                _ = cancel_rx => return,
                line = fut => line,
            };
            // Whoever removes the entry first wins: a cancel that got there
            // first means nothing more may be sent for this request.
            if lock(&shared.inflight).remove(&key).is_none() {
                return;
            }
            if let Some(line) = line {
                let _ = shared.out.send(line).await;
            }
        });
        Ok(())
    }

    /// Send a server->client request (legacy era) and wait for the reply.
    async fn ask_client(&self, method: &str, params: Value) -> Result<Value, String> {
        let n = self.next_server_id.fetch_add(1, Ordering::Relaxed);
        let sid = format!("demo-{n}");
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(sid.clone(), tx);
        // Unregisters the request when the call ends in any way; if it is
        // still unanswered then (cancelled or timed out), tell the client.
        struct Unregister<'a> {
            shared: &'a Shared,
            sid: &'a str,
            sent: bool,
        }
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                let unanswered = lock(&self.shared.pending).remove(self.sid).is_some();
                if unanswered && self.sent {
                    let params = json!({ "requestId": self.sid, "reason": "demo tool call ended" });
                    let _ = self
                        .shared
                        .out
                        .try_send(notification_line("notifications/cancelled", params));
                }
            }
        }
        let mut guard = Unregister {
            shared: self,
            sid: &sid,
            sent: false,
        };
        let mut line = Vec::with_capacity(128);
        let request = ServerRequest {
            jsonrpc: "2.0",
            id: &sid,
            method,
            params: &params,
        };
        serde_json::to_writer(&mut line, &request).map_err(|e| e.to_string())?;
        line.push(b'\n');
        if !self.emit(line).await {
            return Err("output closed".to_owned());
        }
        guard.sent = true;
        match tokio::time::timeout(CLIENT_REPLY_TIMEOUT, rx).await {
            Err(_) => Err(format!(
                "no reply to {method} within {CLIENT_REPLY_TIMEOUT:?}"
            )),
            Ok(Err(_)) => Err("connection closed".to_owned()),
            Ok(Ok(ClientReply::Result(v))) => Ok(v),
            Ok(Ok(ClientReply::Error { code, message })) => {
                Err(format!("client returned error {code}: {message}"))
            }
        }
    }

    // -- tools -----------------------------------------------------------------

    async fn call_tool(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        let name = req
            .params
            .name
            .and_then(raw_str)
            .ok_or_else(|| RpcError::invalid_params("missing tool name"))?;
        let args_raw = match req.params.arguments {
            Some(a) if a.get() != "null" => a.get(),
            _ => "{}",
        };
        macro_rules! args {
            ($t:ty) => {
                parse_obj::<$t>(args_raw).map_err(|e| {
                    RpcError::invalid_params(format!("invalid arguments for {name}: {e}"))
                })?
            };
        }
        match name.as_ref() {
            "echo" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    text: Cow<'a, str>,
                }
                let a = args!(A);
                req.text(&a.text)
            }
            "add" => {
                #[derive(Deserialize)]
                struct A {
                    a: serde_json::Number,
                    b: serde_json::Number,
                }
                let a = args!(A);
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
            "slow" => {
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
                let a = args!(A);
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
            "fail" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow, default)]
                    message: Option<Cow<'a, str>>,
                }
                let a = args!(A);
                let msg = a.message.unwrap_or(Cow::Borrowed("demo failure"));
                req.reply(&ToolResult::error(&msg), req.ex())
            }
            "bytes" => {
                #[derive(Deserialize)]
                struct A {
                    n: u64,
                }
                let a = args!(A);
                if a.n > MAX_BYTES {
                    return Err(RpcError::invalid_params(format!(
                        "n must be at most {MAX_BYTES}"
                    )));
                }
                Ok(Some(bytes_line(req.id, a.n as usize, req.ex())))
            }
            "error" => {
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
                let a = args!(A);
                let message = a
                    .message
                    .map(Cow::into_owned)
                    .unwrap_or_else(|| "demo error".to_owned());
                let mut e = RpcError::new(a.code, message);
                e.data = a.data;
                Err(e)
            }
            "sample" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    prompt: Cow<'a, str>,
                }
                let a = args!(A);
                let params = json!({
                    "messages": [{ "role": "user", "content": { "type": "text", "text": a.prompt } }],
                    "maxTokens": 100,
                });
                self.input_tool(req, InputKind::Sampling, params)
            }
            "elicit" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    message: Cow<'a, str>,
                }
                let a = args!(A);
                let mut params = json!({
                    "message": a.message,
                    "requestedSchema": {
                        "type": "object",
                        "properties": { "name": { "type": "string" } },
                        "required": ["name"],
                    },
                });
                let with_mode =
                    req.is_modern() || lock(&self.legacy).version.as_str() >= "2025-11-25";
                if let (true, Some(obj)) = (with_mode, params.as_object_mut()) {
                    obj.insert("mode".to_owned(), json!("form"));
                }
                self.input_tool(req, InputKind::Elicitation, params)
            }
            "elicit_url" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    url: Cow<'a, str>,
                    #[serde(borrow, default)]
                    message: Option<Cow<'a, str>>,
                }
                let a = args!(A);
                let message = a
                    .message
                    .map(Cow::into_owned)
                    .unwrap_or_else(|| "Please open the link to continue.".to_owned());
                let mut params = json!({ "mode": "url", "message": message, "url": a.url });
                // 2025-11-25 identifies the out-of-band interaction; 2026 has no such id.
                if let (false, Some(obj)) = (req.is_modern(), params.as_object_mut()) {
                    let n = self.next_server_id.fetch_add(1, Ordering::Relaxed);
                    obj.insert("elicitationId".to_owned(), json!(format!("demo-el-{n}")));
                }
                self.input_tool(req, InputKind::ElicitationUrl, params)
            }
            "roots" => self.input_tool(req, InputKind::Roots, json!({})),
            "lookup" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    region: Cow<'a, str>,
                    id: i64,
                }
                let a = args!(A);
                req.text(&format!("region={} id={}", a.region, a.id))
            }
            "crash" => {
                eprintln!("demo: crash requested, exiting with status 3");
                stdio::restore();
                std::process::exit(3);
            }
            "junk" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    kind: Cow<'a, str>,
                    #[serde(default)]
                    size: u64,
                }
                let a = args!(A);
                let bad = match a.kind.as_ref() {
                    "malformed" => b"this is not json\n".to_vec(),
                    "unknown_id" => {
                        b"{\"jsonrpc\":\"2.0\",\"id\":987654321,\"result\":{}}\n".to_vec()
                    }
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
            "notify" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    kind: Cow<'a, str>,
                }
                let a = args!(A);
                if a.kind == "updated" {
                    return self.notify_updated(req).await;
                }
                let kind = match a.kind.as_ref() {
                    "tools" => ListKind::Tools,
                    "resources" => ListKind::Resources,
                    "prompts" => ListKind::Prompts,
                    other => {
                        return Err(RpcError::invalid_params(format!(
                            "unknown kind {other:?} (tools, resources, prompts, updated)"
                        )))
                    }
                };
                let method = kind.method();
                if !req.is_modern() {
                    self.emit(notification_line(method, json!({}))).await;
                }
                let tagged: Vec<Vec<u8>> = lock(&self.listens)
                    .values()
                    .filter(|l| kind.wanted_by(l.filter))
                    .map(|l| listen_notification(method, &l.id))
                    .collect();
                for line in tagged {
                    self.emit(line).await;
                }
                req.text("ok")
            }
            "log" => {
                #[derive(Deserialize)]
                struct A<'a> {
                    #[serde(borrow)]
                    level: Cow<'a, str>,
                    #[serde(borrow)]
                    message: Cow<'a, str>,
                }
                let a = args!(A);
                let level = Level::parse(&a.level).ok_or_else(|| {
                    RpcError::invalid_params(format!("invalid logging level {:?}", a.level))
                })?;
                let threshold = match &req.modern {
                    Some(m) => m.log_level,
                    None => Some(lock(&self.legacy).log_level.unwrap_or(Level::Debug)),
                };
                if threshold.is_some_and(|t| level >= t) {
                    let params =
                        json!({ "level": level.as_str(), "logger": "demo", "data": a.message });
                    self.emit(notification_line("notifications/message", params))
                        .await;
                }
                req.text("ok")
            }
            other => Err(RpcError::invalid_params(format!("unknown tool {other:?}"))),
        }
    }

    /// `notify` with kind `updated`: `notifications/resources/updated` for demo://readme to
    /// whoever subscribed to it (legacy: `resources/subscribe`; modern: listens naming it in
    /// `resourceSubscriptions`, tagged). The answer says how many got it.
    async fn notify_updated(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        const METHOD: &str = "notifications/resources/updated";
        let lines: Vec<Vec<u8>> = if req.is_modern() {
            lock(&self.listens)
                .values()
                .filter(|l| l.uris.iter().any(|u| u == README_URI))
                .map(|l| {
                    let sub_id: Value = serde_json::from_str(l.id.get()).unwrap_or(Value::Null);
                    notification_line(
                        METHOD,
                        json!({ "uri": README_URI, "_meta": { META_SUBSCRIPTION_ID: sub_id } }),
                    )
                })
                .collect()
        } else if lock(&self.legacy).subscriptions.contains(README_URI) {
            vec![notification_line(METHOD, json!({ "uri": README_URI }))]
        } else {
            Vec::new()
        };
        let n = lines.len();
        for line in lines {
            self.emit(line).await;
        }
        req.text(&format!("updated: {n}"))
    }

    /// `sample`, `elicit`, `elicit_url`, `roots`: ask the client for input.
    /// Legacy: a real server->client request in a background task (for an
    /// accepted URL elicitation followed by `notifications/elicitation/complete`).
    /// Modern: multi round-trip via `input_required`.
    fn input_tool(self: &Arc<Self>, req: &Request<'_>, kind: InputKind, params: Value) -> Reply {
        let Some(m) = &req.modern else {
            let granted = kind.granted(&lock(&self.legacy).client_caps);
            if !granted {
                let text = format!("client lacks {}", kind.capability_label());
                return req.reply(&ToolResult::error(&text), EX_NONE);
            }
            let shared = Arc::clone(self);
            let id = req.id.to_owned();
            let elicitation_id = params.get("elicitationId").cloned();
            self.spawn_tracked(req.id, async move {
                let answer = shared.ask_client(kind.method(), params).await;
                if let (Ok(v), Some(eid)) = (&answer, elicitation_id) {
                    // The demo's out-of-band interaction is over as soon as it is accepted.
                    if v.get("action").and_then(Value::as_str) == Some("accept") {
                        let params = json!({ "elicitationId": eid });
                        let _ = shared
                            .emit(notification_line(
                                "notifications/elicitation/complete",
                                params,
                            ))
                            .await;
                    }
                }
                let (text, is_error) = match answer {
                    Ok(v) => match kind.finish(&v) {
                        Ok(t) => (t, false),
                        Err(e) => (format!("{} failed: {e}", kind.capability()), true),
                    },
                    Err(e) => (format!("{} failed: {e}", kind.capability()), true),
                };
                let result = ToolResult {
                    is_error,
                    ..ToolResult::text(&text)
                };
                Some(result_line(&id, &result, EX_NONE))
            })?;
            return Ok(None);
        };

        if let Some(state) = req.params.request_state {
            let ok = raw_str(state).is_some_and(|s| state_tool(&s).as_deref() == Some(kind.tool()));
            if !ok {
                return Err(RpcError::invalid_params("invalid requestState"));
            }
        }
        if let Some(responses) = req.params.input_responses.filter(|r| r.get() != "null") {
            let map: serde_json::Map<String, Value> = parse_obj(responses.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid inputResponses: {e}")))?;
            let answer = map.get(kind.key()).or_else(|| {
                if map.len() == 1 {
                    map.values().next()
                } else {
                    None
                }
            });
            if let Some(answer) = answer {
                let text = kind.finish(answer).map_err(|e| {
                    RpcError::invalid_params(format!("invalid inputResponses.{}: {e}", kind.key()))
                })?;
                return req.text(&text);
            }
        }

        let caps: Value = serde_json::from_str(m.caps.get()).unwrap_or(Value::Null);
        let cap = caps.get(kind.capability()).filter(|v| !v.is_null());
        if !kind.granted(&caps) {
            let required = match kind {
                InputKind::Elicitation if cap.is_some() => json!({ "elicitation": { "form": {} } }),
                InputKind::ElicitationUrl => json!({ "elicitation": { "url": {} } }),
                _ => json!({ kind.capability(): {} }),
            };
            return Err(RpcError::new(
                MISSING_CLIENT_CAPABILITY,
                format!(
                    "Missing required client capability: {}",
                    kind.capability_label()
                ),
            )
            .with_data(json!({ "requiredCapabilities": required })));
        }
        let result = json!({
            "resultType": "input_required",
            "inputRequests": { kind.key(): { "method": kind.method(), "params": params } },
            "requestState": mint_state(kind.tool()),
        });
        req.reply(&result, EX_META)
    }
}

// ---------------------------------------------------------------------------
// Tool helpers
// ---------------------------------------------------------------------------

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

#[derive(Debug, Clone, Copy)]
enum ListKind {
    Tools,
    Resources,
    Prompts,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }

    fn wanted_by(self, f: ListenFilter) -> bool {
        match self {
            ListKind::Tools => f.tools,
            ListKind::Resources => f.resources,
            ListKind::Prompts => f.prompts,
        }
    }
}

fn listen_notification(method: &str, listen_id: &RawValue) -> Vec<u8> {
    #[derive(Serialize)]
    struct P<'a> {
        #[serde(rename = "_meta")]
        meta: M<'a>,
    }
    #[derive(Serialize)]
    struct M<'a> {
        #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
        id: &'a RawValue,
    }
    notification_line(
        method,
        P {
            meta: M { id: listen_id },
        },
    )
}

#[derive(Debug, Clone, Copy)]
enum InputKind {
    Sampling,
    /// Form-mode elicitation.
    Elicitation,
    /// URL-mode elicitation (needs `elicitation.url`).
    ElicitationUrl,
    Roots,
}

impl InputKind {
    fn tool(self) -> &'static str {
        match self {
            InputKind::Sampling => "sample",
            InputKind::Elicitation => "elicit",
            InputKind::ElicitationUrl => "elicit_url",
            InputKind::Roots => "roots",
        }
    }

    fn capability(self) -> &'static str {
        match self {
            InputKind::Sampling => "sampling",
            InputKind::Elicitation | InputKind::ElicitationUrl => "elicitation",
            InputKind::Roots => "roots",
        }
    }

    /// The capability as named in messages.
    fn capability_label(self) -> &'static str {
        match self {
            InputKind::ElicitationUrl => "elicitation.url",
            k => k.capability(),
        }
    }

    /// Did the client (its `ClientCapabilities`) declare what this needs?
    /// Elicitation `{}` means form mode only; otherwise the mode must be named.
    fn granted(self, caps: &Value) -> bool {
        let Some(cap) = caps.get(self.capability()).filter(|v| !v.is_null()) else {
            return false;
        };
        match self {
            InputKind::Elicitation => cap
                .as_object()
                .is_none_or(|o| o.is_empty() || o.contains_key("form")),
            InputKind::ElicitationUrl => cap.get("url").is_some_and(|v| !v.is_null()),
            InputKind::Sampling | InputKind::Roots => true,
        }
    }

    fn method(self) -> &'static str {
        match self {
            InputKind::Sampling => "sampling/createMessage",
            InputKind::Elicitation | InputKind::ElicitationUrl => "elicitation/create",
            InputKind::Roots => "roots/list",
        }
    }

    /// Key used in `inputRequests` / `inputResponses`.
    fn key(self) -> &'static str {
        match self {
            InputKind::Sampling => "s1",
            InputKind::Elicitation => "e1",
            InputKind::ElicitationUrl => "u1",
            InputKind::Roots => "r1",
        }
    }

    /// Turn the client's answer into the tool's final text.
    fn finish(self, answer: &Value) -> Result<String, String> {
        match self {
            InputKind::Sampling => {
                let content = answer
                    .get("content")
                    .ok_or("CreateMessageResult without content")?;
                Ok(format!("sampled: {}", content_text(content)))
            }
            InputKind::Elicitation => {
                let action = answer
                    .get("action")
                    .and_then(Value::as_str)
                    .ok_or("ElicitResult without action")?;
                let content = answer.get("content").unwrap_or(&Value::Null);
                Ok(format!("elicited: action={action} content={content}"))
            }
            InputKind::ElicitationUrl => {
                let action = answer
                    .get("action")
                    .and_then(Value::as_str)
                    .ok_or("ElicitResult without action")?;
                Ok(format!("elicited url: action={action}"))
            }
            InputKind::Roots => {
                let roots = answer
                    .get("roots")
                    .and_then(Value::as_array)
                    .ok_or("ListRootsResult without roots")?;
                let uris: Vec<&str> = roots
                    .iter()
                    .filter_map(|r| r.get("uri").and_then(Value::as_str))
                    .collect();
                Ok(format!("roots: {}", uris.join(",")))
            }
        }
    }
}

/// Text of a sampling content block (or array of blocks).
fn content_text(content: &Value) -> String {
    fn one(block: &Value) -> String {
        match block.get("text").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => format!(
                "[{}]",
                block.get("type").and_then(Value::as_str).unwrap_or("?")
            ),
        }
    }
    match content {
        Value::Array(blocks) => blocks.iter().map(one).collect::<Vec<_>>().join(""),
        block => one(block),
    }
}

/// Opaque `requestState`: names the tool plus a random nonce. Not integrity
/// protected (nothing rides on it in the demo); only the tool name is checked.
fn mint_state(tool: &str) -> String {
    let mut nonce = [0u8; 12];
    if getrandom::fill(&mut nonce).is_err() {
        static FALLBACK: AtomicU64 = AtomicU64::new(0);
        let n = FALLBACK.fetch_add(1, Ordering::Relaxed);
        nonce[..8].copy_from_slice(&n.to_le_bytes());
    }
    let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let state = json!({ "tool": tool, "nonce": nonce }).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(state)
}

fn state_tool(state: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(state)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("tool")?.as_str().map(str::to_owned)
}

/// The `tools/list` result, built once.
fn tools_list() -> &'static RawValue {
    static TOOLS: OnceLock<Box<RawValue>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let no_args = json!({ "type": "object", "properties": {}, "additionalProperties": false });
        let levels = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
        let tools = json!({ "tools": [
            {
                "name": "echo",
                "description": "Return the given text unchanged.",
                "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] },
                "annotations": { "readOnlyHint": true, "openWorldHint": false },
            },
            {
                "name": "add",
                "description": "Add two numbers.",
                "inputSchema": { "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] },
                "outputSchema": { "type": "object", "properties": { "sum": { "type": "number" } }, "required": ["sum"] },
                "annotations": { "readOnlyHint": true, "openWorldHint": false },
            },
            {
                "name": "slow",
                "description": "Wait `seconds`, sending progress in `steps` steps when a progressToken is given; cancellable.",
                "inputSchema": { "type": "object", "properties": {
                    "seconds": { "type": "number", "default": 5, "minimum": 0, "maximum": MAX_SLOW_SECONDS },
                    "steps": { "type": "integer", "default": 10, "minimum": 0, "maximum": MAX_SLOW_STEPS },
                } },
            },
            {
                "name": "fail",
                "description": "Return a tool error (isError: true) with the given message.",
                "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } } },
            },
            {
                "name": "bytes",
                "description": "Return one text block of exactly n 'x' characters.",
                "inputSchema": { "type": "object", "properties": { "n": { "type": "integer", "minimum": 0, "maximum": MAX_BYTES } }, "required": ["n"] },
            },
            {
                "name": "error",
                "description": "Answer with a JSON-RPC error of the given code and message.",
                "inputSchema": { "type": "object", "properties": {
                    "code": { "type": "integer", "default": INTERNAL_ERROR },
                    "message": { "type": "string" },
                    "data": {},
                } },
            },
            {
                "name": "sample",
                "description": "Ask the client's model (sampling) to answer the prompt.",
                "inputSchema": { "type": "object", "properties": { "prompt": { "type": "string" } }, "required": ["prompt"] },
            },
            {
                "name": "elicit",
                "description": "Ask the user (elicitation, form mode) for a name.",
                "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } }, "required": ["message"] },
            },
            {
                "name": "elicit_url",
                "description": "Ask the user to visit a URL (elicitation, URL mode; needs elicitation.url).",
                "inputSchema": { "type": "object", "properties": {
                    "url": { "type": "string" },
                    "message": { "type": "string" },
                }, "required": ["url"] },
            },
            {
                "name": "roots",
                "description": "List the client's roots.",
                "inputSchema": no_args,
            },
            {
                "name": "lookup",
                "description": "Echo region and id; both are mirrored into Mcp-Param-* headers.",
                "inputSchema": { "type": "object", "properties": {
                    "region": { "type": "string", "x-mcp-header": "Region" },
                    "id": { "type": "integer", "x-mcp-header": "Item-Id" },
                }, "required": ["region", "id"] },
            },
            {
                "name": "crash",
                "description": "Exit the server process immediately with status 3.",
                "inputSchema": no_args,
            },
            {
                "name": "junk",
                "description": "Write one bad line to stdout, then answer \"ok\".",
                "inputSchema": { "type": "object", "properties": {
                    "kind": { "type": "string", "enum": ["malformed", "oversize", "unknown_id"] },
                    "size": { "type": "integer", "default": 0, "minimum": 0, "maximum": MAX_JUNK },
                }, "required": ["kind"] },
            },
            {
                "name": "notify",
                "description": "Emit a list_changed notification of the given kind, or (kind \"updated\") notifications/resources/updated for demo://readme to its subscribers.",
                "inputSchema": { "type": "object", "properties": {
                    "kind": { "type": "string", "enum": ["tools", "resources", "prompts", "updated"] },
                }, "required": ["kind"] },
            },
            {
                "name": "log",
                "description": "Emit notifications/message at the given level (subject to the log level).",
                "inputSchema": { "type": "object", "properties": {
                    "level": { "type": "string", "enum": levels },
                    "message": { "type": "string" },
                }, "required": ["level", "message"] },
            },
        ]});
        serde_json::value::to_raw_value(&tools).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, DuplexStream, Lines};
    use tokio::task::JoinHandle;

    const WAIT: Duration = Duration::from_secs(5);

    /// A test client talking to `serve` over in-memory pipes.
    struct Client {
        input: Option<DuplexStream>,
        output: Lines<BufReader<DuplexStream>>,
        server: JoinHandle<io::Result<()>>,
    }

    impl Client {
        fn start(era: Era) -> Self {
            let (client_w, server_r) = duplex(1 << 16);
            let (server_w, client_r) = duplex(1 << 16);
            let server = tokio::spawn(serve(server_r, server_w, era));
            Client {
                input: Some(client_w),
                output: BufReader::new(client_r).lines(),
                server,
            }
        }

        async fn send_bytes(&mut self, line: &[u8]) {
            let w = self.input.as_mut().expect("input still open");
            w.write_all(line).await.expect("write to server");
            w.write_all(b"\n").await.expect("write to server");
        }

        async fn send(&mut self, v: Value) {
            self.send_bytes(v.to_string().as_bytes()).await;
        }

        async fn recv(&mut self) -> Value {
            let line = tokio::time::timeout(WAIT, self.output.next_line())
                .await
                .expect("timed out waiting for the server")
                .expect("read from server")
                .expect("server closed its output");
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"))
        }

        async fn call(&mut self, v: Value) -> Value {
            self.send(v).await;
            self.recv().await
        }

        async fn expect_silence(&mut self, dur: Duration) {
            if let Ok(line) = tokio::time::timeout(dur, self.output.next_line()).await {
                panic!("expected no output, got {line:?}");
            }
        }

        /// Close the server's input; returns what `serve` returned.
        async fn close(mut self) -> io::Result<()> {
            drop(self.input.take());
            while let Ok(Ok(Some(_))) = tokio::time::timeout(WAIT, self.output.next_line()).await {}
            tokio::time::timeout(WAIT, self.server)
                .await
                .expect("serve did not return after EOF")
                .expect("serve task panicked")
        }
    }

    fn modern_meta(caps: Value) -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
        })
    }

    fn call(id: Value, name: &str, args: Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "name": name, "arguments": args } })
    }

    fn modern_call(id: Value, name: &str, args: Value, caps: Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "_meta": modern_meta(caps), "name": name, "arguments": args } })
    }

    fn text_of(resp: &Value) -> &str {
        resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in {resp}"))
    }

    async fn initialize(c: &mut Client, caps: Value) -> Value {
        let r = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": caps,
                "clientInfo": { "name": "test", "version": "1" } } }),
            )
            .await;
        c.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        r
    }

    #[tokio::test]
    async fn legacy_initialize_list_and_echo() {
        let mut c = Client::start(Era::Dual);
        let init = initialize(&mut c, json!({})).await;
        assert_eq!(init["id"], 0);
        let r = &init["result"];
        assert_eq!(r["protocolVersion"], "2025-06-18");
        assert_eq!(r["serverInfo"]["name"], "mcp-bridge-demo");
        assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(r["capabilities"]["resources"]["subscribe"], true);
        assert!(r["capabilities"]["logging"].is_object());
        assert!(r["instructions"].is_string());
        assert!(r.get("resultType").is_none());

        let list = c
            .call(json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
            .await;
        let tools = list["result"]["tools"].as_array().expect("tools array");
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "echo",
                "add",
                "slow",
                "fail",
                "bytes",
                "error",
                "sample",
                "elicit",
                "elicit_url",
                "roots",
                "lookup",
                "crash",
                "junk",
                "notify",
                "log"
            ]
        );
        for t in tools {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert!(t["inputSchema"]["properties"].is_object(), "{t}");
        }
        let lookup = &tools[10]["inputSchema"]["properties"];
        assert_eq!(lookup["region"]["x-mcp-header"], "Region");
        assert_eq!(lookup["id"]["x-mcp-header"], "Item-Id");
        assert!(list["result"].get("resultType").is_none());

        let echo = c
            .call(call(
                json!("e1"),
                "echo",
                json!({ "text": "hi \"you\"\nthere" }),
            ))
            .await;
        assert_eq!(echo["id"], "e1");
        assert_eq!(echo["result"]["content"][0]["type"], "text");
        assert_eq!(text_of(&echo), "hi \"you\"\nthere");
        assert!(echo["result"].get("resultType").is_none());

        let add = c
            .call(call(json!(2), "add", json!({ "a": 2, "b": 40 })))
            .await;
        assert_eq!(text_of(&add), "42");
        assert_eq!(add["result"]["structuredContent"]["sum"], 42);

        let ping = c
            .call(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
            .await;
        assert_eq!(ping["result"], json!({}));

        let other = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
                "protocolVersion": "1999-01-01", "capabilities": {} } }),
            )
            .await;
        assert_eq!(other["result"]["protocolVersion"], "2025-11-25");

        let unknown = c
            .call(json!({ "jsonrpc": "2.0", "id": 5, "method": "nope" }))
            .await;
        assert_eq!(unknown["error"]["code"], -32601);
        let bad_tool = c.call(call(json!(6), "nope", json!({}))).await;
        assert_eq!(bad_tool["error"]["code"], -32602);

        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn modern_discover_and_echo() {
        let mut c = Client::start(Era::Dual);
        let d = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
                          "params": { "_meta": modern_meta(json!({})) } }),
            )
            .await;
        let r = &d["result"];
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(r["capabilities"]["prompts"]["listChanged"], true);
        assert_eq!(r["ttlMs"], 0);
        assert_eq!(r["cacheScope"], "public");
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "mcp-bridge-demo"
        );

        let echo = c
            .call(modern_call(
                json!(2),
                "echo",
                json!({ "text": "yo" }),
                json!({}),
            ))
            .await;
        assert_eq!(text_of(&echo), "yo");
        assert_eq!(echo["result"]["resultType"], "complete");
        assert!(echo["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

        for (i, method) in [
            "tools/list",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
        ]
        .into_iter()
        .enumerate()
        {
            let r = c
                .call(json!({ "jsonrpc": "2.0", "id": 10 + i, "method": method,
                              "params": { "_meta": modern_meta(json!({})) } }))
                .await;
            assert_eq!(r["result"]["resultType"], "complete", "{method}: {r}");
            assert_eq!(r["result"]["ttlMs"], 0, "{method}");
            assert_eq!(r["result"]["cacheScope"], "public", "{method}");
        }

        let read = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 20, "method": "resources/read",
                          "params": { "_meta": modern_meta(json!({})), "uri": "demo://readme" } }),
            )
            .await;
        assert_eq!(read["result"]["contents"][0]["mimeType"], "text/plain");
        assert_eq!(read["result"]["cacheScope"], "public");
        let missing = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 21, "method": "resources/read",
                          "params": { "_meta": modern_meta(json!({})), "uri": "demo://none" } }),
            )
            .await;
        assert_eq!(missing["error"]["code"], -32602);
        assert_eq!(missing["error"]["data"]["uri"], "demo://none");

        let mut meta = modern_meta(json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
        let bad_version = c
            .call(json!({ "jsonrpc": "2.0", "id": 22, "method": "tools/list",
                          "params": { "_meta": meta } }))
            .await;
        assert_eq!(bad_version["error"]["code"], -32022);
        assert_eq!(
            bad_version["error"]["data"],
            json!({ "supported": ["2026-07-28"], "requested": "2099-01-01" })
        );

        let no_caps = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 23, "method": "tools/list", "params": {
                "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } } }),
            )
            .await;
        assert_eq!(no_caps["error"]["code"], -32602);

        // Legacy-only methods do not exist for modern requests.
        let set_level = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 24, "method": "logging/setLevel",
                          "params": { "_meta": modern_meta(json!({})), "level": "info" } }),
            )
            .await;
        assert_eq!(set_level["error"]["code"], -32601);

        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn slow_reports_progress_and_can_be_cancelled() {
        let mut c = Client::start(Era::Dual);
        let mut req = call(json!(1), "slow", json!({ "seconds": 0.3, "steps": 3 }));
        req["params"]["_meta"] = json!({ "progressToken": "tok-1" });
        c.send(req).await;
        for i in 1..=3 {
            let p = c.recv().await;
            assert_eq!(p["method"], "notifications/progress", "{p}");
            assert_eq!(p["params"]["progressToken"], "tok-1");
            assert_eq!(p["params"]["progress"], i);
            assert_eq!(p["params"]["total"], 3);
        }
        let done = c.recv().await;
        assert_eq!(done["id"], 1);
        assert_eq!(text_of(&done), "done");

        // A modern slow call with an integer token, cancelled after the first step.
        let mut req = modern_call(
            json!("slow-2"),
            "slow",
            json!({ "seconds": 20, "steps": 200 }),
            json!({}),
        );
        req["params"]["_meta"]["progressToken"] = json!(7);
        c.send(req).await;
        let p = c.recv().await;
        assert_eq!(p["params"]["progressToken"], 7);
        c.send(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": { "requestId": "slow-2", "reason": "test" } }),
        )
        .await;
        // Other requests are still served; the slow call sends nothing more
        // (a progress notification already in flight may still arrive).
        c.send(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
            .await;
        loop {
            let m = c.recv().await;
            if m["id"] == 3 {
                break;
            }
            assert_eq!(m["method"], "notifications/progress", "{m}");
        }
        c.expect_silence(Duration::from_millis(400)).await;

        // Concurrency: a slow call does not hold up an echo.
        c.send(call(json!(4), "slow", json!({ "seconds": 10, "steps": 0 })))
            .await;
        let echo = c
            .call(call(json!(5), "echo", json!({ "text": "fast" })))
            .await;
        assert_eq!(echo["id"], 5);
        // Closing the input abandons the slow call promptly.
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn legacy_sample_round_trip() {
        let mut c = Client::start(Era::Dual);
        initialize(&mut c, json!({ "sampling": {}, "roots": {} })).await;
        c.send(call(json!(1), "sample", json!({ "prompt": "say hi" })))
            .await;
        let ask = c.recv().await;
        assert_eq!(ask["method"], "sampling/createMessage");
        let sid = ask["id"].as_str().expect("string id").to_owned();
        assert!(sid.starts_with("demo-"), "{sid}");
        assert_eq!(ask["params"]["messages"][0]["role"], "user");
        assert_eq!(ask["params"]["messages"][0]["content"]["text"], "say hi");
        assert_eq!(ask["params"]["maxTokens"], 100);

        // The server keeps serving while it waits.
        let echo = c.call(call(json!(2), "echo", json!({ "text": "x" }))).await;
        assert_eq!(echo["id"], 2);

        c.send(json!({ "jsonrpc": "2.0", "id": sid, "result": {
            "role": "assistant", "content": { "type": "text", "text": "hello" }, "model": "m" } }))
            .await;
        let done = c.recv().await;
        assert_eq!(done["id"], 1);
        assert_eq!(text_of(&done), "sampled: hello");
        assert!(done["result"].get("isError").is_none());

        // A client error becomes an isError result; ids are not reused.
        c.send(call(json!(3), "sample", json!({ "prompt": "again" })))
            .await;
        let ask2 = c.recv().await;
        assert_ne!(ask2["id"].as_str(), Some(sid.as_str()));
        c.send(json!({ "jsonrpc": "2.0", "id": ask2["id"],
                       "error": { "code": -1, "message": "user said no" } }))
            .await;
        let failed = c.recv().await;
        assert_eq!(failed["result"]["isError"], true);
        assert!(text_of(&failed).contains("user said no"));

        // roots goes the same way.
        c.send(call(json!(4), "roots", json!({}))).await;
        let ask3 = c.recv().await;
        assert_eq!(ask3["method"], "roots/list");
        c.send(json!({ "jsonrpc": "2.0", "id": ask3["id"], "result": {
            "roots": [{ "uri": "file:///a" }, { "uri": "file:///b" }] } }))
            .await;
        assert!(text_of(&c.recv().await).contains("file:///a,file:///b"));

        // No elicitation capability was declared.
        let no_cap = c
            .call(call(json!(5), "elicit", json!({ "message": "name?" })))
            .await;
        assert_eq!(no_cap["result"]["isError"], true);
        assert_eq!(text_of(&no_cap), "client lacks elicitation");

        // Cancelling a call that waits on the client cancels our request too.
        c.send(call(json!(6), "sample", json!({ "prompt": "never" })))
            .await;
        let ask4 = c.recv().await;
        c.send(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": { "requestId": 6 } }),
        )
        .await;
        let cancel = c.recv().await;
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], ask4["id"]);
        c.expect_silence(Duration::from_millis(200)).await;

        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn legacy_sample_without_capability() {
        let mut c = Client::start(Era::Dual);
        initialize(&mut c, json!({})).await;
        let r = c
            .call(call(json!(1), "sample", json!({ "prompt": "p" })))
            .await;
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(text_of(&r), "client lacks sampling");
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn modern_sample_input_required_round_trip() {
        let mut c = Client::start(Era::Dual);
        let caps = json!({ "sampling": {} });
        let first = c
            .call(modern_call(
                json!(1),
                "sample",
                json!({ "prompt": "hi" }),
                caps.clone(),
            ))
            .await;
        let r = &first["result"];
        assert_eq!(r["resultType"], "input_required", "{first}");
        assert_eq!(r["inputRequests"]["s1"]["method"], "sampling/createMessage");
        assert_eq!(
            r["inputRequests"]["s1"]["params"]["messages"][0]["content"]["text"],
            "hi"
        );
        let state = r["requestState"].as_str().expect("requestState").to_owned();

        let mut retry = modern_call(json!(2), "sample", json!({ "prompt": "hi" }), caps.clone());
        retry["params"]["inputResponses"] = json!({ "s1": {
            "role": "assistant", "content": { "type": "text", "text": "hey" }, "model": "m" } });
        retry["params"]["requestState"] = json!(state);
        let done = c.call(retry).await;
        assert_eq!(done["id"], 2);
        assert_eq!(done["result"]["resultType"], "complete");
        assert_eq!(text_of(&done), "sampled: hey");

        // Forged state is refused.
        let mut forged = modern_call(json!(3), "sample", json!({ "prompt": "hi" }), caps);
        forged["params"]["inputResponses"] =
            json!({ "s1": { "content": { "type": "text", "text": "x" } } });
        forged["params"]["requestState"] = json!("garbage");
        assert_eq!(c.call(forged).await["error"]["code"], -32602);

        // Without the capability: -32021.
        let missing = c
            .call(modern_call(
                json!(4),
                "sample",
                json!({ "prompt": "hi" }),
                json!({}),
            ))
            .await;
        assert_eq!(missing["error"]["code"], -32021);
        assert_eq!(
            missing["error"]["data"],
            json!({ "requiredCapabilities": { "sampling": {} } })
        );

        // Elicitation works the same way, and nothing is ever sent as a request.
        let caps = json!({ "elicitation": {} });
        let first = c
            .call(modern_call(
                json!(5),
                "elicit",
                json!({ "message": "name?" }),
                caps.clone(),
            ))
            .await;
        let req = &first["result"]["inputRequests"]["e1"];
        assert_eq!(req["method"], "elicitation/create");
        assert_eq!(req["params"]["mode"], "form");
        assert_eq!(
            req["params"]["requestedSchema"]["required"],
            json!(["name"])
        );
        let mut retry = modern_call(json!(6), "elicit", json!({ "message": "name?" }), caps);
        retry["params"]["inputResponses"] =
            json!({ "e1": { "action": "accept", "content": { "name": "Ada" } } });
        retry["params"]["requestState"] = first["result"]["requestState"].clone();
        let done = c.call(retry).await;
        assert_eq!(
            text_of(&done),
            "elicited: action=accept content={\"name\":\"Ada\"}"
        );

        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn era_legacy_and_era_modern() {
        let mut c = Client::start(Era::Legacy);
        let d = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
                          "params": { "_meta": modern_meta(json!({})) } }),
            )
            .await;
        assert_eq!(d["error"]["code"], -32601);
        assert_eq!(d["error"]["message"], "Method not found");
        // Modern _meta is ignored: served as a legacy request.
        let echo = c
            .call(modern_call(
                json!(2),
                "echo",
                json!({ "text": "t" }),
                json!({}),
            ))
            .await;
        assert_eq!(text_of(&echo), "t");
        assert!(echo["result"].get("resultType").is_none());
        c.close().await.expect("clean shutdown");

        let mut c = Client::start(Era::Modern);
        let init = initialize(&mut c, json!({})).await;
        assert_eq!(init["error"]["code"], -32022);
        assert_eq!(init["error"]["data"]["supported"], json!(["2026-07-28"]));
        assert_eq!(init["error"]["data"]["requested"], "2025-06-18");
        let legacy_list = c
            .call(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }))
            .await;
        assert_eq!(legacy_list["error"]["code"], -32602);
        let echo = c
            .call(modern_call(
                json!(3),
                "echo",
                json!({ "text": "m" }),
                json!({}),
            ))
            .await;
        assert_eq!(echo["result"]["resultType"], "complete");
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn malformed_input_does_not_kill_the_server() {
        let mut c = Client::start(Era::Dual);
        c.send_bytes(b"this is not json").await;
        let e = c.recv().await;
        assert_eq!(e["error"]["code"], -32700);
        assert_eq!(e["id"], Value::Null);

        c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"")
            .await;
        assert_eq!(c.recv().await["error"]["code"], -32700);
        c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}")
            .await;
        assert_eq!(c.recv().await["error"]["code"], -32700);

        // Valid JSON that is not an object is ignored; blank lines too.
        c.send_bytes(b"[1,2,3]").await;
        c.send_bytes(b"42").await;
        c.send_bytes(b"   ").await;

        let no_method = c.call(json!({ "jsonrpc": "2.0", "id": 7 })).await;
        assert_eq!(no_method["error"]["code"], -32600);
        assert_eq!(no_method["id"], 7);
        let bad_type = c
            .call(json!({ "jsonrpc": "2.0", "id": 8, "method": 5 }))
            .await;
        assert_eq!(bad_type["error"]["code"], -32600);
        let bad_id = c
            .call(json!({ "jsonrpc": "2.0", "id": { "x": 1 }, "method": "ping" }))
            .await;
        assert_eq!(bad_id["error"]["code"], -32600);

        for (id, params) in [
            (9, json!(5)),
            (10, json!([1])),
            (11, json!({ "_meta": 3 })),
            (12, json!({ "name": "echo", "arguments": ["x"] })),
            (13, json!({ "name": "echo", "arguments": { "text": 5 } })),
            (14, json!({ "name": "bytes", "arguments": { "n": -1 } })),
            (
                15,
                json!({ "name": "bytes", "arguments": { "n": 1u64 << 40 } }),
            ),
            (16, json!({ "name": 17 })),
            (
                17,
                json!({ "name": "slow", "arguments": { "seconds": -1 } }),
            ),
            (
                18,
                json!({ "name": "log", "arguments": { "level": "loud", "message": "m" } }),
            ),
        ] {
            let r = c
                .call(
                    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }),
                )
                .await;
            assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
            assert_eq!(r["id"], id);
        }

        // Stray responses and notifications are ignored silently.
        c.send(json!({ "jsonrpc": "2.0", "id": "demo-999", "result": {} }))
            .await;
        c.send(json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": 1 }))
            .await;
        c.send(json!({ "jsonrpc": "2.0", "method": "notifications/whatever" }))
            .await;

        let ping = c
            .call(json!({ "jsonrpc": "2.0", "id": "alive", "method": "ping" }))
            .await;
        assert_eq!(ping["id"], "alive");
        assert_eq!(ping["result"], json!({}));
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn misc_tools() {
        let mut c = Client::start(Era::Dual);
        initialize(&mut c, json!({})).await;

        let bytes = c
            .call(call(json!(1), "bytes", json!({ "n": 100_000 })))
            .await;
        let text = text_of(&bytes);
        assert_eq!(text.len(), 100_000);
        assert!(text.bytes().all(|b| b == b'x'));
        let modern_bytes = c
            .call(modern_call(json!(2), "bytes", json!({ "n": 0 }), json!({})))
            .await;
        assert_eq!(text_of(&modern_bytes), "");
        assert_eq!(modern_bytes["result"]["resultType"], "complete");

        let fail = c
            .call(call(json!(3), "fail", json!({ "message": "nope" })))
            .await;
        assert_eq!(fail["result"]["isError"], true);
        assert_eq!(text_of(&fail), "nope");

        let err = c
            .call(call(
                json!(4),
                "error",
                json!({ "code": -32000, "message": "custom" }),
            ))
            .await;
        assert_eq!(err["error"], json!({ "code": -32000, "message": "custom" }));
        let err = c.call(call(json!(5), "error", json!({}))).await;
        assert_eq!(err["error"]["code"], -32603);

        let lookup = c
            .call(call(
                json!(6),
                "lookup",
                json!({ "region": "eu-west", "id": 42 }),
            ))
            .await;
        assert_eq!(text_of(&lookup), "region=eu-west id=42");

        // junk: the bad line comes first, then the normal answer.
        let w = c.input.as_mut().expect("open");
        let req = call(json!(7), "junk", json!({ "kind": "malformed" })).to_string();
        w.write_all(format!("{req}\n").as_bytes())
            .await
            .expect("write");
        let bad = c.output.next_line().await.expect("read").expect("line");
        assert_eq!(bad, "this is not json");
        assert_eq!(text_of(&c.recv().await), "ok");
        c.send(call(
            json!(8),
            "junk",
            json!({ "kind": "oversize", "size": 5000 }),
        ))
        .await;
        let big = c.output.next_line().await.expect("read").expect("line");
        assert_eq!(big.len(), 5000);
        assert_eq!(text_of(&c.recv().await), "ok");
        let stray = c
            .call(call(json!(9), "junk", json!({ "kind": "unknown_id" })))
            .await;
        assert_eq!(stray["id"], 987654321);
        assert_eq!(text_of(&c.recv().await), "ok");

        // notify (legacy): untagged list_changed.
        let n = c
            .call(call(json!(10), "notify", json!({ "kind": "prompts" })))
            .await;
        assert_eq!(n["method"], "notifications/prompts/list_changed");
        assert_eq!(text_of(&c.recv().await), "ok");

        // log (legacy): everything by default, then filtered by setLevel.
        let m = c
            .call(call(
                json!(11),
                "log",
                json!({ "level": "debug", "message": "d" }),
            ))
            .await;
        assert_eq!(m["method"], "notifications/message");
        assert_eq!(
            m["params"],
            json!({ "level": "debug", "logger": "demo", "data": "d" })
        );
        assert_eq!(text_of(&c.recv().await), "ok");
        let set = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 12, "method": "logging/setLevel",
                          "params": { "level": "warning" } }),
            )
            .await;
        assert_eq!(set["result"], json!({}));
        let quiet = c
            .call(call(
                json!(13),
                "log",
                json!({ "level": "info", "message": "i" }),
            ))
            .await;
        assert_eq!(text_of(&quiet), "ok");
        let loud = c
            .call(call(
                json!(14),
                "log",
                json!({ "level": "error", "message": "e" }),
            ))
            .await;
        assert_eq!(loud["params"]["level"], "error");
        assert_eq!(text_of(&c.recv().await), "ok");

        // log (modern): only with a logLevel in _meta.
        let silent = c
            .call(modern_call(
                json!(15),
                "log",
                json!({ "level": "error", "message": "x" }),
                json!({}),
            ))
            .await;
        assert_eq!(text_of(&silent), "ok");
        let mut req = modern_call(
            json!(16),
            "log",
            json!({ "level": "error", "message": "y" }),
            json!({}),
        );
        req["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
        let m = c.call(req).await;
        assert_eq!(m["params"]["data"], "y");
        assert_eq!(c.recv().await["result"]["resultType"], "complete");

        let prompt = c
            .call(json!({ "jsonrpc": "2.0", "id": 17, "method": "prompts/get",
                          "params": { "name": "greet", "arguments": { "name": "Ada" } } }))
            .await;
        assert_eq!(
            prompt["result"]["messages"][0]["content"]["text"],
            "Hello, Ada!"
        );
        let unknown = c
            .call(json!({ "jsonrpc": "2.0", "id": 18, "method": "prompts/get",
                          "params": { "name": "nope" } }))
            .await;
        assert_eq!(unknown["error"]["code"], -32602);
        let missing = c
            .call(
                json!({ "jsonrpc": "2.0", "id": 19, "method": "resources/read",
                          "params": { "uri": "demo://none" } }),
            )
            .await;
        assert_eq!(missing["error"]["code"], -32002);
        let completion = c
            .call(json!({ "jsonrpc": "2.0", "id": 20, "method": "completion/complete", "params": {} }))
            .await;
        assert_eq!(completion["result"]["completion"]["hasMore"], false);
        for (id, method) in [(21, "resources/subscribe"), (22, "resources/unsubscribe")] {
            let r = c
                .call(json!({ "jsonrpc": "2.0", "id": id, "method": method,
                              "params": { "uri": "demo://readme" } }))
                .await;
            assert_eq!(r["result"], json!({}));
        }
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn modern_listen_gets_tagged_list_changed() {
        let mut c = Client::start(Era::Dual);
        let ack = c
            .call(json!({ "jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": {
                "_meta": modern_meta(json!({})),
                "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["demo://x"] } } }))
            .await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(
            ack["params"]["notifications"],
            json!({ "toolsListChanged": true })
        );
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "L"
        );

        let n = c
            .call(modern_call(
                json!(1),
                "notify",
                json!({ "kind": "tools" }),
                json!({}),
            ))
            .await;
        assert_eq!(n["method"], "notifications/tools/list_changed");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "L"
        );
        assert_eq!(text_of(&c.recv().await), "ok");
        // Not subscribed to prompts: only the answer.
        let r = c
            .call(modern_call(
                json!(2),
                "notify",
                json!({ "kind": "prompts" }),
                json!({}),
            ))
            .await;
        assert_eq!(text_of(&r), "ok");

        c.send(
            json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": { "requestId": "L" } }),
        )
        .await;
        let r = c
            .call(modern_call(
                json!(3),
                "notify",
                json!({ "kind": "tools" }),
                json!({}),
            ))
            .await;
        assert_eq!(text_of(&r), "ok");
        c.expect_silence(Duration::from_millis(100)).await;
        c.close().await.expect("clean shutdown");
    }

    #[tokio::test]
    async fn overlong_lines_are_skipped() {
        let data: &[u8] = b"0123456789abcdef\nok\r\nlast";
        let mut r = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::TooLong)
        ));
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Line)
        ));
        assert_eq!(buf, b"ok");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Line)
        ));
        assert_eq!(buf, b"last");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Eof)
        ));
    }

    #[test]
    fn era_parses() {
        assert_eq!("dual".parse::<Era>(), Ok(Era::Dual));
        assert_eq!("legacy".parse::<Era>(), Ok(Era::Legacy));
        assert_eq!("modern".parse::<Era>(), Ok(Era::Modern));
        assert!("both".parse::<Era>().is_err());
        assert_eq!(Era::default().to_string(), "dual");
    }

    #[test]
    fn extras_splice_into_results() {
        let id = RawValue::from_string("1".to_owned()).expect("raw id");
        let empty = result_line(&id, &json!({}), EX_COMPLETE);
        let v: Value = serde_json::from_slice(&empty).expect("json");
        assert_eq!(v["result"]["resultType"], "complete");
        let full = result_line(&id, &json!({ "a": 1 }), EX_CACHED);
        let v: Value = serde_json::from_slice(&full).expect("json");
        assert_eq!(v["result"]["a"], 1);
        assert_eq!(v["result"]["ttlMs"], 0);
        assert_eq!(*full.last().expect("non-empty"), b'\n');
        assert_eq!(full.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
