//! A POST on the MCP endpoint, from bytes to a handler: check the head (`Content-Type`,
//! `Accept`), read the body under the size limit, parse one JSON-RPC message (no batches),
//! then classify it by era: a 2026-07-28 header or `_meta` goes to the stateless path (`modern`,
//! which refuses the methods 2026 removed, `initialize` too), then `initialize` opens a 2025
//! session and an `Mcp-Session-Id` goes to the session's endpoints (`session_http`); anything
//! else is told what it lacks.
//!
//! It is the only module that turns a request into a `PostCtx`; the handlers it hands over
//! to never call back into it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde_json::json;
use serde_json::value::RawValue;

use crate::face::accept::{BodyTimeout, ReqBody};
use crate::face::observe::{self, answered};
use crate::face::respond::{rpc_error, Body};
use crate::face::run::{accepts, header_str, PostCtx};
use crate::face::session_http;
use crate::face::state::App;
use crate::jsonrpc::{self, code, Envelope, Kind};
use crate::protocol;

/// Answer one POST.
pub async fn post(app: &Arc<App>, req: Request<ReqBody>, arrived: Instant) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let h = parts.headers;
    let (accept_json, accept_sse) = match check_head(&h) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let bytes = match read_body(app, body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Some(r) =
        crate::face::hop::by_session(app, http::Method::POST, &h, bytes.clone(), None).await
    {
        return r;
    }
    let (env, kind) = match parse_message(&bytes) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let principal = parts
        .extensions
        .get::<crate::auth::Caller>()
        .map_or_else(|| "anonymous".to_owned(), |c| format!("caller:{}", c.name));
    let who = parts
        .extensions
        .get::<crate::auth::Caller>()
        .map(|c| c.identity.clone());
    let view = if kind == Kind::Response {
        jsonrpc::ParamsView::default()
    } else {
        jsonrpc::ParamsView::parse(env.params)
    };
    let ctx = PostCtx {
        principal,
        who,
        headers: &h,
        env: &env,
        view,
        kind,
        body: &bytes,
        accept_json,
        accept_sse,
        arrived,
    };
    classify(app, &ctx).await
}

/// `Content-Type` must be JSON and `Accept` must take JSON or SSE; returns what it accepts.
fn check_head(h: &HeaderMap) -> Result<(bool, bool), Response<Body>> {
    if let Some(ct) = header_str(h, header::CONTENT_TYPE.as_str()) {
        if !ct
            .get(..16)
            .is_some_and(|p| p.eq_ignore_ascii_case("application/json"))
        {
            return Err(rpc_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                code::INVALID_REQUEST,
                "Content-Type must be application/json",
                None,
            ));
        }
    }
    let (accept_json, accept_sse) = accepts(h);
    if !accept_json && !accept_sse {
        return Err(rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            code::INVALID_REQUEST,
            "Accept must include application/json and text/event-stream",
            None,
        ));
    }
    Ok((accept_json, accept_sse))
}

/// The whole body, refused (413) when it exceeds `max_body`, 408 when it does not arrive
/// within `--body-timeout` (the connection is then closed: see `http::handle`).
async fn read_body(app: &App, body: ReqBody) -> Result<Bytes, Response<Body>> {
    match Limited::new(body, app.cfg.max_body).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(rpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    None,
                    code::INVALID_REQUEST,
                    &format!("request body exceeds {} bytes", app.cfg.max_body),
                    None,
                ));
            }
            if e.downcast_ref::<BodyTimeout>().is_some() {
                return Err(rpc_error(
                    StatusCode::REQUEST_TIMEOUT,
                    None,
                    code::INVALID_REQUEST,
                    "the request body did not arrive in time",
                    None,
                ));
            }
            Err(rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::PARSE_ERROR,
                "could not read the request body",
                None,
            ))
        }
    }
}

/// One JSON-RPC message and its kind; batches are refused.
fn parse_message(bytes: &Bytes) -> Result<(Envelope<'_>, Kind), Response<Body>> {
    let bad = |c: i64, msg: &str| rpc_error(StatusCode::BAD_REQUEST, None, c, msg, None);
    let env = match Envelope::parse(bytes) {
        Ok(e) => e,
        Err(jsonrpc::FrameError::Batch) => {
            return Err(bad(
                code::INVALID_REQUEST,
                "JSON-RPC batches are not supported by mcp-bridge: send one message per POST",
            ))
        }
        Err(jsonrpc::FrameError::Json(e)) => {
            return Err(bad(code::PARSE_ERROR, &format!("Parse error: {e}")))
        }
        Err(e) => return Err(bad(code::INVALID_REQUEST, &e.to_string())),
    };
    match env.kind() {
        Ok(k) => Ok((env, k)),
        Err(e) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            env.id.map(RawValue::get),
            code::INVALID_REQUEST,
            &e.to_string(),
            None,
        )),
    }
}

/// Hand a parsed message to the handler of its era (counting it, and the bridge's own error
/// answers, on the way).
async fn classify(app: &Arc<App>, ctx: &PostCtx<'_>) -> Response<Body> {
    let (h, env, kind) = (ctx.headers, ctx.env, ctx.kind);
    let pv_header = header_str(h, protocol::H_PROTOCOL_VERSION);
    let method = env.method();
    observe::received(app, kind, method);
    // The era check comes first: a 2026 `initialize` is a removed method (404), not a session.
    let has_modern_meta =
        kind == Kind::Request && ctx.view.meta(protocol::META_PROTOCOL_VERSION).is_some();
    if pv_header == Some(protocol::MODERN) || has_modern_meta {
        let r = crate::face::modern::handle(app, ctx).await;
        return answered(app, method, r);
    }
    if method == "initialize" {
        return answered(app, method, session_http::initialize(app, ctx).await);
    }
    if header_str(h, protocol::H_SESSION_ID).is_some() {
        return answered(app, method, session_http::session_post(app, ctx).await);
    }
    if let Some(v) = pv_header {
        if !protocol::is_legacy_version(v) {
            let r = rpc_error(
                StatusCode::BAD_REQUEST,
                env.id.map(RawValue::get),
                code::UNSUPPORTED_PROTOCOL_VERSION,
                &format!("Unsupported protocol version: {v}"),
                Some(&json!({"supported": protocol::ALL_VERSIONS, "requested": v})),
            );
            return answered(app, method, r);
        }
    }
    let r = rpc_error(
        StatusCode::BAD_REQUEST,
        env.id.map(RawValue::get),
        code::INVALID_REQUEST,
        "Bad Request: Mcp-Session-Id header is required (send initialize first), or send a 2026-07-28 request with _meta",
        None,
    );
    answered(app, method, r)
}
