//! The Prometheus exposition endpoint: `GET /metrics` in the text format, on its own listener
//! (`--metrics-listen ADDR`) and, with `--metrics-on-main`, on the main one as well.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::face::respond::{self, Body};
use crate::metrics::Metrics;

/// The `route` label of metrics requests.
pub const ROUTE: &str = "metrics";

/// `GET` (or `HEAD`) → the text exposition; other methods → 405.
pub fn exposition(m: &Metrics, method: &Method) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = respond::status_only(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(m.render())
    };
    let mut r = Response::new(respond::full(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn answer(m: &Metrics, req: &Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let (route, resp) = if req.uri().path() == "/metrics" {
        (ROUTE, exposition(m, req.method()))
    } else {
        ("other", respond::status_only(StatusCode::NOT_FOUND))
    };
    m.http_response(route, req.method().as_str(), resp.status().as_u16());
    m.http_duration(
        route,
        req.method().as_str(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// Serve `/metrics` on `listener` until `stop` is cancelled.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("metrics listener: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let (m, m2) = (metrics.clone(), metrics.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let m = m.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&m, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    if let Some(status) = crate::face::http::hyper_answer(&e) {
                        m2.http_connection_response(status);
                    }
                    debug!("metrics connection ended: {e}");
                },
                _ = stop.cancelled() => {}
            }
        });
    }
}
