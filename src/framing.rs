//! Byte framing: newline-delimited JSON (stdio) and Server-Sent Events encoding (HTTP).
//!
//! Pure: the line decoder is a `tokio_util` codec that turns an over-long line into an item
//! (`Line::Oversize`) instead of an error, so the lines behind it keep flowing.

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// One item from a newline-delimited stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its terminator (`\n` or `\r\n`). May be empty.
    Frame(Bytes),
    /// A line longer than the limit; its bytes were discarded. Holds its length and its first
    /// bytes (up to `HEAD`), enough to find the id of an over-long response.
    Oversize(usize, Bytes),
}

/// How much of an over-long line is kept.
pub const HEAD: usize = 256;

/// Newline decoder with a length limit.
#[derive(Debug)]
pub struct LineDecoder {
    max: usize,
    /// Where to resume scanning for `\n` in the buffer.
    scanned: usize,
    /// Bytes discarded so far while skipping an oversize line.
    discarding: Option<usize>,
    /// The first bytes of the line being skipped.
    head: Bytes,
}

impl LineDecoder {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            scanned: 0,
            discarding: None,
            head: Bytes::new(),
        }
    }
}

impl Decoder for LineDecoder {
    type Item = Line;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, Self::Error> {
        loop {
            if let Some(skipped) = self.discarding {
                match memchr::memchr(b'\n', buf) {
                    Some(i) => {
                        let _ = buf.split_to(i + 1);
                        self.discarding = None;
                        self.scanned = 0;
                        let head = std::mem::take(&mut self.head);
                        return Ok(Some(Line::Oversize(skipped + i, head)));
                    }
                    None => {
                        self.discarding = Some(skipped + buf.len());
                        buf.clear();
                        return Ok(None);
                    }
                }
            }
            let limit = buf.len().min(self.max + 1);
            match memchr::memchr(b'\n', &buf[self.scanned..limit]) {
                Some(rel) => {
                    let i = self.scanned + rel;
                    let mut line = buf.split_to(i + 1);
                    self.scanned = 0;
                    line.truncate(i);
                    if line.last() == Some(&b'\r') {
                        line.truncate(i - 1);
                    }
                    return Ok(Some(Line::Frame(line.freeze())));
                }
                None if buf.len() > self.max => {
                    // Over the limit with no newline in sight: start skipping.
                    self.head = Bytes::copy_from_slice(&buf[..HEAD.min(buf.len())]);
                    self.discarding = Some(0);
                    continue;
                }
                None => {
                    self.scanned = buf.len();
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, Self::Error> {
        if let Some(line) = self.decode(buf)? {
            return Ok(Some(line));
        }
        if let Some(skipped) = self.discarding.take() {
            let head = std::mem::take(&mut self.head);
            return Ok(Some(Line::Oversize(skipped, head)));
        }
        if buf.is_empty() {
            return Ok(None);
        }
        self.scanned = 0;
        let line = buf.split().freeze();
        Ok(Some(Line::Frame(line)))
    }
}

/// Make a JSON frame safe to embed in one SSE `data:` line or one stdio line: a raw CR or LF in
/// valid JSON can only be insignificant whitespace, so replace them with spaces.
pub fn single_line(frame: &[u8]) -> Bytes {
    if memchr::memchr2(b'\r', b'\n', frame).is_none() {
        return Bytes::copy_from_slice(frame);
    }
    Bytes::from(
        frame
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect::<Vec<u8>>(),
    )
}

/// Encode one SSE `message` event carrying a JSON frame.
pub fn sse_event(frame: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(frame.len() + 24);
    out.put_slice(b"event: message\ndata: ");
    if memchr::memchr2(b'\r', b'\n', frame).is_none() {
        out.put_slice(frame);
    } else {
        out.put_slice(&single_line(frame));
    }
    out.put_slice(b"\n\n");
    out.freeze()
}

/// Encode an SSE event with an id (for resumable 2025 streams) carrying a JSON frame.
pub fn sse_event_with_id(id: &str, frame: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(frame.len() + 32 + id.len());
    out.put_slice(b"id: ");
    out.put_slice(id.as_bytes());
    out.put_slice(b"\nevent: message\ndata: ");
    out.put_slice(&single_line(frame));
    out.put_slice(b"\n\n");
    out.freeze()
}

/// An SSE comment used as a keep-alive.
pub const SSE_KEEPALIVE: &[u8] = b": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(dec: &mut LineDecoder, chunks: &[&[u8]]) -> Vec<Line> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for c in chunks {
            buf.extend_from_slice(c);
            while let Some(l) = dec.decode(&mut buf).unwrap() {
                out.push(l);
            }
        }
        while let Some(l) = dec.decode_eof(&mut buf).unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn lines_and_crlf() {
        let mut d = LineDecoder::new(100);
        let out = decode_all(&mut d, &[b"a\r\nbb\n", b"c"]);
        assert_eq!(
            out,
            vec![
                Line::Frame(Bytes::from_static(b"a")),
                Line::Frame(Bytes::from_static(b"bb")),
                Line::Frame(Bytes::from_static(b"c")),
            ]
        );
    }

    #[test]
    fn oversize_is_an_item_and_does_not_stall() {
        let mut d = LineDecoder::new(4);
        let out = decode_all(&mut d, &[b"ok\n0123456", b"789\nnext\n"]);
        assert_eq!(
            out,
            vec![
                Line::Frame(Bytes::from_static(b"ok")),
                Line::Oversize(10, Bytes::from_static(b"0123456")),
                Line::Frame(Bytes::from_static(b"next")),
            ]
        );
    }

    #[test]
    fn sse_never_splits() {
        let e = sse_event(b"{\"a\":\r\n1}");
        assert_eq!(&e[..], b"event: message\ndata: {\"a\":  1}\n\n");
    }

    proptest! {
        #[test]
        fn any_split_gives_same_frames(lines in proptest::collection::vec("[a-z{}\":,0-9 ]{0,40}", 0..20), cuts in proptest::collection::vec(0usize..2000, 0..10)) {
            let mut stream = Vec::new();
            for l in &lines { stream.extend_from_slice(l.as_bytes()); stream.push(b'\n'); }
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            points.sort();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut prev = 0;
            for p in points { chunks.push(&stream[prev..p]); prev = p; }
            chunks.push(&stream[prev..]);
            let mut d = LineDecoder::new(64);
            let out = decode_all(&mut d, &chunks);
            let want: Vec<Line> = lines.iter().map(|l| Line::Frame(Bytes::copy_from_slice(l.as_bytes()))).collect();
            prop_assert_eq!(out, want);
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096), max in 1usize..64) {
            let mut d = LineDecoder::new(max);
            let out = decode_all(&mut d, &[&data]);
            for l in out {
                if let Line::Frame(f) = l {
                    prop_assert!(f.len() <= max);
                    let _ = crate::jsonrpc::Envelope::parse(&f);
                }
            }
        }
    }
}
