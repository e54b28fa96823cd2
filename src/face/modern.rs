//! The 2026-07-28 stateless path of the HTTP face: validate the request's headers against its
//! body and its required `_meta`, refuse the methods 2026 removed (404 / `-32601`, whatever the
//! upstream's era), answer `server/discover` for 2025 children, forward the rest;
//! for a 2025 child, park calls that need the client's input and resume them on the retry
//! (with `crate::face::respond` and `crate::era::mrtr`, which also map URL elicitation).

use http::{HeaderMap, Response, StatusCode};
use serde_json::json;
use serde_json::value::RawValue;

use crate::call::CallCtx;
use crate::era::park;
use crate::face::respond::{self, rpc_error, status_only, Body};
use crate::face::run::{CallRequest, PostCtx};
use crate::face::state::App;
use crate::jsonrpc::{self, code, Fields, Kind, ParamsView};
use crate::protocol::{self, Era};

/// Why a 2026 request is rejected before it reaches the upstream.
#[derive(Debug, PartialEq)]
pub struct Reject {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
    pub data: Option<serde_json::Value>,
}

fn mismatch(msg: String) -> Reject {
    Reject {
        status: StatusCode::BAD_REQUEST,
        code: code::HEADER_MISMATCH,
        message: msg,
        data: None,
    }
}

fn invalid_params(msg: String) -> Reject {
    Reject {
        status: StatusCode::BAD_REQUEST,
        code: code::INVALID_PARAMS,
        message: msg,
        data: None,
    }
}

/// Read a header; `Err` when present but not visible ASCII.
fn header<'h>(h: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, Reject> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(Some)
            .map_err(|_| mismatch(format!("header {name} has invalid characters"))),
    }
}

/// Check a 2026 request's headers and `_meta`. `tool_headers` gives a tool's `x-mcp-header`
/// annotations as (lowercase header name, argument property).
pub fn validate(
    h: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
    tool_headers: &dyn Fn(&str) -> Vec<(String, String)>,
) -> Result<(), Reject> {
    validate_view(h, method, &ParamsView::parse(params), tool_headers)
}

/// [`validate`] on params parsed already.
pub fn validate_view(
    h: &HeaderMap,
    method: &str,
    view: &ParamsView<'_>,
    tool_headers: &dyn Fn(&str) -> Vec<(String, String)>,
) -> Result<(), Reject> {
    check_version(h, view.meta.as_ref())?;
    match header(h, protocol::H_METHOD)? {
        None => return Err(mismatch("missing required Mcp-Method header".into())),
        Some(m) if m != method => {
            return Err(mismatch(format!(
                "Mcp-Method header ({m}) does not match the body's method ({method})"
            )))
        }
        _ => {}
    }
    let Some(field) = protocol::name_field(method) else {
        return Ok(());
    };
    let pf = view.fields.as_ref();
    let body_name = check_name(h, method, field, pf)?;
    if method == "tools/call" {
        let annotated = tool_headers(&body_name);
        if !annotated.is_empty() {
            let args = pf.and_then(|f| f.get("arguments")).and_then(Fields::parse);
            check_param_headers(h, args.as_ref(), annotated)?;
        }
    }
    Ok(())
}

/// `MCP-Protocol-Version` against `_meta`, the version itself, and the required capabilities.
fn check_version(h: &HeaderMap, meta: Option<&Fields<'_>>) -> Result<(), Reject> {
    let header_pv = header(h, protocol::H_PROTOCOL_VERSION)?;
    let body_pv = meta
        .and_then(|m| m.get(protocol::META_PROTOCOL_VERSION))
        .map(|v| serde_json::from_str::<String>(v.get()));
    let body_pv = match body_pv {
        None => {
            return Err(invalid_params(format!(
                "missing required params._meta[\"{}\"]",
                protocol::META_PROTOCOL_VERSION
            )))
        }
        Some(Err(_)) => {
            return Err(invalid_params(format!(
                "params._meta[\"{}\"] must be a string",
                protocol::META_PROTOCOL_VERSION
            )))
        }
        Some(Ok(v)) => v,
    };
    match header_pv {
        None => {
            return Err(mismatch(
                "missing required MCP-Protocol-Version header".into(),
            ))
        }
        Some(hv) if hv != body_pv => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header ({hv}) does not match params._meta protocolVersion ({body_pv})"
            )))
        }
        _ => {}
    }
    if body_pv != protocol::MODERN {
        return Err(Reject {
            status: StatusCode::BAD_REQUEST,
            code: code::UNSUPPORTED_PROTOCOL_VERSION,
            message: format!("Unsupported protocol version: {body_pv}"),
            data: Some(json!({"supported": [protocol::MODERN], "requested": body_pv})),
        });
    }
    if !meta.is_some_and(|m| m.has(protocol::META_CLIENT_CAPABILITIES)) {
        return Err(invalid_params(format!(
            "missing required params._meta[\"{}\"]",
            protocol::META_CLIENT_CAPABILITIES
        )));
    }
    Ok(())
}

