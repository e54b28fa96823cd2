//! `mcp-bridge connect` over HTTPS: a test server with a self-signed certificate (rcgen) and
//! ALPN `h2`/`http/1.1`; with `--ca-file` the call works over HTTP/2, without it the call gets a
//! clear TLS error and the face stays up.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

/// An HTTPS MCP-ish server answering every request with a 2026 echo of `params.arguments.text`.
async fn tls_server(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let ck = self_signed();
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, ck.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(ck.key_pair.serialize_der()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![ck.cert.der().clone()], key)
    .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(sock).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                        let text = v["params"]["arguments"]["text"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned();
                        let out = json!({"jsonrpc":"2.0","id":v["id"],"result":{"resultType":"complete","content":[{"type":"text","text":text}]}});
                        let mut r =
                            hyper::Response::new(Full::new(bytes::Bytes::from(out.to_string())));
                        r.headers_mut().insert(
                            "content-type",
                            http::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, std::convert::Infallible>(r)
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                .await;
            });
        }
    });
    (format!("https://localhost:{port}/mcp"), ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_ca_file_uses_http2() {
    let dir = tempfile::tempdir().unwrap();
    let (url, ca) = tls_server(dir.path()).await;
    let mut h = Host::start(
        &url,
        &[
            "--protocol",
            "2026-07-28",
            "--ca-file",
            ca.to_str().unwrap(),
        ],
    );
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "over tls"})),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "over tls");
    assert!(h.log.find("over HTTP/2.0").is_some(), "{}", h.log.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_untrusted_certificate_is_a_tls_error() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _) = tls_server(dir.path()).await;
    let mut h = Host::start(&url, &["--protocol", "2026-07-28"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(1), T);
    assert_eq!(r["error"]["data"]["reason"], "tls", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("certificate"),
        "{r}"
    );
    assert!(h.alive());
}

/// `--system-roots`: the operating system's store replaces the built-in webpki roots. The
/// store is made the test CA alone (`SSL_CERT_FILE`/`SSL_CERT_DIR`, which the OS-store loader
/// reads instead of the platform's): with the flag the call works; without it, in the same
/// environment, it gets a TLS error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_roots_trust_the_os_store_and_only_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (url, ca) = tls_server(dir.path()).await;
    // The OS store is these two variables' when either is set: the test CA alone.
    let empty = dir.path().join("no-certs");
    std::fs::create_dir(&empty).unwrap();
    let env = [
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ("SSL_CERT_DIR", empty.to_str().unwrap()),
    ];
    let mut h = Host::start_env(&url, &["--protocol", "2026-07-28", "--system-roots"], &env);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "os roots"})),
    );
    let r = h.response(&json!(1), T);
    assert_eq!(text(&r), "os roots", "{r}\n{}", h.log.dump());
    assert!(
        h.log
            .wait_find("using 1 system root certificates")
            .is_some(),
        "{}",
        h.log.dump()
    );
    drop(h);
    let mut h = Host::start_env(&url, &["--protocol", "2026-07-28"], &env);
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("echo", json!({"text": "webpki"})),
    );
    let r = h.response(&json!(2), T);
    assert_eq!(r["error"]["data"]["reason"], "tls", "{r}");
}
