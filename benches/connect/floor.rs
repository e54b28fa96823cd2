//! The floor of the connect bench: a stdio→Streamable HTTP forwarder with no MCP logic, the
//! least a "stdio face for a remote" can do. Each line from stdin is POSTed as it is on a
//! keep-alive HTTP/1.1 connection (hyper's bare `client::conn`, `TCP_NODELAY`; one idle
//! connection is reused, another is opened only while every open one is busy, so 1 in flight
//! is one connection for the whole run), with the constant headers given on the command line
//! and the last `Mcp-Session-Id` the remote sent. A JSON body goes to stdout as one line, the
//! `data:` lines of an event stream one line each, a 202 nothing. One writer task owns stdout
//! and flushes when nothing more is queued. It reads no JSON: what it needs of the protocol
//! (the headers of the frames the bench sends) it is told.
//!
//! Run as `connect-bench --floor-forwarder URL [HEADER: VALUE ...]`.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

pub const ARG: &str = "--floor-forwarder";

struct Shared {
    addr: String,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    session: Mutex<Option<HeaderValue>>,
    out: mpsc::Sender<Bytes>,
}

/// The forwarder's process: its exit status.
pub fn main(args: &[String]) -> i32 {
    let Some(url) = args.first() else {
        eprintln!("usage: {ARG} URL [HEADER: VALUE ...]");
        return 64;
    };
    let Ok(uri) = url.parse::<Uri>() else {
        eprintln!("bad URL {url}");
        return 64;
    };
    let mut headers = Vec::new();
    for h in &args[1..] {
        let Some((k, v)) = h.split_once(':') else {
            eprintln!("bad header {h}");
            return 64;
        };
        match (
            HeaderName::try_from(k.trim()),
            HeaderValue::try_from(v.trim()),
        ) {
            (Ok(k), Ok(v)) => headers.push((k, v)),
            _ => {
                eprintln!("bad header {h}");
                return 64;
            }
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return 70;
        }
    };
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let shared = Arc::new(Shared {
        addr: uri.authority().map(|a| a.to_string()).unwrap_or_default(),
        path: uri.path().to_owned(),
        headers,
        idle: Mutex::new(Vec::new()),
        session: Mutex::new(None),
        out: tx,
    });
    rt.block_on(async move {
        let writer = tokio::spawn(write_loop(rx));
        let mut stdin = tokio::io::BufReader::with_capacity(1 << 16, tokio::io::stdin());
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let body = Bytes::copy_from_slice(line.trim_ascii_end());
            if body.is_empty() {
                continue;
            }
            let s = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = forward(&s, body).await {
                    eprintln!("floor: {e}");
                }
            });
        }
        drop(shared);
        let _ = writer.await;
    });
    0
}

async fn write_loop(mut rx: mpsc::Receiver<Bytes>) {
    let mut out = tokio::io::stdout();
    while let Some(b) = rx.recv().await {
        if out.write_all(&b).await.is_err() {
            return;
        }
        while let Ok(b) = rx.try_recv() {
            if out.write_all(&b).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

async fn connection(s: &Shared) -> Result<SendRequest<Full<Bytes>>, String> {
    if let Some(c) = s.idle.lock().map_err(|_| "poisoned")?.pop() {
        if !c.is_closed() {
            return Ok(c);
        }
    }
    let tcp = tokio::net::TcpStream::connect(&s.addr)
        .await
        .map_err(|e| format!("connect {}: {e}", s.addr))?;
    let _ = tcp.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(send)
}

async fn forward(s: &Shared, body: Bytes) -> Result<(), String> {
    let mut send = connection(s).await?;
    send.ready().await.map_err(|e| format!("connection: {e}"))?;
    let mut req = Request::post(s.path.as_str())
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let h = req.headers_mut();
    h.insert(
        header::HOST,
        HeaderValue::from_str(&s.addr).map_err(|e| e.to_string())?,
    );
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    for (k, v) in &s.headers {
        h.insert(k.clone(), v.clone());
    }
    if let Some(id) = s.session.lock().map_err(|_| "poisoned")?.clone() {
        h.insert("mcp-session-id", id);
    }
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| format!("POST: {e}"))?;
    if let Some(id) = resp.headers().get("mcp-session-id") {
        *s.session.lock().map_err(|_| "poisoned")? = Some(id.clone());
    }
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    s.idle.lock().map_err(|_| "poisoned")?.push(send);
    if status == http::StatusCode::ACCEPTED || bytes.is_empty() {
        return Ok(());
    }
    if sse {
        for data in bytes
            .split(|b| *b == b'\n')
            .filter_map(|l| l.strip_prefix(b"data:"))
        {
            let data = data.trim_ascii();
            if !data.is_empty() {
                let mut line = Vec::with_capacity(data.len() + 1);
                line.extend_from_slice(data);
                line.push(b'\n');
                let _ = s.out.send(Bytes::from(line)).await;
            }
        }
    } else {
        let mut line = Vec::with_capacity(bytes.len() + 1);
        line.extend_from_slice(bytes.trim_ascii_end());
        line.push(b'\n');
        let _ = s.out.send(Bytes::from(line)).await;
    }
    Ok(())
}