/// `Mcp-Name` against the body's name field; returns the name.
fn check_name(
    h: &HeaderMap,
    method: &str,
    field: &str,
    pf: Option<&Fields<'_>>,
) -> Result<String, Reject> {
    let body_name = pf
        .and_then(|f| f.get(field))
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
    let Some(body_name) = body_name else {
        return Err(invalid_params(format!(
            "params.{field} is required for {method}"
        )));
    };
    let Some(hv) = header(h, protocol::H_NAME)? else {
        return Err(mismatch(format!(
            "missing required Mcp-Name header for {method}"
        )));
    };
    let decoded = protocol::decode_header_value(hv)
        .ok_or_else(|| mismatch("Mcp-Name header has an invalid base64 value".into()))?;
    if decoded != body_name {
        return Err(mismatch(format!(
            "Mcp-Name header does not match params.{field}"
        )));
    }
    Ok(body_name)
}

/// The `Mcp-Param-*` headers a tool's `x-mcp-header` annotations require, against its arguments.
fn check_param_headers(
    h: &HeaderMap,
    args: Option<&Fields<'_>>,
    annotated: Vec<(String, String)>,
) -> Result<(), Reject> {
    for (hname, prop) in annotated {
        let full = format!("{}{}", protocol::H_PARAM_PREFIX, hname);
        let body_v = args
            .as_ref()
            .and_then(|a| a.get(&prop))
            .filter(|v| v.get() != "null");
        let hv = header(h, &full)?;
        match (body_v, hv) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(mismatch(format!(
                    "missing required Mcp-Param-{hname} header (argument {prop})"
                )))
            }
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "Mcp-Param-{hname} header present but argument {prop} is absent"
                )))
            }
            (Some(bv), Some(hv)) => {
                let ok = protocol::decode_header_value(hv)
                    .map(|d| protocol::header_matches_json(&d, bv))
                    .unwrap_or(false);
                if !ok {
                    return Err(mismatch(format!(
                        "Mcp-Param-{hname} header does not match argument {prop}"
                    )));
                }
            }
        }
    }
    Ok(())
}

