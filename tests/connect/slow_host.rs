//! `mcp-bridge connect` in front of a 2025 remote whose GET stream sends many requests while
//! the host does not read its stdout: a request the host has no room for within the bound is
//! refused to the remote (-32603, counted as `dropped_frames{reason="slow_consumer"}`), never
//! lost and never both delivered and refused. Once the host reads again it gets the others and
//! its answers reach the remote: every request has exactly one answer at the remote.
//!
//! The remote is a small hand-written 2025 server (initialize with a session, a GET stream of
//! `roots/list` requests, POSTed answers recorded), so that the flood is exact.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{json, Value};
use support::*;

/// Requests the remote sends on its GET stream: more than stdout's pipe, connect's output
/// queue and its event queue hold together.
const FLOOD: usize = 3000;
const T: Duration = Duration::from_secs(20);

type Answers = Arc<Mutex<HashMap<String, Vec<Value>>>>;
type Resp = hyper::Response<http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>>;

fn full(status: u16, ct: &str, body: String) -> Resp {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    r.headers_mut().insert("content-type", ct.parse().unwrap());
    r.headers_mut()
        .insert("mcp-session-id", "s1".parse().unwrap());
    r
}

/// The GET stream: FLOOD `roots/list` requests (padded, ~330 bytes each), then silence.
fn flood() -> Resp {
    let pad = "x".repeat(256);
    let events = (0..FLOOD).map(move |i| {
        let req = json!({"jsonrpc": "2.0", "id": format!("r{i}"), "method": "roots/list",
                         "params": {"_meta": {"pad": pad}}});
        Ok::<_, Infallible>(hyper::body::Frame::data(Bytes::from(format!(
            "data: {req}\n\n"
        ))))
    });
    let forever = futures_util::stream::pending();
    let body = StreamBody::new(futures_util::stream::StreamExt::chain(
        futures_util::stream::iter(events),
        forever,
    ));
    let mut r = hyper::Response::new(body.boxed_unsync());
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

async fn answer(req: hyper::Request<hyper::body::Incoming>, answers: Answers) -> Resp {
    if req.method() == hyper::Method::GET {
        return flood();
    }
    if req.method() == hyper::Method::DELETE {
        return full(200, "text/plain", String::new());
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match msg["method"].as_str() {
        Some("initialize") => {
            let r = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "flood", "version": "0"}}});
            full(200, "application/json", r.to_string())
        }
        Some("tools/list") => {
            let r = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": []}});
            full(200, "application/json", r.to_string())
        }
        Some(m) if msg.get("id").is_some() => {
            let r = json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601,
                           "message": format!("no {m}")}});
            full(200, "application/json", r.to_string())
        }
        Some(_) => full(202, "text/plain", String::new()),
        None => {
            // A client's answer to one of the stream's requests.
            let id = msg["id"].as_str().unwrap_or("?").to_owned();
            answers.lock().unwrap().entry(id).or_default().push(msg);
            full(202, "text/plain", String::new())
        }
    }
}

async fn flood_server(answers: Answers) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let answers = answers.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let answers = answers.clone();
                    async move { Ok::<_, Infallible>(answer(req, answers).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_host_gets_requests_refused_to_the_remote_never_lost() {
    let answers: Answers = Arc::default();
    let addr = flood_server(answers.clone()).await;
    let url = format!("http://{addr}/mcp");
    let mut h = Host::start(
        &url,
        &[
            "--protocol",
            "2025-11-25",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let murl = metrics_url(&h).await;
    // Reading stops once initialized: the GET stream opens after `initialized`.
    h.initialize("2025-11-25", json!({"roots": {}}));
    h.pause_reading();

    // Past the 10 s bound, connect refuses what it has no room for.
    let until = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let n = answers.lock().unwrap().len();
        if n > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            break answers.lock().unwrap().len();
        }
        assert!(Instant::now() < until, "nothing was refused to the remote");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (id, got) in answers.lock().unwrap().iter() {
        assert_eq!(got.len(), 1, "{id} answered twice: {got:?}");
        assert_eq!(got[0]["error"]["code"], -32603, "{got:?}");
        let msg = got[0]["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("reads too slowly"), "{msg}");
    }

    eprintln!("{refused} of {FLOOD} refused while the host did not read");
    // The host reads again and answers every request it gets.
    h.resume_reading();
    let mut delivered = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while delivered.len() + refused < FLOOD {
        assert!(
            Instant::now() < until,
            "{} delivered + {refused} refused of {FLOOD}",
            delivered.len()
        );
        for m in h.drain(Duration::from_millis(200)) {
            if m["method"] == "roots/list" {
                h.send(&json!({"jsonrpc": "2.0", "id": m["id"], "result": {"roots": []}}));
                delivered.push(m["id"].clone());
            }
        }
    }
    assert_eq!(delivered.len() + refused, FLOOD);

    // At the remote: every request has exactly one answer, under its own id.
    let until = Instant::now() + T;
    while answers.lock().unwrap().len() < FLOOD {
        assert!(
            Instant::now() < until,
            "{} of {FLOOD} answered at the remote",
            answers.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a = answers.lock().unwrap().clone();
    let errors = a.values().filter(|v| v[0].get("error").is_some()).count();
    assert_eq!(errors, refused, "the refused are exactly the errors");
    assert!(a.values().all(|v| v.len() == 1), "an id answered twice");
    assert!((0..FLOOD).all(|i| a.contains_key(&format!("r{i}"))));

    let t = scrape(&client(), &murl).await;
    assert_eq!(
        sample(
            &t,
            "mcp_bridge_dropped_frames_total{reason=\"slow_consumer\"}"
        ),
        Some(refused as f64),
        "{t}"
    );
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}
