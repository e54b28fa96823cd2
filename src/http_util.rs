//! The HTTP response body type and the few plain response builders that both the faces and the
//! auth hook answer with (JSON, status-only, empty).
//!
//! It sits below both `face` and `auth` so that auth can answer (401/403, metadata, CORS
//! preflight) without importing the face, which itself calls auth's hook: the dependency points
//! one way, face -> auth -> http_util. Nothing here knows MCP or JSON-RPC;
//! `face::respond` re-exports these for the face's own code.

use std::convert::Infallible;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};

/// Every response body the bridge serves: a whole buffer or a stream, never failing.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A JSON response.
pub fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn status_only(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(empty());
    *r.status_mut() = status;
    r
}