pub async fn handle(app: &App, pc: &PostCtx<'_>) -> Response<Body> {
    let id = pc.env.id.map(RawValue::get);
    match pc.kind {
        // 2026 clients send no notifications over HTTP; accept and ignore (A6).
        Kind::Notification => return status_only(StatusCode::ACCEPTED),
        Kind::Response => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                code::INVALID_REQUEST,
                "2026-07-28 clients do not send responses",
                None,
            )
        }
        Kind::Request => {}
    }
    let method = pc.env.method();
    // Validation needs the child's tool list (Mcp-Param-* rules): wait for it to be ready.
    let info = app.upstream.info(app.cfg.start_wait).await;
    let upstream = app.upstream.clone();
    let th = |tool: &str| upstream.tool_headers(tool);
    if let Err(r) = validate_view(pc.headers, method, &pc.view, &th) {
        return rpc_error(r.status, id, r.code, &r.message, r.data.as_ref());
    }
    if protocol::removed_in_modern(method) {
        return removed(id, method);
    }
    if let Some(r) = tasks_refusal(id, method, &pc.view) {
        return r;
    }
    let info = match info {
        Ok(i) => i,
        Err(e) => {
            app.meter.refused(method, code::UPSTREAM_UNAVAILABLE);
            return respond::json(StatusCode::OK, jsonrpc::error_raw(id, &e.error_object()));
        }
    };
    let rid = id.unwrap_or("null");
    if method == "server/discover" {
        if let Some(d) = crate::core::discover_for(&info) {
            return respond::json(StatusCode::OK, jsonrpc::result(rid, &d));
        }
    }
    if info.era == Era::Legacy && method == "subscriptions/listen" {
        return crate::face::listen::listen(app, pc, &info).await;
    }
    let mut ctx = CallCtx::modern();
    ctx.tool = crate::face::run::tool_name(method, &pc.view);
    // A 2026 caller's tasks are its principal's (there is no other identity to bind them to).
    ctx.owner = Some(std::sync::Arc::from(pc.principal.as_str()));
    ctx.who = pc.who.clone();
    let level = protocol::log_level_value(pc.view.meta(protocol::META_LOG_LEVEL));
    if level.is_err() {
        // Counted once, as the bridge's answer (`observe::answered`).
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_PARAMS,
            "invalid io.modelcontextprotocol/logLevel",
            None,
        );
    }
    if let Ok(Some(level)) = level {
        // Toward a 2025 upstream the core lowers its level and filters per call.
        ctx.log_level = Some(level);
    }
    let mut mrtr = None;
    if answered_by_legacy(app, method, pc).await {
        // The 2025 child may ask for input: that becomes input_required for this client.
        match crate::core::retry_state(pc.env.params, &app.signer) {
            crate::core::RetryState::Fresh => {}
            crate::core::RetryState::Ours(state) => return resume(app, pc, method, &state).await,
            crate::core::RetryState::Refused(msg) => {
                let rid = pc.env.id.map(RawValue::get).unwrap_or("null");
                return rpc_error(StatusCode::OK, Some(rid), code::INVALID_PARAMS, msg, None);
            }
        }
        let m = mrtr_ctx(app, pc, 0, None);
        // Only a caller that declared something the child may ask can be asked.
        ctx.accepts_server_requests = crate::era::mrtr::declares_any_input(m.caps.as_deref());
        mrtr = Some(m);
    }
    let mut params = pc.env.params.map(|p| p.to_owned());
    if mrtr.is_some() {
        // A retry after a translated -32042 is the original call again (see crate::era::mrtr).
        if let Some(p) = crate::era::mrtr::strip_input_responses(params.as_deref()) {
            params = Some(p);
        }
    }
    // A listen stream lasts until the client goes or the bridge stops: at shutdown it ends
    // with its completion result instead of holding the connection through the grace period.
    let cancel = if method == "subscriptions/listen" {
        app.stopping.clone()
    } else {
        app.children.clone()
    };
    let call = CallRequest::new(&app.upstream, method, params, ctx, cancel).with_mrtr(mrtr);
    app.run_call(pc, call).await
}

/// Is `method` one that may ask for input, answered by a 2025 peer (the upstream, or an
/// endpoint's member the call goes to)? Its questions become `input_required` rounds then.
async fn answered_by_legacy(app: &App, method: &str, pc: &PostCtx<'_>) -> bool {
    crate::era::mrtr::is_mrtr_method(method)
        && app
            .upstream
            .call_era(method, pc.env.params, Era::Modern, app.cfg.start_wait)
            .await
            == Some(Era::Legacy)
}

/// A tasks request refused as the tasks extension's server would (see
/// [`crate::core::tasks::modern_refusal`]): 404 for a removed method, 400 for `-32021`.
fn tasks_refusal(id: Option<&str>, method: &str, view: &ParamsView<'_>) -> Option<Response<Body>> {
    let caps = view.meta(protocol::META_CLIENT_CAPABILITIES);
    let (c, msg, data) = crate::core::tasks::modern_refusal(method, caps)?;
    let status = if c == code::METHOD_NOT_FOUND {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::BAD_REQUEST
    };
    Some(rpc_error(status, id, c, &msg, data.as_ref()))
}

/// A method the 2026 revision removed: never forwarded (a 2025 upstream would answer it) nor
/// answered here, whichever era the upstream speaks.
fn removed(id: Option<&str>, method: &str) -> Response<Body> {
    rpc_error(
        StatusCode::NOT_FOUND,
        id,
        code::METHOD_NOT_FOUND,
        &protocol::removed_message(method),
        Some(&json!({ "method": method })),
    )
}

/// Who the caller is, for binding `requestState`: the authenticated identity, or one shared
/// "anonymous" principal without authentication (the state is still bound to the arguments).
fn principal(pc: &PostCtx<'_>) -> String {
    pc.principal.clone()
}

fn mrtr_ctx(app: &App, pc: &PostCtx<'_>, round: u32, park_id: Option<u64>) -> respond::MrtrCtx {
    respond::MrtrCtx {
        store: app.parked.clone(),
        signer: app.signer.clone(),
        caps: pc
            .view
            .meta(protocol::META_CLIENT_CAPABILITIES)
            .map(|c| c.to_owned()),
        principal: principal(pc),
        digest: crate::era::mrtr::params_digest(pc.env.params),
        ttl: app.cfg.park_timeout,
        upstream: app.upstream.clone(),
        round,
        park_id,
    }
}

