//! Which HTTP version a new connection speaks, decided before hyper reads a byte of it: from
//! the first bytes of a plain connection (peeked, so they stay in the socket) or from the
//! protocol a TLS connection negotiated (ALPN).
//!
//! Why not let hyper-util's auto builder decide: it reads the first 24 bytes itself and gives
//! them back through a rewind buffer. hyper's HTTP/1 reader then takes those 24 bytes into an
//! 8 KB buffer and, on its next read, reserves 8 KB more: the buffer's `Vec` doubles to 16 KB
//! and keeps that size for the life of the connection. Started as HTTP/1 directly, the buffer
//! stays at 8 KB: 8 KB less per open SSE stream (benches/RESULTS.md, "2026-12-01 (b)").
//! Whatever this cannot tell (nothing sent yet, a preface cut short, TLS without ALPN) goes to
//! the auto builder as before, so every connection is served as it was.

use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection was found to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Http1,
    Http2,
    /// Not known yet: the auto builder reads the version itself.
    Unknown,
}

/// The protocol of a connection whose first bytes are `first`.
pub fn from_first_bytes(first: &[u8]) -> Proto {
    let n = first.len().min(H2_PREFACE.len());
    if n == 0 {
        Proto::Unknown
    } else if first[..n] != H2_PREFACE[..n] {
        Proto::Http1
    } else if n == H2_PREFACE.len() {
        Proto::Http2
    } else {
        Proto::Unknown
    }
}

/// Wait for a plain connection's first bytes and tell its protocol from them, leaving them in
/// the socket. The caller bounds the wait (the connection's header clock).
pub async fn peek(tcp: &TcpStream) -> Proto {
    let mut first = [0u8; H2_PREFACE.len()];
    match tcp.peek(&mut first).await {
        Ok(n) => from_first_bytes(first.get(..n).unwrap_or_default()),
        Err(_) => Proto::Unknown,
    }
}

/// The protocol a TLS connection negotiated with ALPN (the bridge offers `h2` and `http/1.1`).
pub fn alpn(tls: &TlsStream<TcpStream>) -> Proto {
    match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => Proto::Http2,
        Some(b"http/1.1") => Proto::Http1,
        _ => Proto::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes() {
        assert_eq!(from_first_bytes(b"POST /mcp HTTP/1.1\r\n"), Proto::Http1);
        assert_eq!(from_first_bytes(b"G"), Proto::Http1);
        assert_eq!(from_first_bytes(b"PRI * HTTP/1.1"), Proto::Http1);
        assert_eq!(from_first_bytes(H2_PREFACE), Proto::Http2);
        assert_eq!(
            from_first_bytes(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0"),
            Proto::Http2
        );
        // A preface cut short, or nothing: the auto builder decides.
        assert_eq!(from_first_bytes(b"PRI * HT"), Proto::Unknown);
        assert_eq!(from_first_bytes(b""), Proto::Unknown);
    }
}
