//! Byte framing: newline-delimited JSON (stdio) and Server-Sent Events encoding and decoding
//! (HTTP).
//!
//! Pure: the line decoder is a `tokio_util` codec that turns an over-long line into an item
//! (`Line::Oversize`) instead of an error, so the lines behind it keep flowing. The SSE decoder
//! (`SseDecoder`, used by `connect`'s HTTP client) does the same for an over-long event.

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
            // `scanned` never passes the buffer (it is reset whenever the buffer is cleared);
            // the `min` keeps a slip from becoming a panic.
            let from = self.scanned.min(limit);
            match memchr::memchr(b'\n', &buf[from..limit]) {
                Some(rel) => {
                    let i = from + rel;
                    let mut line = buf.split_to(i + 1);
                    self.scanned = 0;
                    line.truncate(i);
                    if line.last() == Some(&b'\r') {
                        line.truncate(i - 1);
                    }
                    return Ok(Some(Line::Frame(line.freeze())));
                }
                None if buf.len() > self.max => {
                    // Over the limit with no newline in sight: start skipping. Only the first
                    // `max + 1` bytes are known to be this line's: the buffer may already hold
                    // the lines behind it (found by fuzz/fuzz_targets/line_decoder.rs).
                    self.head = Bytes::copy_from_slice(&buf[..HEAD.min(self.max + 1)]);
                    self.discarding = Some(0);
                    // What was scanned is being skipped: a stale offset into a buffer the
                    // skipping clears made the next call slice past its end (fuzz finding).
                    self.scanned = 0;
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

/// One item from an SSE stream (WHATWG `text/event-stream` parsing rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event: its `data` lines joined with `\n`, and the stream's last event id
    /// at the time of dispatch (None if the server never sent one).
    Event {
        event: Option<String>,
        data: String,
        id: Option<String>,
    },
    /// An event larger than the limit; its bytes were discarded. Holds its size.
    Oversize(usize),
    /// A line that is not UTF-8: the stream is malformed.
    Malformed,
}

/// Incremental SSE decoder: feed bytes with `push`, take items with `next_item`, then
/// `finish` at the end of the stream. Tracks `retry:` and the last event id (for resumption).
#[derive(Debug)]
pub struct SseDecoder {
    max: usize,
    buf: BytesMut,
    /// Where to resume looking for a line end in `buf`: bytes before it hold none, so a
    /// stream sent in small chunks is scanned once, not once per chunk.
    scanned: usize,
    /// The current line outgrew the limit before its end arrived: its bytes are dropped as
    /// they come (counted in `size`), so an endless line cannot grow `buf`.
    skipping_line: bool,
    /// Skip a `\n` at the start of the next chunk (the previous one ended in `\r`).
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// Bytes of the event being assembled, or `Some` when skipping an oversize event.
    size: usize,
    discarding: bool,
    malformed: bool,
    pub last_event_id: Option<String>,
    /// Reconnection delay the server asked for, in milliseconds.
    pub retry_ms: Option<u64>,
}

impl SseDecoder {
    pub fn new(max_event: usize) -> Self {
        Self {
            max: max_event.max(1),
            buf: BytesMut::new(),
            scanned: 0,
            skipping_line: false,
            skip_lf: false,
            event: None,
            data: String::new(),
            has_data: false,
            size: 0,
            discarding: false,
            malformed: false,
            last_event_id: None,
            retry_ms: None,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let mut chunk = chunk;
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete item, if the buffered bytes hold one.
    pub fn next_item(&mut self) -> Option<SseItem> {
        loop {
            if self.skipping_line {
                let Some(i) = memchr::memchr2(b'\n', b'\r', &self.buf) else {
                    self.size += self.buf.len();
                    self.buf.clear();
                    return None;
                };
                // The same count `line` would have made for the whole line and its end.
                self.size += i + 1;
                self.skipping_line = false;
                self.end_line(i);
                continue;
            }
            let from = self.scanned.min(self.buf.len());
            let Some(rel) = memchr::memchr2(b'\n', b'\r', &self.buf[from..]) else {
                if self.buf.len() > self.max {
                    // Already over the limit without its end: the event is oversize, as
                    // `line` would find once the end came. Drop what is here.
                    self.size += self.buf.len();
                    self.buf.clear();
                    self.discarding = true;
                    self.data = String::new();
                    self.skipping_line = true;
                    self.scanned = 0;
                    return None;
                }
                self.scanned = self.buf.len();
                return None;
            };
            let i = from + rel;
            let line = self.end_line(i);
            if let Some(item) = self.line(&line[..i]) {
                return Some(item);
            }
        }
    }

    /// Take the line ending at `buf[i]` (a `\r` or `\n`) with its terminator, and the `\n`
    /// of a `\r\n` pair, here or at the start of the next chunk.
    fn end_line(&mut self, i: usize) -> BytesMut {
        let line = self.buf.split_to(i + 1);
        self.scanned = 0;
        if line[i] == b'\r' {
            if self.buf.first() == Some(&b'\n') {
                let _ = self.buf.split_to(1);
            } else if self.buf.is_empty() {
                self.skip_lf = true;
            }
        }
        line
    }

    /// End of stream: an unterminated last line is processed, but an event without its
    /// closing blank line is discarded (as the SSE spec says).
    pub fn finish(&mut self) -> Option<SseItem> {
        self.scanned = 0;
        if std::mem::take(&mut self.skipping_line) {
            self.buf.clear();
        }
        if !self.buf.is_empty() {
            let rest = self.buf.split();
            if let Some(item) = self.line(&rest) {
                return Some(item);
            }
        }
        let was_discarding = std::mem::take(&mut self.discarding);
        let malformed = std::mem::take(&mut self.malformed);
        self.reset_event();
        (was_discarding && !malformed).then_some(SseItem::Oversize(0))
    }

    fn reset_event(&mut self) {
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.size = 0;
    }

    fn line(&mut self, line: &[u8]) -> Option<SseItem> {
        if line.is_empty() {
            if self.discarding {
                self.discarding = false;
                let size = self.size;
                let malformed = std::mem::take(&mut self.malformed);
                self.reset_event();
                return (!malformed).then_some(SseItem::Oversize(size));
            }
            // An event whose data is empty is not dispatched (a 2025 priming event).
            if !self.has_data || self.data.is_empty() {
                self.reset_event();
                return None;
            }
            let item = SseItem::Event {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
                id: self.last_event_id.clone(),
            };
            self.reset_event();
            return Some(item);
        }
        self.size += line.len() + 1;
        if self.discarding {
            return None;
        }
        if self.size > self.max {
            self.discarding = true;
            self.data = String::new();
            return None;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            self.discarding = true;
            self.malformed = true;
            return Some(SseItem::Malformed);
        };
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.last_event_id = Some(value.to_owned()),
            "retry" => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sse_all(d: &mut SseDecoder, chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(i) = d.next_item() {
                out.push(i);
            }
        }
        while let Some(i) = d.finish() {
            out.push(i);
        }
        out
    }

    fn ev(data: &str, id: Option<&str>) -> SseItem {
        SseItem::Event {
            event: Some("message".into()),
            data: data.into(),
            id: id.map(Into::into),
        }
    }

    #[test]
    fn sse_decode_basic_ids_retry_comments() {
        let mut d = SseDecoder::new(1024);
        let out = sse_all(
            &mut d,
            &[
                b"id: p1\nretry: 1500\ndata:\n\n: keep-alive\n\n",
                b"event: message\ndata: {\"a\":1}\n\nid: 7\r\nevent: message\r\ndata: x\r\ndata: y\r\n\r\n",
            ],
        );
        assert_eq!(
            out,
            vec![ev("{\"a\":1}", Some("p1")), ev("x\ny", Some("7"))]
        );
        assert_eq!(d.retry_ms, Some(1500));
        assert_eq!(d.last_event_id.as_deref(), Some("7"));
    }

    #[test]
    fn sse_decode_split_crlf_and_unterminated_event() {
        let mut d = SseDecoder::new(1024);
        let out = sse_all(&mut d, &[b"data: a\r", b"\n\r", b"\ndata: lost\n"]);
        assert_eq!(
            out,
            vec![SseItem::Event {
                event: None,
                data: "a".into(),
                id: None
            }]
        );
    }

    #[test]
    fn sse_decode_oversize_and_malformed() {
        let mut d = SseDecoder::new(16);
        let out = sse_all(
            &mut d,
            &[b"data: 0123456789abcdef\ndata: more\n\ndata: ok\n\ndata: \xff\n\ndata: z\n\n"],
        );
        assert_eq!(out.len(), 4, "{out:?}");
        assert!(matches!(out[0], SseItem::Oversize(n) if n > 16));
        assert_eq!(
            out[1],
            SseItem::Event {
                event: None,
                data: "ok".into(),
                id: None
            }
        );
        assert_eq!(out[2], SseItem::Malformed);
        assert_eq!(
            out[3],
            SseItem::Event {
                event: None,
                data: "z".into(),
                id: None
            }
        );
    }

    #[test]
    fn sse_endless_line_is_dropped_as_it_comes_and_the_stream_goes_on() {
        let mut d = SseDecoder::new(64);
        d.push(b"data: ");
        for _ in 0..10_000 {
            d.push(&[b'x'; 100]);
            assert_eq!(d.next_item(), None);
            assert!(
                d.buf.len() <= 100 + 64,
                "the buffer grew to {}",
                d.buf.len()
            );
        }
        d.push(b"\r");
        d.push(b"\n\ndata: ok\n\n");
        let out: Vec<_> = std::iter::from_fn(|| d.next_item()).collect();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], SseItem::Oversize(6 + 1_000_000 + 1));
        assert_eq!(
            out[1],
            SseItem::Event {
                event: None,
                data: "ok".into(),
                id: None
            }
        );
    }

    #[test]
    fn sse_roundtrip_with_encoder() {
        let mut d = SseDecoder::new(1024);
        let mut bytes = sse_event(b"{\"x\":\n2}").to_vec();
        bytes.extend_from_slice(&sse_event_with_id("s-1", b"{}"));
        let out = sse_all(&mut d, &[&bytes]);
        assert_eq!(out, vec![ev("{\"x\": 2}", None), ev("{}", Some("s-1"))]);
    }

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
                Line::Oversize(10, Bytes::from_static(b"01234")),
                Line::Frame(Bytes::from_static(b"next")),
            ]
        );
    }

    #[test]
    fn oversize_head_holds_only_its_own_line() {
        // fuzz/line_decoder: fed whole, the head took the lines behind the long one too,
        // where the child's oversize-response check could read another response's id.
        let whole = decode_all(&mut LineDecoder::new(4), &[b"0123456\n{\"id\":5}\n"]);
        let split = decode_all(&mut LineDecoder::new(4), &[b"0123", b"456\n{\"id\":5}\n"]);
        assert_eq!(whole, split);
        assert_eq!(whole[0], Line::Oversize(7, Bytes::from_static(b"01234")));
    }

    #[test]
    fn oversize_at_eof_after_a_partial_line_does_not_panic() {
        // fuzz/line_decoder: a partial line (scanned 3), then more bytes past the limit with
        // no newline, then EOF: the skipping cleared the buffer but kept the offset, and the
        // next decode_eof sliced past the end of the empty buffer (a panic in the reader).
        let out = decode_all(&mut LineDecoder::new(4), &[b"abc", b"defgh"]);
        assert_eq!(out, vec![Line::Oversize(8, Bytes::from_static(b"abcde"))]);
    }

    #[test]
    fn sse_never_splits() {
        let e = sse_event(b"{\"a\":\r\n1}");
        assert_eq!(&e[..], b"event: message\ndata: {\"a\":  1}\n\n");
    }

    proptest! {
        #[test]
        fn sse_any_split_same_events(n in 0usize..8, cuts in proptest::collection::vec(0usize..400, 0..8), crlf in any::<bool>()) {
            let nl = if crlf { "\r\n" } else { "\n" };
            let mut stream = String::new();
            for i in 0..n { stream.push_str(&format!("id: {i}{nl}data: {{\"n\":{i}}}{nl}{nl}")); }
            let bytes = stream.as_bytes();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut prev = 0;
            for p in points { chunks.push(&bytes[prev..p]); prev = p; }
            chunks.push(&bytes[prev..]);
            let mut d = SseDecoder::new(1024);
            let out = sse_all(&mut d, &chunks);
            prop_assert_eq!(out.len(), n);
        }

        #[test]
        fn sse_random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048), max in 1usize..64) {
            let mut d = SseDecoder::new(max);
            let _ = sse_all(&mut d, &[&data]);
        }
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
