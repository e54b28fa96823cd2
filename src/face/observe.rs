//! Per-message accounting on the HTTP face (with `core::meter`, as on every face): once a
//! POST's JSON-RPC message is parsed, count the request by method and, when the bridge itself answered it with a JSON-RPC error (header
//! mismatch, unknown session, unsupported version, …), count that error with source `bridge`.
//! Errors the upstream sent are counted where they arrive (`upstream::child`), and bridge errors
//! made during a call (timeout, child crash, cancellation) where the call ends (`respond`).
//!
//! Requests rejected before a message could be read (403, 406, 413, 415, unparsable bodies)
//! are HTTP failures only: they appear in `mcp_bridge_http_responses_total`.

use http::Response;

use crate::face::respond::{Body, BridgeRpcError};
use crate::face::state::App;
use crate::jsonrpc::Kind;

/// Count a parsed message as it arrives (requests only), before anything can abandon it.
pub fn received(app: &App, kind: Kind, method: &str) {
    if kind == Kind::Request {
        app.meter.request(method);
    }
}

/// Account for the bridge's own answer to one parsed message and pass the response on.
pub fn answered(app: &App, method: &str, resp: Response<Body>) -> Response<Body> {
    if let Some(BridgeRpcError(code)) = resp.extensions().get::<BridgeRpcError>() {
        app.meter.refused(method, *code);
    }
    resp
}