/// A 2026 client retries a call the bridge parked: hand its answers to the 2025 child as
/// responses to the child's own requests, then carry on with the call.
/// A retry carrying a `requestState` the bridge signed (`crate::core::retry_state`).
async fn resume(app: &App, pc: &PostCtx<'_>, method: &str, state: &str) -> Response<Body> {
    let rid = pc.env.id.map(RawValue::get).unwrap_or("null");
    let bad = |msg: String| rpc_error(StatusCode::OK, Some(rid), code::INVALID_PARAMS, &msg, None);
    if let Some(r) = crate::face::hop::by_state(app, pc.headers, pc.body, state, rid).await {
        return r;
    }
    let who = principal(pc);
    let digest = crate::era::mrtr::params_digest(pc.env.params);
    let retry = park::Retry {
        signer: &app.signer,
        state,
        principal: &who,
        method,
        digest: &digest,
        answers: pc.view.get("inputResponses"),
        ttl: app.cfg.park_timeout,
    };
    let resumed = park::resume(&app.parked, &retry);
    let (_, next) = park::hand_over(resumed, &app.upstream, app.cfg.attribution_wait).await;
    match next {
        park::Next::Refused(msg) => bad(msg),
        park::Next::Again(body) => respond::json(StatusCode::OK, jsonrpc::result(rid, &body)),
        park::Next::Go {
            handle,
            round,
            park_id,
        } => {
            app.responder(pc, method, Era::Modern, app.children.clone(), pc.arrived)
                .with_progress_token(pc.view.meta("progressToken").map(|t| t.to_owned()))
                .with_mrtr(mrtr_ctx(app, pc, round, Some(park_id)))
                .respond(handle)
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

    fn no_tools(_: &str) -> Vec<(String, String)> {
        Vec::new()
    }

    fn region(_: &str) -> Vec<(String, String)> {
        vec![("region".into(), "region".into())]
    }

    #[test]
    fn matrix() {
        let p = jsonrpc::raw(&format!(
            r#"{{"name":"lookup","arguments":{{"region":"eu"}},{META}}}"#
        ));
        let ok = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "lookup"),
            ("mcp-param-region", "eu"),
        ]);
        assert_eq!(validate(&ok, "tools/call", Some(&p), &region), Ok(()));
        // base64 form of the name
        let b64 = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?bG9va3Vw?="),
            ("mcp-param-region", "eu"),
        ]);
        assert_eq!(validate(&b64, "tools/call", Some(&p), &region), Ok(()));
        let cases: Vec<(Vec<(&str, &str)>, i64)> = vec![
            (
                vec![
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "lookup"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-name", "lookup"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/list"),
                    ("mcp-name", "lookup"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "other"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "lookup"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "lookup"),
                    ("mcp-param-region", "us"),
                ],
                code::HEADER_MISMATCH,
            ),
            (
                vec![
                    ("mcp-protocol-version", "2025-11-25"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "lookup"),
                    ("mcp-param-region", "eu"),
                ],
                code::HEADER_MISMATCH,
            ),
        ];
        for (headers, want) in cases {
            let r = validate(&hm(&headers), "tools/call", Some(&p), &region).unwrap_err();
            assert_eq!(r.code, want, "{headers:?}");
            assert_eq!(r.status, StatusCode::BAD_REQUEST);
        }
        // missing _meta → -32602
        let bare = jsonrpc::raw(r#"{"name":"lookup"}"#);
        assert_eq!(
            validate(&ok, "tools/call", Some(&bare), &no_tools)
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
        // unsupported version
        let old = jsonrpc::raw(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#,
        );
        let h = hm(&[
            ("mcp-protocol-version", "2099-01-01"),
            ("mcp-method", "tools/list"),
        ]);
        let r = validate(&h, "tools/list", Some(&old), &no_tools).unwrap_err();
        assert_eq!(r.code, code::UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(r.data.unwrap()["requested"], "2099-01-01");
        // missing capabilities
        let nocaps =
            jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#);
        let h = hm(&[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
        ]);
        assert_eq!(
            validate(&h, "tools/list", Some(&nocaps), &no_tools)
                .unwrap_err()
                .code,
            code::INVALID_PARAMS
        );
    }
}
