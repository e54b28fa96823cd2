//! The SSE decoder (`framing::SseDecoder`) that reads a remote server's event streams, and
//! the encoder (`framing::sse_event`) the HTTP face writes them with.
//!
//! Input: byte 0 picks the event size limit, bytes 1..3 seed the chunk splits, the rest is
//! the stream.
//!
//! Invariants: the stream split anywhere yields the same items, last event id and retry as
//! fed whole; no dispatched event's data exceeds the limit; an event the encoder wrote decodes
//! to the frame it carried (made single-line), with its id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_bridge::framing::{self, SseDecoder, SseItem};

struct Run {
    items: Vec<SseItem>,
    last_id: Option<String>,
    retry: Option<u64>,
}

fn decode(max: usize, chunks: &[&[u8]]) -> Run {
    let mut d = SseDecoder::new(max);
    let mut items = Vec::new();
    for c in chunks {
        d.push(c);
        while let Some(i) = d.next_item() {
            items.push(i);
        }
    }
    while let Some(i) = d.finish() {
        items.push(i);
    }
    Run {
        items,
        last_id: d.last_event_id,
        retry: d.retry_ms,
    }
}

fn split(data: &[u8], seed: u16) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut s = u32::from(seed) | 1;
    while !rest.is_empty() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let n = (s as usize % 7).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let max = usize::from(data[0]) * 4 + 1;
    let seed = u16::from_le_bytes([data[1], data[2]]);
    let stream = &data[3..];
    let whole = decode(max, &[stream]);
    let pieces = decode(max, &split(stream, seed));
    assert_eq!(whole.items, pieces.items, "chunking changed the events");
    assert_eq!(whole.last_id, pieces.last_id);
    assert_eq!(whole.retry, pieces.retry);
    for i in &whole.items {
        if let SseItem::Event { data, .. } = i {
            assert!(data.len() <= max, "event over the limit dispatched");
            assert!(!data.is_empty());
        }
    }

    // What the face encodes, the client decodes.
    if let Ok(frame) = std::str::from_utf8(stream) {
        if frame.is_empty() {
            return;
        }
        let want = String::from_utf8(framing::single_line(frame.as_bytes()).to_vec())
            .expect("single_line keeps UTF-8");
        let mut bytes = framing::sse_event_with_id("s-1", frame.as_bytes()).to_vec();
        bytes.extend_from_slice(framing::SSE_KEEPALIVE);
        bytes.extend_from_slice(&framing::sse_event(frame.as_bytes()));
        let got = decode(usize::MAX / 2, &split(&bytes, seed));
        let ev = |id: &str| SseItem::Event {
            event: Some("message".into()),
            data: want.clone(),
            id: Some(id.into()),
        };
        assert_eq!(got.items, vec![ev("s-1"), ev("s-1")]);
    }
});
