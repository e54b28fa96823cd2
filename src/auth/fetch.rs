//! A minimal HTTP(S) GET for fetching a JWKS: one request per connection over hyper's HTTP/1.1
//! client, rustls (aws-lc-rs) with the operating system's root certificates for https, a time
//! limit and a size limit. Kept separate from the upstream `connect` client on purpose: it only
//! ever fetches public key sets and carries no credentials.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Largest JWKS accepted.
pub const MAX_BODY: usize = 1 << 20;

/// A parsed http(s) URL.
#[derive(Debug, Clone)]
pub struct Target {
    pub uri: Uri,
    pub https: bool,
    pub host: String,
    pub port: u16,
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, String> {
        let uri: Uri = s.parse().map_err(|e| format!("not a URL ({e})"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("the URL must start with http:// or https://".into()),
        };
        let host = uri
            .host()
            .ok_or("the URL has no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Target {
            uri,
            https,
            host,
            port,
        })
    }
}

fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CFG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CFG.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for c in found.certs {
            let _ = roots.add(c);
        }
        if roots.is_empty() {
            return Err("no root certificates found on this system for https".into());
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Arc::new(cfg))
    })
    .clone()
}

/// GET `t`, expecting 200 and at most [`MAX_BODY`] bytes, within `limit`.
pub async fn get(t: &Target, limit: Duration) -> Result<Bytes, String> {
    match tokio::time::timeout(limit, get_inner(t)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

async fn get_inner(t: &Target) -> Result<Bytes, String> {
    let tcp = TcpStream::connect((t.host.as_str(), t.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    if t.https {
        let name = rustls_pki_types::ServerName::try_from(t.host.clone())
            .map_err(|e| format!("bad host name: {e}"))?;
        // The first use reads the system's root certificates: off the runtime's threads.
        let cfg = tokio::task::spawn_blocking(client_config)
            .await
            .map_err(|e| format!("TLS roots: {e}"))??;
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        request(tls, t).await
    } else {
        request(tcp, t).await
    }
}

async fn request<IO>(io: IO, t: &Target) -> Result<Bytes, String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let path = t
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_owned();
    let host = match t.uri.authority() {
        Some(a) => a.as_str().to_owned(),
        None => t.host.clone(),
    };
    let req = Request::get(path)
        .header(header::HOST, host)
        .header(header::ACCEPT, "application/jwk-set+json, application/json")
        .header(
            header::USER_AGENT,
            concat!("mcp-bridge/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    // The connection is driven here, beside the exchange, not on a task of its own: once the
    // body is read the sender goes and the connection ends, so nothing outlives the fetch
    // (and `get`'s time limit bounds both).
    let exchange = async move {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        if resp.status() != StatusCode::OK {
            return Err(format!("HTTP status {}", resp.status().as_u16()));
        }
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?;
        Ok(body.to_bytes())
    };
    let (r, _) = tokio::join!(exchange, conn);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = Target::parse("https://as.example.com/.well-known/jwks.json").unwrap();
        assert!(t.https && t.port == 443 && t.host == "as.example.com");
        let t = Target::parse("http://[::1]:8081/k").unwrap();
        assert!(!t.https && t.port == 8081 && t.host == "::1");
        assert!(Target::parse("ftp://x/y").is_err());
        assert!(Target::parse("/relative").is_err());
    }
}
