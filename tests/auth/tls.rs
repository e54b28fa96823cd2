//! `serve --tls-cert/--tls-key`: a self-signed certificate made at test time (rcgen), a rustls
//! client (tokio-rustls + hyper) over HTTP/2 and HTTP/1.1 chosen by ALPN, TLS 1.2 and 1.3, and
//! a certificate reload on SIGHUP and on a change of the files, without a restart.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio_rustls::client::TlsStream;

use support::*;

const TOKEN: &str = "tls-test-token-0123456789abcdef";

fn make_cert(dir: &std::path::Path) -> CertificateDer<'static> {
    let ck = self_signed();
    // Write the key first: the reloader sees both files change.
    std::fs::write(dir.join("key.pem"), ck.key_pair.serialize_pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
    ck.cert.der().clone()
}

/// `serve --demo` on port 0 with the certificate `make_cert` wrote in `dir`, and `extra`.
async fn serve_tls(dir: &std::path::Path, extra: &[&str]) -> Bridge {
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    let tls = [
        "--tls-cert",
        c.to_str().unwrap(),
        "--tls-key",
        k.to_str().unwrap(),
    ];
    Bridge::builder()
        .log_level("info")
        .serve()
        .args(["--demo", "--port", "0"])
        .args(tls)
        .args(extra.iter().copied())
        .spawn()
        .await
}

fn client_config(
    trust: &CertificateDer<'static>,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trust.clone()).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

async fn connect(
    b: &Bridge,
    cfg: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(b.addr).await?;
    tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

fn init_request(uri: &str, http2: bool) -> hyper::Request<Full<Bytes>> {
    let mut rb = hyper::Request::post(uri)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {TOKEN}"));
    if !http2 {
        rb = rb.header("host", "localhost");
    }
    rb.body(Full::new(Bytes::from(
        initialize_body(json!(1), LEGACY).to_string(),
    )))
    .unwrap()
}

async fn post_over(stream: TlsStream<tokio::net::TcpStream>, uri: &str) -> (u16, String) {
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let resp = if h2 {
        let (mut s, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        s.send_request(init_request(uri, true)).await.unwrap()
    } else {
        let (mut s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        s.send_request(init_request(uri, false)).await.unwrap()
    };
    let st = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (st, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn tls_with_alpn_versions_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let first = make_cert(dir.path());
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("tls:{TOKEN}\n")).unwrap();
    let t = tokens.to_str().unwrap().to_owned();
    let b = serve_tls(dir.path(), &["--auth", "bearer", "--token-file", &t]).await;
    assert!(b.url.starts_with("https://127.0.0.1:"), "{}", b.url);
    let uri = format!("https://localhost:{}/mcp", b.addr.port());
    let all = rustls::ALL_VERSIONS;

    // HTTP/2 by ALPN.
    let s = connect(&b, client_config(&first, &[b"h2", b"http/1.1"], all))
        .await
        .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (st, body) = post_over(s, &uri).await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("protocolVersion"), "{body}");

    // HTTP/1.1 by ALPN, over TLS 1.2.
    let s = connect(
        &b,
        client_config(&first, &[b"http/1.1"], &[&rustls::version::TLS12]),
    )
    .await
    .unwrap();
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        s.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    assert_eq!(post_over(s, &uri).await.0, 200);

    // Authentication still applies over TLS.
    let s = connect(&b, client_config(&first, &[b"http/1.1"], all))
        .await
        .unwrap();
    let (mut snd, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = init_request(&uri, false);
    req.headers_mut().remove("authorization");
    assert_eq!(snd.send_request(req).await.unwrap().status().as_u16(), 401);

    // Plain HTTP to the TLS port gets nowhere.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/healthz", b.addr))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());

    // New certificate + SIGHUP: new connections get it, without a restart.
    let second = make_cert(dir.path());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(b.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(
        b.log
            .wait_for("TLS certificate reloaded", Duration::from_secs(10))
            .await
            .is_some(),
        "{}",
        b.log.dump()
    );
    let s = connect(&b, client_config(&second, &[b"h2"], all))
        .await
        .unwrap();
    let served = s.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(served, second);
    assert_eq!(post_over(s, &uri).await.0, 200);
    assert!(
        connect(&b, client_config(&first, &[b"h2"], all))
            .await
            .is_err(),
        "the old certificate is still served"
    );
    assert!(b.pid() > 0);
}

#[test]
fn bad_tls_files_refuse_to_start() {
    let (code, log) = run_refused(&[
        "--demo",
        "--port",
        "0",
        "--tls-cert",
        "/nonexistent/c.pem",
        "--tls-key",
        "/nonexistent/k.pem",
    ]);
    assert_eq!(code, Some(64), "{log}");
    assert!(log.contains("--tls-cert"), "{log}");
}

/// At `--max-connections` on a TLS listener the refusal goes inside a completed handshake: a
/// `503` with `Retry-After` the client can read, counted under route `connection_cap`.
#[tokio::test]
async fn tls_connection_cap_refuses_inside_the_handshake() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let cert = make_cert(dir.path());
    let b = serve_tls(
        dir.path(),
        &[
            "--max-connections",
            "1",
            "--header-timeout",
            "60s",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    )
    .await;
    let murl = metrics_url(&b).await;
    let cfg = client_config(&cert, &[b"http/1.1"], rustls::ALL_VERSIONS);
    let _held = connect(&b, cfg.clone()).await.unwrap();
    let mut refused = connect(&b, cfg)
        .await
        .expect("the refused connection still completes its handshake");
    refused
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), refused.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the refused connection was not closed");
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 503 "), "{out:?}");
    assert!(out.contains("Retry-After: 1\r\n"), "{out:?}");
    let series =
        "mcp_bridge_http_responses_total{method=\"other\",route=\"connection_cap\",status=\"503\"}";
    Scraper::at(&murl).until_sample(series, 1.0).await;
}

/// The certificate files are watched (polled every 2 s): replacing them, with no SIGHUP,
/// makes new connections get the new certificate; a broken file afterwards is refused with a
/// logged error and the certificate being served stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_reloads_on_a_file_change_and_keeps_serving_through_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let first = make_cert(dir.path());
    let b = serve_tls(dir.path(), &[]).await;
    let all = rustls::ALL_VERSIONS;
    let served = |s: &TlsStream<tokio::net::TcpStream>| {
        s.get_ref().1.peer_certificates().unwrap()[0].clone()
    };
    let s = connect(&b, client_config(&first, &[b"h2"], all))
        .await
        .unwrap();
    assert_eq!(served(&s), first);

    let second = make_cert(dir.path());
    b.log
        .expect("cause=\"file change\"", Duration::from_secs(15))
        .await;
    let s = connect(&b, client_config(&second, &[b"h2"], all))
        .await
        .expect("the new certificate, without a SIGHUP");
    assert_eq!(served(&s), second);

    // A failure of its own: counted from here (a poll between make_cert's two writes may
    // have seen the new key with the old certificate, and refused that pair).
    const FAILED: &str = "TLS certificate reload failed; keeping the previous one";
    let failed = b.log.count(FAILED);
    std::fs::write(
        dir.path().join("cert.pem"),
        "-----BEGIN CERTIFICATE-----\nbroken\n",
    )
    .unwrap();
    b.log
        .expect_count(FAILED, failed + 1, Duration::from_secs(15))
        .await;
    let s = connect(&b, client_config(&second, &[b"h2"], all))
        .await
        .expect("still the second certificate after a bad file");
    assert_eq!(served(&s), second);
    assert_eq!(b.log.count("cause=\"file change\""), 1, "{}", b.log.dump());
}
