//! The demo server's I/O loop: read newline-delimited input, hand each line to the server,
//! and write its output through one writer task.
//!
//! Reading is bounded (an over-long line is skipped whole and answered with a parse error,
//! never buffered) and the reader never waits for a slow handler: long calls run in their own
//! tasks. All output goes through a queue to a single writer that batches whatever is queued
//! into one flush, so concurrent tasks never interleave partial lines.

use std::io;
use std::sync::Arc;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::sync::mpsc;

use super::server::Shared;
use super::wire::{error_line, PARSE_ERROR};
use super::DemoMode;

/// Longest accepted input line (bytes, without the newline).
const MAX_LINE: usize = 256 << 20;
/// Output queue depth (lines).
const OUT_QUEUE: usize = 1024;

/// Serve MCP over the given byte streams until input EOF (then return Ok).
///
/// Returns an error if reading the input fails or the output stream breaks.
/// At EOF, requests still in flight are abandoned (no further output for
/// them); everything already queued is flushed before returning.
pub async fn serve<R, W>(input: R, output: W, mode: DemoMode) -> io::Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
    let writer = tokio::spawn(write_loop(output, rx));
    let shared = Arc::new(Shared::new(mode, tx));
    eprintln!("demo: serving MCP on stdio (era={mode})");

    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::with_capacity(4096);
    let mut read_result = Ok(());
    loop {
        line.clear();
        let alive = match read_line(&mut reader, &mut line, MAX_LINE).await {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::Line) => shared.handle_line(&line).await,
            Ok(LineRead::TooLong) => {
                eprintln!("demo: input line longer than {MAX_LINE} bytes discarded");
                shared
                    .emit(error_line(
                        None,
                        PARSE_ERROR,
                        "Parse error: line too long",
                        None,
                    ))
                    .await
            }
            Err(e) => {
                read_result = Err(e);
                break;
            }
        };
        if !alive {
            break;
        }
        if line.capacity() > 1 << 20 {
            line = Vec::with_capacity(4096);
        }
    }

    let abandoned = shared.shutdown();
    if abandoned > 0 {
        eprintln!("demo: input closed, abandoning {abandoned} in-flight request(s)");
    } else {
        eprintln!("demo: input closed");
    }
    drop(shared);
    let write_result = match writer.await {
        Ok(r) => r,
        Err(e) => Err(io::Error::other(format!("writer task failed: {e}"))),
    };
    read_result.and(write_result)
}

/// What [`read_line`] found.
enum LineRead {
    Eof,
    Line,
    TooLong,
}

/// Read one newline-terminated line (newline and trailing `\r` stripped)
/// into `buf`, refusing to buffer more than `cap` bytes.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<LineRead> {
    let mut too_long = false;
    let mut seen_any = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(if !seen_any {
                LineRead::Eof
            } else if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
        seen_any = true;
        let (chunk, used, done) = match memchr::memchr(b'\n', avail) {
            Some(i) => (&avail[..i], i + 1, true),
            None => (avail, avail.len(), false),
        };
        if !too_long {
            if buf.len() + chunk.len() > cap {
                too_long = true;
                *buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        r.consume(used);
        if done {
            if too_long {
                return Ok(LineRead::TooLong);
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(LineRead::Line);
        }
    }
}

/// Writes every queued line, then flushes once per batch.
async fn write_loop<W: AsyncWrite + Unpin>(
    output: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(64 * 1024, output);
    while let Some(first) = rx.recv().await {
        let mut result = w.write_all(&first).await;
        while result.is_ok() {
            match rx.try_recv() {
                Ok(next) => result = w.write_all(&next).await,
                Err(_) => break,
            }
        }
        if let Err(e) = result.and(w.flush().await) {
            eprintln!("demo: output write failed: {e}");
            return Err(e);
        }
    }
    let _ = w.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn overlong_lines_are_skipped() {
        let data: &[u8] = b"0123456789abcdef\nok\r\nlast";
        let mut r = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::TooLong)
        ));
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Line)
        ));
        assert_eq!(buf, b"ok");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Line)
        ));
        assert_eq!(buf, b"last");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf, 10).await,
            Ok(LineRead::Eof)
        ));
    }
}
