//! Where the HTTP face hands a request to the replica that owns it (`cluster`): a request of a
//! 2025 session another replica minted ([`by_session`]: POST, GET stream, DELETE) and the
//! retry of a call another replica parked ([`by_state`]). Everything else, and anything that
//! already made the hop (`Mcp-Bridge-Forwarded`), is served here.
//!
//! An owner that cannot be reached ends the request here with what a client knows how to
//! handle: a 2025 session is gone (404, so the client initializes again on a live replica),
//! a parked call cannot be resumed (a JSON-RPC error naming why). An owner lost while it
//! streams a request's answer is answered for by the hop (`cluster::forward::Expect`): a
//! JSON-RPC error naming it, counted as `owner_lost_midway`.

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use tracing::warn;

use crate::cluster::forward::{Expect, Hop};
use crate::cluster::{Cluster, H_FORWARDED};
use crate::face::respond::{rpc_error, Body};
use crate::face::run::header_str;
use crate::face::state::App;
use crate::jsonrpc::{code, Envelope, Kind};
use crate::protocol;

/// The cluster, unless this request already made its hop.
fn cluster<'a>(app: &'a App, h: &HeaderMap) -> Option<&'a Cluster> {
    if h.contains_key(H_FORWARDED) {
        return None;
    }
    app.cfg.cluster.as_deref()
}

/// The id of the request `body` holds, if it is one (not a notification, response, GET).
fn request_id(method: &Method, body: &[u8]) -> Option<Box<serde_json::value::RawValue>> {
    if *method != Method::POST {
        return None;
    }
    let env = Envelope::parse(body).ok()?;
    if env.kind() != Ok(Kind::Request) {
        return None;
    }
    env.id.map(ToOwned::to_owned)
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
    let expect = request_id(&method, &body).map(|id| {
        let (metrics, server) = (app.metrics.clone(), app.server.clone());
        Expect {
            id,
            lost: Box::new(move || metrics.cluster_forward(&server, "owner_lost_midway")),
        }
    });
    let hop = Hop {
        method,
        path: &app.cfg.path,
        headers: h,
        body,
    };
    match c.client().forward(owner, hop, wait, expect).await {
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
    // The request's own id, so that its answer is the one it waits for.
    let rid = match id {
        Some(id) => Some(id.to_owned()),
        None => request_id(&method, &body).map(|r| r.get().to_owned()),
    };
    Some(match forward(app, c, &owner, method, h, body).await {
        Ok(r) => r,
        Err(()) => rpc_error(
            StatusCode::NOT_FOUND,
            rid.as_deref(),
            code::INVALID_REQUEST,
            &format!(
                "Session not found (the replica that held it is gone: {owner}): initialize again"
            ),
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
                &format!(
                    "cannot resume: the replica holding this call is gone ({owner}); call again"
                ),
                None,
            ),
        },
    )
}
