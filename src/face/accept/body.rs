//! The request body every handler reads: hyper's body with a deadline. A client that stalls
//! its upload (sends part of a body, then nothing) would otherwise hold a task, a connection and
//! a stream permit for as long as it likes; with the deadline the read fails with
//! [`BodyTimeout`], which the POST handler answers with 408 and a closed connection.
//!
//! The deadline is for the whole body, from the request's arrival: a rate floor would be fairer
//! to a slow legitimate uploader, but one deadline is what an operator can reason about
//! (`--body-timeout` × the smallest bandwidth they serve ≥ `--max-body`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Sleep;

/// Errors of a request body read.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request body did not arrive before `--body-timeout`.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time (--body-timeout)")
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that fails with [`BodyTimeout`] once its deadline passes. Its timer is
/// made only when the body is not all there at the first read: most bodies arrive with their
/// head, and a timer per request is a timer-wheel entry and an allocation for nothing.
pub struct ReqBody {
    inner: Incoming,
    deadline: tokio::time::Instant,
    timer: Option<Pin<Box<Sleep>>>,
}

impl ReqBody {
    /// `inner` must arrive in full within `limit` from now.
    pub fn new(inner: Incoming, limit: Duration) -> Self {
        ReqBody {
            inner,
            deadline: tokio::time::Instant::now() + limit,
            timer: None,
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Poll::Ready(f) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        if self.inner.is_end_stream() {
            return Poll::Ready(None);
        }
        let deadline = self.deadline;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
