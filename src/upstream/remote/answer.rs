//! How the remote's answer to one POST is read, as pure functions over its parts: the status
//! and content type decide what the body is (`classify`), a JSON body must be one response
//! (`json_answer`, read within `--max-response` by `append_bounded`), and an event stream is
//! read item by item until the response to the bridge's id (`drain_sse`), with the
//! notifications and server requests met on the way collected for the caller.
//!
//! Pure so that the fuzz target (`fuzz/fuzz_targets/remote_answer.rs`, through
//! [`super::fuzzing`]) runs the very code `transport` runs, without a socket.

use bytes::{Bytes, BytesMut};
use http::StatusCode;

use super::fault::Fault;
use crate::call::CallEvent;
use crate::framing::{SseDecoder, SseItem};
use crate::jsonrpc::{self, Envelope, Kind};

/// What the head of the answer says the body is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// 202: nothing to read.
    Accepted,
    /// A successful `text/event-stream`.
    Stream,
    /// Anything else: read whole, bounded, as JSON.
    Body,
}

/// The head of an answer: auth refusals and an expired session are faults whatever the body;
/// an event stream must come with a success status.
pub(super) fn classify(
    status: StatusCode,
    content_type: &str,
    in_session: bool,
) -> Result<Head, Fault> {
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Err(Fault::Auth(status.as_u16()));
    }
    if status == StatusCode::NOT_FOUND && in_session {
        return Err(Fault::SessionGone);
    }
    if status == StatusCode::ACCEPTED {
        return Ok(Head::Accepted);
    }
    if content_type.starts_with("text/event-stream") {
        if !status.is_success() {
            return Err(Fault::Status(status.as_u16(), "(event stream)".into()));
        }
        return Ok(Head::Stream);
    }
    Ok(Head::Body)
}

/// Add a body chunk, refusing to hold more than `max` bytes.
pub(super) fn append_bounded(buf: &mut BytesMut, data: &[u8], max: usize) -> Result<(), Fault> {
    if buf.len() + data.len() > max {
        return Err(Fault::Oversize(buf.len() + data.len()));
    }
    buf.extend_from_slice(data);
    Ok(())
}

/// A whole JSON body: the response frame (None for an empty success), or the fault.
pub(super) fn json_answer(status: StatusCode, bytes: Bytes) -> Result<Option<Bytes>, Fault> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        if status.is_success() {
            return Ok(None);
        }
        return Err(Fault::Status(status.as_u16(), "(empty body)".into()));
    }
    match Envelope::parse(&bytes).and_then(|e| e.kind()) {
        Ok(Kind::Response) => Ok(Some(bytes)),
        _ if !status.is_success() => Err(Fault::Status(
            status.as_u16(),
            super::transport::snippet(&bytes),
        )),
        Ok(_) => Err(Fault::Malformed("expected a JSON-RPC response".into())),
        Err(e) => Err(Fault::Malformed(e.to_string())),
    }
}

/// Take the complete lines of a successful `application/json` body read so far: a server may
/// stream newline-delimited JSON-RPC messages there (notifications, then its response; the
/// conformance suite's reference server does, and keeps a `subscriptions/listen` open that
/// way), where one object is what the transport describes. A line that is a whole JSON-RPC
/// message is taken: a notification or server request is appended to `met`, a response is the
/// answer. The first line that is not a whole message (a pretty-printed object's `{`) stops
/// the scan and stays buffered, so a one-object body is still read whole, by `json_answer`.
pub(super) fn drain_json_lines(
    buf: &mut BytesMut,
    met: &mut Vec<CallEvent>,
) -> Result<Option<Bytes>, Fault> {
    loop {
        let Some(nl) = memchr::memchr(b'\n', buf) else {
            return Ok(None);
        };
        if buf[..nl].iter().all(|b| b.is_ascii_whitespace()) {
            let _ = buf.split_to(nl + 1);
            continue;
        }
        let line = Bytes::copy_from_slice(&buf[..nl]);
        let Ok(env) = Envelope::parse(&line) else {
            return Ok(None);
        };
        let event = match env.kind() {
            Ok(Kind::Response) => {
                let _ = buf.split_to(nl + 1);
                return Ok(Some(line.clone()));
            }
            Ok(Kind::Notification) => Some(CallEvent::Notification {
                method: env.method().to_owned(),
                params: env.params.map(ToOwned::to_owned),
            }),
            Ok(Kind::Request) => env.id.map(|id| CallEvent::ServerRequest {
                id: ToOwned::to_owned(id),
                method: env.method().to_owned(),
                params: env.params.map(ToOwned::to_owned),
            }),
            Err(_) => return Ok(None),
        };
        met.extend(event);
        let _ = buf.split_to(nl + 1);
    }
}

/// Feed `data` (the next piece of a successful `application/json` body) into `buf`, line by
/// line: each line is bounded by `max` with what is still buffered before it, then the
/// complete lines are taken ([`drain_json_lines`]). Cutting at every newline makes the outcome
/// the same however the body arrives in pieces (one piece or many): the fuzz target
/// `remote_answer` found a body that was too large whole but a malformed line in pieces.
pub(super) fn feed_json(
    buf: &mut BytesMut,
    data: &[u8],
    max: usize,
    met: &mut Vec<CallEvent>,
) -> Result<Option<Bytes>, Fault> {
    let mut rest = data;
    while !rest.is_empty() {
        let cut = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
        let (line, tail) = rest.split_at(cut);
        append_bounded(buf, line, max)?;
        if let Some(f) = drain_json_lines(buf, met)? {
            return Ok(Some(f));
        }
        rest = tail;
    }
    Ok(None)
}

