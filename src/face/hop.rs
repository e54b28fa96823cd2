//! Where the HTTP face hands a request to the replica that owns it (`cluster`): a request of a
//! 2025 session another replica minted ([`by_session`]: POST, GET stream, DELETE) and the
//! retry of a call another replica parked ([`by_state`]). Everything else, and anything that
//! already made the hop (`Mcp-Bridge-Forwarded`), is served here.
//!
//! An owner that cannot be reached ends the request here with what a client knows how to
//! handle: a 2025 session is gone (404, so the client initializes again on a live replica),
//! a parked call cannot be resumed (a JSON-RPC error naming why).

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use tracing::warn;

use crate::cluster::{Cluster, H_FORWARDED};
use crate::face::respond::{rpc_error, Body};
use crate::face::run::header_str;
use crate::face::state::App;
use crate::jsonrpc::code;
use crate::protocol;

/// The cluster, unless this request already made its hop.
fn cluster<'a>(app: &'a App, h: &HeaderMap) -> Option<&'a Cluster> {
    if h.contains_key(H_FORWARDED) {
        return None;
    }
    app.cfg.cluster.as_deref()
}

/// Forward to `owner`; the owner's answer, or why there is none (logged and counted).
async fn forward(
    app: &App,
    c: &Cluster,
    owner: &str,
    method: Method,
    h: &HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ()> {
    // A JSON answer comes when the call ends: its head may take up to the call timeout.
    let wait = app.cfg.call_timeout + std::time::Duration::from_secs(5);
    match c
        .client()
        .forward(owner, method, &app.cfg.path, h, body, wait)
        .await
    {
        Ok(r) => {
            app.metrics.cluster_forward(&app.server, "ok");
            Ok(r)
        }
        Err(e) => {
            app.metrics.cluster_forward(&app.server, "unreachable");
            warn!("the replica that owns this request did not answer: {e}");
            Err(())
        }
    }
}

/// A request of a 2025 session owned by another replica, answered by that replica; None
/// when it is this replica's to serve.
pub async fn by_session(
    app: &App,
    method: Method,
    h: &HeaderMap,
    body: Bytes,
    id: Option<&str>,
) -> Option<Response<Body>> {
    let c = cluster(app, h)?;
    let owner = c.elsewhere(header_str(h, protocol::H_SESSION_ID)?)?;
    Some(match forward(app, c, &owner, method, h, body).await {
        Ok(r) => r,
        Err(()) => rpc_error(
            StatusCode::NOT_FOUND,
            id,
            code::INVALID_REQUEST,
            "Session not found (the replica that held it is gone): initialize again",
            None,
        ),
    })
}

/// The retry of a call parked on another replica (its `requestState` names the owner),
/// answered by that replica; None when the call is parked here (or the state is not ours).
pub async fn by_state(
    app: &App,
    h: &HeaderMap,
    body: &Bytes,
    state: &str,
    id: &str,
) -> Option<Response<Body>> {
    let c = cluster(app, h)?;
    let owner = c.elsewhere(app.signer.owner_of(state)?)?;
    Some(
        match forward(app, c, &owner, Method::POST, h, body.clone()).await {
            Ok(r) => r,
            Err(()) => rpc_error(
                StatusCode::OK,
                Some(id),
                code::INVALID_PARAMS,
                "cannot resume: the replica holding this call is gone; call again",
                None,
            ),
        },
    )
}
