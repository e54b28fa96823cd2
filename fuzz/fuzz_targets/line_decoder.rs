//! The stdio line decoder (`framing::LineDecoder`), as a child's stdout or a host's stdin
//! feeds it. Input: byte 0 picks the line limit, bytes 1..3 seed the chunk splits, the rest
//! is the stream.
//!
//! Invariants: the stream fed in random chunks yields exactly the items it yields fed whole;
//! every frame is within the limit and holds no `\n`; an oversize line's head is its own
//! first bytes; frames, oversize lengths and terminators account for every byte of the stream.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mcp_bridge::framing::{Line, LineDecoder};
use tokio_util::codec::Decoder;

fn decode(max: usize, chunks: &[&[u8]]) -> Vec<Line> {
    let mut dec = LineDecoder::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        while let Ok(Some(l)) = dec.decode(&mut buf) {
            out.push(l);
        }
    }
    while let Ok(Some(l)) = dec.decode_eof(&mut buf) {
        out.push(l);
    }
    out
}

/// Cut `data` at pseudo-random points derived from `seed` (deterministic per input).
fn split(data: &[u8], seed: u16) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut s = u32::from(seed) | 1;
    while !rest.is_empty() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let n = (s as usize % 9).min(rest.len());
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
    let max = usize::from(data[0] % 64) + 1;
    let seed = u16::from_le_bytes([data[1], data[2]]);
    let stream = &data[3..];
    let whole = decode(max, &[stream]);
    let pieces = decode(max, &split(stream, seed));
    assert_eq!(whole, pieces, "chunking changed the lines");

    let mut accounted = 0usize;
    for l in &whole {
        match l {
            Line::Frame(f) => {
                assert!(f.len() <= max, "frame over the limit");
                assert!(!f.contains(&b'\n'));
                accounted += f.len();
            }
            Line::Oversize(n, head) => {
                assert!(*n > max, "oversize item within the limit");
                // The head is this line's own first bytes, never the lines behind it.
                assert!(head.len() <= mcp_bridge::framing::HEAD.min(max + 1));
                assert!(!head.contains(&b'\n'));
                accounted += n;
            }
        }
    }
    // Every byte is in a frame, skipped in an oversize line, or a terminator (`\n`, or the
    // `\r` of a `\r\n` that a frame lost).
    let newlines = stream.iter().filter(|b| **b == b'\n').count();
    let crs = stream.windows(2).filter(|w| w == b"\r\n").count();
    assert!(accounted + newlines <= stream.len());
    assert!(
        accounted + newlines + crs >= stream.len(),
        "bytes went missing"
    );
});
