//! A 2025 remote that asks for input on its GET stream (as the TypeScript SDK's servers do
//! for a request sent without a related request id), behind `connect`, for a 2026 host: the
//! request names no call, so it goes to the one call of the host that may park, which is
//! answered `input_required`; the host's retry carries the answer back to the remote as a
//! POSTed response, and the call ends with what the remote made of it. (With two such calls
//! running the request is refused to the remote, -32601: there is no telling whose it is; not
//! tested here, since which calls are running when the request comes is a race.)
//!
//! The remote is written here on hyper (a session, a held GET stream, a `tools/call` that
//! waits for the answer to its own request), since the fakes in `support::remote` offer no
//! GET stream.

use crate::support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use support::*;
use tokio::sync::{mpsc, oneshot};

const T: Duration = Duration::from_secs(20);

#[derive(Default)]
struct State {
    /// The open GET stream's sender.
    get: Mutex<Option<mpsc::Sender<Bytes>>>,
    /// Our request id -> where its answer goes.
    waiting: Mutex<Vec<(String, oneshot::Sender<Value>)>>,
    asked: std::sync::atomic::AtomicUsize,
    /// As the TypeScript SDK's servers: a request for the GET stream is dropped while none
    /// is open, and the stream's headers come late (here 300 ms).
    strict: std::sync::atomic::AtomicBool,
}

type Body = BoxBody<Bytes, Infallible>;

fn json_reply(v: Value) -> hyper::Response<Body> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r.headers_mut()
        .insert("mcp-session-id", "sess-1".parse().unwrap());
    r
}

fn status(code: u16) -> hyper::Response<Body> {
    let mut r = hyper::Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
    r
}

/// `tools/call` of `ask`: ask the host its name on the GET stream, answer with its reply.
async fn ask(st: &State, id: Value) -> hyper::Response<Body> {
    let n = st.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let rid = format!("el-{n}");
    let mut sender = None;
    let tries = if st.strict.load(std::sync::atomic::Ordering::SeqCst) {
        1
    } else {
        100
    };
    for _ in 0..tries {
        sender = st.get.lock().unwrap().clone();
        if sender.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (tx, rx) = oneshot::channel();
    st.waiting.lock().unwrap().push((rid.clone(), tx));
    let req = json!({"jsonrpc": "2.0", "id": rid, "method": "elicitation/create",
        "params": {"message": "your name?", "requestedSchema": {"type": "object",
            "properties": {"name": {"type": "string"}}}}});
    let sent = match sender {
        Some(s) => s
            .send(Bytes::from(format!("data: {req}\n\n")))
            .await
            .is_ok(),
        None => false,
    };
    let reply = if sent {
        tokio::time::timeout(Duration::from_secs(15), rx)
            .await
            .ok()
            .and_then(Result::ok)
    } else {
        None
    };
    let text = match reply {
        Some(r) => format!("answered: {}", r.get("result").unwrap_or(&r["error"])),
        None => "no answer".to_owned(),
    };
    json_reply(json!({"jsonrpc": "2.0", "id": id,
        "result": {"content": [{"type": "text", "text": text}]}}))
}

async fn handle(
    st: Arc<State>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    match *req.method() {
        hyper::Method::GET => {
            if st.strict.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let (tx, rx) = mpsc::channel::<Bytes>(8);
            *st.get.lock().unwrap() = Some(tx);
            let frames = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            let mut r = hyper::Response::new(StreamBody::new(frames).boxed());
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            return r;
        }
        hyper::Method::DELETE => return status(200),
        _ => {}
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = msg["id"].clone();
    match msg["method"].as_str() {
        Some("initialize") => json_reply(json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "get-stream-asker", "version": "1"}}})),
        Some("tools/list") => json_reply(json!({"jsonrpc": "2.0", "id": id, "result": {
            "tools": [{"name": "ask", "inputSchema": {"type": "object"}}]}})),
        Some("tools/call") => ask(&st, id).await,
        Some(_) if id.is_null() => status(202),
        Some(_) => json_reply(json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "Method not found"}})),
        None => {
            // A response to one of our requests.
            let key = id.as_str().unwrap_or_default().to_owned();
            let mut w = st.waiting.lock().unwrap();
            if let Some(i) = w.iter().position(|(k, _)| *k == key) {
                let _ = w.remove(i).1.send(msg);
            }
            status(202)
        }
    }
}

async fn get_stream_remote(strict: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let st = Arc::new(State::default());
    st.strict.store(strict, std::sync::atomic::Ordering::SeqCst);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let st = st.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(handle(st, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

fn call(tool: &str) -> Value {
    json!({"name": tool, "arguments": {},
           "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_request_reaches_the_one_call_that_may_be_asked() {
    asked_and_answered(get_stream_remote(false).await);
}

/// The remote drops what it would send on a GET stream that is not open yet, and opens it
/// late: the session's first call is sent only once the stream is open, so the request is
/// not lost (without that wait the call ends "no answer").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_call_waits_for_a_slow_get_stream() {
    asked_and_answered(get_stream_remote(true).await);
}

fn asked_and_answered(url: String) {
    let mut h = Host::start(&url, &[]);
    h.request(json!(1), "tools/call", call("ask"));
    let r = h.response(&json!(1), T);
    let res = &r["result"];
    assert_eq!(res["resultType"], "input_required", "{r}");
    let (key, q) = res["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(q["method"], "elicitation/create", "{r}");
    assert_eq!(q["params"]["message"], "your name?", "{r}");
    let mut retry = call("ask");
    retry["inputResponses"] =
        json!({ key.clone(): {"action": "accept", "content": {"name": "Ada"}} });
    retry["requestState"] = res["requestState"].clone();
    h.request(json!(2), "tools/call", retry);
    let done = h.response(&json!(2), T);
    assert_eq!(
        text(&done),
        r#"answered: {"action":"accept","content":{"name":"Ada"}}"#,
        "{done}"
    );
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}
