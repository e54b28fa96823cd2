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
//!
//! Every request that enters gets exactly one answer, even when the owner dies mid-answer:
//! for a request (an [`Expect`]) whose SSE answer breaks before the final response to its id
//! went through, the hop appends a JSON-RPC error naming the lost owner; a JSON answer keeps
//! the owner's `Content-Length`, so a body cut short is a transport failure at the client,
//! never a shorter clean body.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::value::RawValue;

use crate::framing::{sse_event, SseDecoder, SseItem};
use crate::http_util::Body;
use crate::jsonrpc::{self, code, Envelope, Kind};

/// How long the hop may take to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest SSE event of an answer the hop looks into for the final response; a larger
/// one is taken for it (a final answer is what grows large, not a notification).
const MAX_EVENT: usize = 16 << 20;

/// Headers that belong to one connection, not to the request (RFC 9110 section 7.6.1), and
/// the length, which the new body sets (a request's; an answer keeps the owner's).
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

/// One request as it came: `method path` with `headers` and `body`.
pub struct Hop<'a> {
    pub method: Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
}

/// What the answer to a forwarded request must carry: the final response to `id` (the
/// request's id). Should the hop break before that went through, the client gets a JSON-RPC
/// error naming the owner instead, and `lost` is called (once).
pub struct Expect {
    pub id: Box<RawValue>,
    pub lost: Box<dyn FnOnce() + Send>,
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

    /// Send `hop` to `owner` (`scheme://host:port`) and return its answer as the bridge's own
    /// response, the body streamed. `head_wait` bounds the wait for the answer's head (a
    /// stream's body has the owner's own bounds).
    pub async fn forward(
        &self,
        owner: &str,
        hop: Hop<'_>,
        head_wait: Duration,
        expect: Option<Expect>,
    ) -> Result<Response<Body>, HopError> {
        let Hop {
            method,
            path,
            headers,
            body,
        } = hop;
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
            if *k != header::CONTENT_LENGTH {
                parts.headers.remove(k);
            }
        }
        let sse = parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| {
            v.as_bytes()
                .to_ascii_lowercase()
                .starts_with(b"text/event-stream")
        });
        let watch = expect
            .filter(|_| sse && !parts.headers.contains_key(header::CONTENT_LENGTH))
            .map(|e| Watch::new(e, owner));
        Ok(Response::from_parts(parts, stream_body(incoming, watch)))
    }
}

/// An SSE answer watched for the final response to the request's id.
struct Watch {
    want: serde_json::Value,
    id: Box<RawValue>,
    owner: String,
    sse: SseDecoder,
    answered: bool,
    lost: Option<Box<dyn FnOnce() + Send>>,
}

impl Watch {
    fn new(e: Expect, owner: &str) -> Self {
        Self {
            want: serde_json::from_str(e.id.get()).unwrap_or(serde_json::Value::Null),
            id: e.id,
            owner: owner.to_owned(),
            sse: SseDecoder::new(MAX_EVENT),
            answered: false,
            lost: Some(e.lost),
        }
    }

    /// Look at the bytes the client is sent; true once the final answer is among them.
    fn saw(&mut self, chunk: &[u8]) {
        if self.answered {
            return;
        }
        self.sse.push(chunk);
        while let Some(item) = self.sse.next_item() {
            let answer = match item {
                SseItem::Event { data, .. } => is_answer(data.as_bytes(), &self.want),
                SseItem::Oversize(_) => true,
                SseItem::Malformed => false,
            };
            if answer {
                self.answered = true;
                // Nothing more to look for: the decoder's buffer goes.
                self.sse = SseDecoder::new(1);
                return;
            }
        }
    }

    /// The hop broke: the event that answers in the owner's place, unless it had answered.
    fn broke(&mut self) -> Option<Bytes> {
        if self.answered {
            return None;
        }
        // Answered now: once.
        self.answered = true;
        if let Some(lost) = self.lost.take() {
            lost();
        }
        tracing::warn!(
            "the replica {} was lost before answering a forwarded request: answering with an error",
            self.owner
        );
        let msg = format!(
            "the replica that owned this request ({}) was lost before it answered",
            self.owner
        );
        let data = serde_json::json!({ "reason": "owner_lost", "replica": self.owner });
        let frame = jsonrpc::error(
            Some(self.id.get()),
            code::UPSTREAM_UNAVAILABLE,
            &msg,
            Some(&data),
        );
        Some(sse_event(&frame))
    }
}

/// Is `data` a JSON-RPC response to the request with id `want`?
fn is_answer(data: &[u8], want: &serde_json::Value) -> bool {
    let Ok(env) = Envelope::parse(data) else {
        return false;
    };
    env.kind() == Ok(Kind::Response)
        && env
            .id
            .and_then(|id| serde_json::from_str::<serde_json::Value>(id.get()).ok())
            .is_some_and(|id| id == *want)
}

/// The owner's body as the bridge's: frames as they come. A broken hop ends the body, after
/// the error event that answers a watched request which had no answer yet.
fn stream_body(incoming: Incoming, watch: Option<Watch>) -> Body {
    let frames = futures_util::stream::unfold(Some((incoming, watch)), |state| async move {
        let (mut b, mut watch) = state?;
        match b.frame().await {
            Some(Ok(f)) => {
                if let (Some(w), Some(d)) = (watch.as_mut(), f.data_ref()) {
                    w.saw(d);
                }
                Some((Ok::<_, Infallible>(f), Some((b, watch))))
            }
            Some(Err(e)) => {
                tracing::debug!("the hop to the owning replica broke: {e}");
                let last = watch.as_mut().and_then(Watch::broke)?;
                Some((Ok(Frame::data(last)), None))
            }
            None => None,
        }
    });
    BodyExt::boxed_unsync(StreamBody::new(frames))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn watch(id: &str) -> (Watch, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        let e = Expect {
            id: jsonrpc::raw(id),
            lost: Box::new(move || {
                m.fetch_add(1, Ordering::SeqCst);
            }),
        };
        (Watch::new(e, "http://10.0.0.1:8080"), n)
    }

    #[test]
    fn a_break_before_the_answer_answers_once_naming_the_owner() {
        let (mut w, lost) = watch(r#""a""#);
        // Progress, a server request with the same id, another id's answer: not it.
        w.saw(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n");
        w.saw(b"data: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"sampling/createMessage\"}\n\n: keep-alive\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"b\",");
        w.saw(b"\"result\":{}}\n\n");
        let ev = w.broke().unwrap_or_default();
        let ev = String::from_utf8_lossy(&ev);
        let data = ev
            .strip_prefix("event: message\ndata: ")
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(data.trim_end()).unwrap_or_default();
        assert_eq!(v["id"], "a", "{ev}");
        assert_eq!(v["error"]["code"], code::UPSTREAM_UNAVAILABLE);
        assert_eq!(v["error"]["data"]["replica"], "http://10.0.0.1:8080");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("http://10.0.0.1:8080")));
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert!(w.broke().is_none(), "answered twice");
        assert_eq!(lost.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_break_after_the_answer_adds_nothing() {
        // The id as sent (a number, spaced), its answer split across chunks.
        let (mut w, lost) = watch("7");
        w.saw(b"data: {\"jsonrpc\":\"2.0\", \"id\": 7, \"err");
        w.saw(b"or\":{\"code\":-1,\"message\":\"x\"}}\r\n\r\n");
        assert!(w.broke().is_none());
        assert_eq!(lost.load(Ordering::SeqCst), 0);
    }
}
