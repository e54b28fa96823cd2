//! The hop to the replica that owns a request: the request goes on as it came (method, path,
//! headers, body; `Authorization` included, so the owner authenticates it again), marked
//! with [`H_FORWARDED`](super::H_FORWARDED), and the owner's answer streams back unchanged:
//! JSON, an SSE stream with its progress, server requests and keep-alives, or an error.
//!
//! A plain reverse-proxy hop rather than a call on a remote upstream: what is forwarded is a
//! 2025 session's traffic (its POSTs, GET stream, DELETE) or a retry of a parked call, which
//! only the owner can interpret, so translating it here would only repeat the owner's work.
//! Dropping the answer (the client hung up) drops the hop's connection, and the owner sees
//! the hang-up as if the client had been its own.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;

use crate::http_util::Body;

/// How long the hop may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1), and
/// the length, which the new body sets.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::CONTENT_LENGTH,
];

/// The client of the hops (plain HTTP, or TLS with webpki roots and `--cluster-ca-file`; a
/// pool of connections).
pub struct Client {
    http: crate::oauth::http::Https,
}

/// Why a hop got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HopError {
    #[error("{0}: {1}")]
    Unreachable(String, String),
    #[error("{0}: no answer within {1} s")]
    Timeout(String, u64),
}

impl Client {
    /// The client, trusting `ca_file`'s certificates besides the webpki roots.
    pub fn new(ca_file: Option<&std::path::Path>) -> Result<Self, String> {
        let http = crate::upstream::remote::https_client(false, ca_file, CONNECT_TIMEOUT)
            .map_err(|e| e.replace("--ca-file", "--cluster-ca-file"))?;
        Ok(Self { http })
    }

    /// Send `method path` with `headers` and `body` to `owner` (`scheme://host:port`) and
    /// return its answer as the bridge's own response, the body streamed. `head_wait` bounds
    /// the wait for the answer's head (a stream's body has the owner's own bounds).
    pub async fn forward(
        &self,
        owner: &str,
        method: Method,
        path: &str,
        headers: &HeaderMap,
        body: Bytes,
        head_wait: Duration,
    ) -> Result<Response<Body>, HopError> {
        let uri = format!("{owner}{path}");
        let mut req = Request::builder()
            .method(method)
            .uri(&uri)
            .body(Full::new(body))
            .map_err(|e| HopError::Unreachable(owner.to_owned(), e.to_string()))?;
        let h = req.headers_mut();
        for (k, v) in headers {
            if !HOP_BY_HOP.contains(k) {
                h.append(k.clone(), v.clone());
            }
        }
        h.insert(super::H_FORWARDED, HeaderValue::from_static("1"));
        let answer = match tokio::time::timeout(head_wait, self.http.request(req)).await {
            Err(_) => return Err(HopError::Timeout(owner.to_owned(), head_wait.as_secs())),
            Ok(Err(e)) => {
                let detail = crate::upstream::remote::error_chain(&e);
                return Err(HopError::Unreachable(owner.to_owned(), detail));
            }
            Ok(Ok(r)) => r,
        };
        let (mut parts, incoming) = answer.into_parts();
        for k in &HOP_BY_HOP {
            parts.headers.remove(k);
        }
        Ok(Response::from_parts(parts, stream_body(incoming)))
    }
}

/// The owner's body as the bridge's: frames as they come; a broken hop ends the body (the
/// client then sees a stream that ended without its answer, as it would from the owner).
fn stream_body(incoming: Incoming) -> Body {
    let frames = futures_util::stream::unfold(incoming, |mut b| async move {
        match b.frame().await {
            Some(Ok(f)) => Some((Ok::<_, Infallible>(f), b)),
            Some(Err(e)) => {
                tracing::debug!("the hop to the owning replica broke: {e}");
                None
            }
            None => None,
        }
    });
    BodyExt::boxed_unsync(StreamBody::new(frames))
}