/// What one SSE item is to the exchange.
#[derive(Debug)]
pub(super) enum SseAction {
    /// The response to the bridge's id.
    Answer(Bytes),
    /// A notification or server request for the caller.
    Event(CallEvent),
    /// A response for another id: dropped.
    Skip,
}

/// One SSE item: the response to `our_id`, an event for the caller, or nothing.
pub(super) fn sse_action(item: SseItem, our_id: Option<u64>) -> Result<SseAction, Fault> {
    let data = match item {
        SseItem::Event { data, .. } => data,
        SseItem::Oversize(n) => return Err(Fault::Oversize(n)),
        SseItem::Malformed => return Err(Fault::Malformed("the event stream is not UTF-8".into())),
    };
    let bytes = Bytes::from(data);
    let env = Envelope::parse(&bytes)
        .map_err(|e| Fault::Malformed(format!("SSE event is not a JSON-RPC message: {e}")))?;
    match env.kind() {
        Ok(Kind::Response) => {
            if our_id.is_some() && env.id.and_then(jsonrpc::minted_u64) == our_id {
                return Ok(SseAction::Answer(bytes.clone()));
            }
            tracing::debug!("dropping a response for an unknown id from the remote");
            Ok(SseAction::Skip)
        }
        Ok(Kind::Notification) => Ok(SseAction::Event(CallEvent::Notification {
            method: env.method().to_owned(),
            params: env.params.map(ToOwned::to_owned),
        })),
        Ok(Kind::Request) => Ok(match env.id {
            Some(id) => SseAction::Event(CallEvent::ServerRequest {
                id: ToOwned::to_owned(id),
                method: env.method().to_owned(),
                params: env.params.map(ToOwned::to_owned),
            }),
            None => SseAction::Skip,
        }),
        Err(e) => Err(Fault::Malformed(format!("SSE event: {e}"))),
    }
}

/// Take the decoder's complete items (and, at the end of the stream, what `finish` gives)
/// until the response to `our_id`; the events met on the way are appended to `met`, in order.
pub(super) fn drain_sse(
    dec: &mut SseDecoder,
    our_id: Option<u64>,
    end: bool,
    met: &mut Vec<CallEvent>,
) -> Result<Option<Bytes>, Fault> {
    loop {
        let item = match dec.next_item() {
            Some(i) => i,
            None if end => match dec.finish() {
                Some(i) => i,
                None => return Ok(None),
            },
            None => return Ok(None),
        };
        match sse_action(item, our_id)? {
            SseAction::Answer(frame) => return Ok(Some(frame)),
            SseAction::Event(ev) => met.push(ev),
            SseAction::Skip => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        let c = |s: u16, ct: &str, sess: bool| classify(StatusCode::from_u16(s).unwrap(), ct, sess);
        assert!(matches!(
            c(401, "text/event-stream", false),
            Err(Fault::Auth(401))
        ));
        assert!(matches!(c(404, "", true), Err(Fault::SessionGone)));
        assert_eq!(c(404, "application/json", false).unwrap(), Head::Body);
        assert_eq!(c(202, "", false).unwrap(), Head::Accepted);
        assert_eq!(
            c(200, "text/event-stream; charset=utf-8", false).unwrap(),
            Head::Stream
        );
        assert!(matches!(
            c(500, "text/event-stream", false),
            Err(Fault::Status(500, _))
        ));
    }

    #[test]
    fn sse_until_our_answer() {
        let mut d = SseDecoder::new(1024);
        d.push(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n");
        d.push(b"data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n");
        d.push(b"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\ndata: after\n\n");
        let mut met = Vec::new();
        let f = drain_sse(&mut d, Some(7), false, &mut met)
            .unwrap()
            .unwrap();
        assert_eq!(&f[..], br#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
        assert_eq!(met.len(), 1);
        assert!(matches!(
            drain_sse(&mut d, Some(7), true, &mut met),
            Err(Fault::Malformed(_))
        ));
    }

    #[test]
    fn json_lines_stream_events_then_the_answer() {
        let mut buf = BytesMut::new();
        let mut met = Vec::new();
        buf.extend_from_slice(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n{\"jsonrpc\"",
        );
        assert_eq!(drain_json_lines(&mut buf, &mut met).unwrap(), None);
        assert_eq!(met.len(), 1);
        buf.extend_from_slice(b":\"2.0\",\"id\":7,\"result\":{}}");
        // No newline yet: left for the end of the body.
        assert_eq!(drain_json_lines(&mut buf, &mut met).unwrap(), None);
        let frame = json_answer(StatusCode::OK, buf.split().freeze()).unwrap();
        assert!(frame.is_some());
        // A pretty-printed object is not split.
        let mut buf =
            BytesMut::from(&b"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {}\n}\n"[..]);
        let mut met = Vec::new();
        assert_eq!(drain_json_lines(&mut buf, &mut met).unwrap(), None);
        assert!(met.is_empty());
        assert!(json_answer(StatusCode::OK, buf.freeze()).unwrap().is_some());
    }

    #[test]
    fn bodies_are_bounded() {
        let mut b = BytesMut::new();
        append_bounded(&mut b, b"12345", 8).unwrap();
        assert!(matches!(
            append_bounded(&mut b, b"6789", 8),
            Err(Fault::Oversize(9))
        ));
        assert!(matches!(
            json_answer(StatusCode::OK, Bytes::from_static(b" \n")),
            Ok(None)
        ));
        assert!(matches!(
            json_answer(StatusCode::BAD_GATEWAY, Bytes::from_static(b"<html>")),
            Err(Fault::Status(502, _))
        ));
    }
}
