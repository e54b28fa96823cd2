//! Process stdin/stdout as async streams, for the two processes whose stdio *is* the MCP
//! channel: the demo server (a child) and `connect` (a host's child).
//!
//! When both are pipes (a spawned child's normal case) they are driven by the tokio reactor
//! directly (`O_NONBLOCK`): no hop through tokio's blocking pool per read and per write, which
//! tokio's own stdio makes (a thread wake-up each way, measured as an order of magnitude per
//! message for the demo and a visible share of connect's latency). Otherwise (a terminal, a
//! file, `/dev/null`) tokio's stdio is used. [`restore`] puts the descriptors back into
//! blocking mode, since `O_NONBLOCK` lives on the open file description shared with the
//! parent. Kept apart because it is the only platform-specific code of both.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub enum Input {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Receiver),
    Std(tokio::io::Stdin),
}

pub enum Output {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Sender),
    Std(tokio::io::Stdout),
}

/// Reactor-driven pipes when both ends are pipes, tokio's stdio otherwise.
/// Must be called inside the runtime.
#[cfg(unix)]
pub fn open() -> (Input, Output) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;

    let pipes = io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd)
        .and_then(|rx| {
            let tx = io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .and_then(pipe::Sender::from_owned_fd);
            match tx {
                Ok(tx) => Ok((rx, tx)),
                Err(e) => {
                    // Undo O_NONBLOCK on stdin before falling back.
                    let _ = rx.into_blocking_fd();
                    Err(e)
                }
            }
        });
    match pipes {
        Ok((rx, tx)) => (Input::Pipe(rx), Output::Pipe(tx)),
        Err(_) => (
            Input::Std(tokio::io::stdin()),
            Output::Std(tokio::io::stdout()),
        ),
    }
}

#[cfg(not(unix))]
pub fn open() -> (Input, Output) {
    (
        Input::Std(tokio::io::stdin()),
        Output::Std(tokio::io::stdout()),
    )
}

/// Put stdin/stdout back into blocking mode (O_NONBLOCK lives on the
/// shared open file description, so it would outlive this process).
#[cfg(unix)]
pub fn restore() {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;

    if let Ok(fd) = io::stdin().as_fd().try_clone_to_owned() {
        if let Ok(rx) = pipe::Receiver::from_owned_fd_unchecked(fd) {
            let _ = rx.into_blocking_fd();
        }
    }
    if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
        if let Ok(tx) = pipe::Sender::from_owned_fd_unchecked(fd) {
            let _ = tx.into_blocking_fd();
        }
    }
}

#[cfg(not(unix))]
pub fn restore() {}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            #[cfg(unix)]
            Input::Pipe(p) => Pin::new(p).poll_read(cx, buf),
            Input::Std(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            #[cfg(unix)]
            Output::Pipe(p) => Pin::new(p).poll_write(cx, buf),
            Output::Std(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            #[cfg(unix)]
            Output::Pipe(p) => Pin::new(p).poll_flush(cx),
            Output::Std(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            #[cfg(unix)]
            Output::Pipe(p) => Pin::new(p).poll_shutdown(cx),
            Output::Std(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
