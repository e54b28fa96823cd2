//! The remote upstream's handling of an answer to a POST (`upstream::remote`'s `answer`
//! functions through `upstream::remote::fuzzing::read_answer`): status and content type, then
//! a JSON body or an event stream, into the response frame for the call, the events met on
//! the way, or a fault.
//!
//! Input: byte 0 picks the status, byte 1 the content type, the 2025 session flag and the
//! bridge's id, bytes 2..4 seed the body's chunk splits, the rest is the body.
//!
//! Invariants: the body split anywhere gives the same outcome and events as sent whole; a
//! frame handed to the call is a JSON-RPC response (from a stream: for the bridge's id, and
//! within `--max-response`); 401/403 are auth faults whatever the body; only a stream has
//! events, and a forwarded server request has an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_bridge::call::CallEvent;
use mcp_bridge::jsonrpc::{self, Envelope, Kind};
use mcp_bridge::upstream::remote::fuzzing::{read_answer, Read};

const STATUSES: [u16; 12] = [200, 202, 204, 400, 401, 403, 404, 405, 429, 500, 502, 99];
const TYPES: [&str; 5] = [
    "application/json",
    "text/event-stream",
    "text/event-stream; charset=utf-8",
    "text/html",
    "",
];

fn split(data: &[u8], seed: u16) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut s = u32::from(seed) | 1;
    while !rest.is_empty() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let n = (s as usize % 11).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}

fn summary(r: &Read) -> String {
    format!("{:?} {:?} {:?}", r.frame, r.events, r.fault)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let status = STATUSES[usize::from(data[0]) % STATUSES.len()];
    let ct = TYPES[usize::from(data[1]) % TYPES.len()];
    let in_session = data[1] & 0x08 != 0;
    let our_id = (data[1] & 0x10 != 0).then_some(u64::from(data[1] >> 5));
    let seed = u16::from_le_bytes([data[2], data[3]]);
    let body = &data[4..];
    let max = 512;

    let whole = read_answer(status, ct, in_session, our_id, &[body], max);
    let pieces = read_answer(status, ct, in_session, our_id, &split(body, seed), max);
    assert_eq!(
        summary(&whole),
        summary(&pieces),
        "chunking changed the outcome"
    );

    if status == 401 || status == 403 {
        assert!(matches!(whole.fault, Some("unauthorized" | "forbidden")));
        assert!(whole.frame.is_none() && whole.events.is_empty());
    }
    let stream = ct.starts_with("text/event-stream");
    if let Some(f) = &whole.frame {
        assert!(whole.fault.is_none());
        let env = Envelope::parse(f).expect("a frame handed to the call parses");
        assert_eq!(env.kind(), Ok(Kind::Response));
        if stream {
            assert_eq!(
                env.id.and_then(jsonrpc::minted_u64),
                our_id,
                "a stream answered another id"
            );
            assert!(f.len() <= max);
        } else {
            assert!(f.len() <= max, "a body over --max-response was read");
        }
    }
    if !stream {
        assert!(whole.events.is_empty(), "a JSON body produced events");
    }
    for ev in &whole.events {
        if let CallEvent::ServerRequest { id, .. } = ev {
            assert_ne!(id.get(), "null", "a request without an id was forwarded");
        }
    }
});
