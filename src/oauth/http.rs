//! The OAuth client's HTTP: bounded fetches (time and size) over the same hyper/rustls client
//! the remote upstream uses, the URL rule (HTTPS, or plain HTTP to a loopback host so that
//! tests and local servers work), and the adapter that lets the `oauth2` crate send its token
//! requests through it (`oauth2` brings no client of ours; a closure is its async client).
//! Redirects are not followed: metadata and token endpoints answer directly. A fetcher made
//! [`Fetch::proving`] adds a DPoP proof to every request to the token endpoint and, when the
//! server asks for a nonce (`use_dpop_nonce`), sends the request once more with it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::Value;
use url::Url;

/// The HTTPS client (the remote upstream's type).
pub type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Largest metadata, registration or token answer read.
pub const MAX_BODY: usize = 256 * 1024;

/// Why a fetch got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{0}")]
    Refused(String),
    #[error("{url}: {detail}")]
    Transport { url: String, detail: String },
    #[error("{0}: no answer within {1} s")]
    Timeout(String, u64),
}

/// Plain HTTP is allowed only to a loopback host.
pub fn check_url(u: &Url) -> Result<(), String> {
    match u.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(u) => Ok(()),
        _ => Err(format!(
            "{}: OAuth endpoints must be https:// (plain http only on a loopback host)",
            redact(u)
        )),
    }
}

fn is_loopback(u: &Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// A URL for messages: no query (it may carry codes), no user info.
pub fn redact(u: &Url) -> String {
    let mut c = u.clone();
    c.set_query(None);
    c.set_fragment(None);
    let _ = c.set_username("");
    let _ = c.set_password(None);
    c.to_string()
}

/// What proves possession at the token endpoint: the login's DPoP key and the authorization
/// server's last nonce.
#[derive(Clone)]
pub struct Prover {
    pub key: Arc<super::dpop::Key>,
    pub token_endpoint: String,
    pub nonce: Arc<super::dpop::Nonce>,
}

/// The fetcher: one client, one time limit per exchange, one size limit per body.
#[derive(Clone)]
pub struct Fetch {
    client: Https,
    timeout: Duration,
    prover: Option<Prover>,
}

impl Fetch {
    pub fn new(client: Https, timeout: Duration) -> Self {
        Fetch {
            client,
            timeout,
            prover: None,
        }
    }

    /// This fetcher, proving possession of `prover`'s key at its token endpoint.
    pub fn proving(&self, prover: Option<Prover>) -> Fetch {
        Fetch {
            prover,
            ..self.clone()
        }
    }

    /// Send `req` and read its whole body (bounded); (status, content type, body).
    pub async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, String, Bytes), FetchError> {
        let (status, headers, body) = self.exchange(req).await?;
        let ct = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Ok((status, ct, body))
    }

    /// Send `req` and read its whole body (bounded); (status, headers, body).
    async fn exchange(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, HeaderMap, Bytes), FetchError> {
        let where_ = req.uri().to_string();
        let where_ = where_.split('?').next().unwrap_or("").to_owned();
        if let Ok(u) = Url::parse(&where_) {
            check_url(&u).map_err(FetchError::Refused)?;
        }
        let work = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| FetchError::Transport {
                    url: where_.clone(),
                    detail: e.to_string(),
                })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| FetchError::Transport {
                    url: where_.clone(),
                    detail: format!("reading the answer: {e}"),
                })?
                .to_bytes();
            Ok((status, headers, body))
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| FetchError::Timeout(where_.clone(), self.timeout.as_secs()))?
    }

    /// GET a JSON document: Ok(None) for a 4xx (not there), Err for the rest.
    pub async fn get_json(&self, u: &Url) -> Result<Option<Value>, FetchError> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(u.as_str())
            .header(ACCEPT, "application/json")
            .header("mcp-protocol-version", crate::protocol::LEGACY_LATEST)
            .body(Full::new(Bytes::new()))
            .map_err(|e| FetchError::Refused(format!("{}: {e}", redact(u))))?;
        let (status, _, body) = self.send(req).await?;
        if status.is_client_error() {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(FetchError::Refused(format!(
                "{} answered HTTP {}",
                redact(u),
                status.as_u16()
            )));
        }
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| FetchError::Refused(format!("{}: not JSON ({e})", redact(u))))
    }

    /// POST a JSON document; (status, answer as JSON or Null).
    pub async fn post_json(&self, u: &Url, doc: &Value) -> Result<(StatusCode, Value), FetchError> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(u.as_str())
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(doc.to_string())))
            .map_err(|e| FetchError::Refused(format!("{}: {e}", redact(u))))?;
        let (status, _, body) = self.send(req).await?;
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    }

    /// The `oauth2` crate's request (or a hand-built token request), sent through this
    /// client: with a proof when it goes to the proving token endpoint, and once more with the
    /// server's nonce when it asks for one (RFC 9449 §8).
    pub async fn oauth2(
        &self,
        req: oauth2::HttpRequest,
    ) -> Result<oauth2::HttpResponse, FetchError> {
        let (parts, body) = req.into_parts();
        let body = Bytes::from(body);
        let prover = self
            .prover
            .as_ref()
            .filter(|p| super::dpop::htu(&parts.uri.to_string()) == p.token_endpoint);
        let mut asked_nonce = false;
        loop {
            let mut req = Request::from_parts(parts.clone(), Full::new(body.clone()));
            if let Some(p) = prover {
                let proof = p
                    .key
                    .proof(
                        parts.method.as_str(),
                        &p.token_endpoint,
                        None,
                        p.nonce.get().as_deref(),
                    )
                    .map_err(FetchError::Refused)?;
                let v = HeaderValue::from_str(&proof)
                    .map_err(|e| FetchError::Refused(e.to_string()))?;
                req.headers_mut().insert("dpop", v);
            }
            let (status, headers, body) = self.exchange(req).await?;
            let nonce = headers
                .get(super::dpop::NONCE_HEADER)
                .and_then(|v| v.to_str().ok())
                .zip(prover)
                .is_some_and(|(n, p)| p.nonce.set(n));
            if nonce && !asked_nonce && status == StatusCode::BAD_REQUEST && asks_nonce(&body) {
                asked_nonce = true;
                tracing::debug!("the token endpoint asked for a DPoP nonce: sending it");
                continue;
            }
            let mut resp = http::Response::new(body.to_vec());
            *resp.status_mut() = status;
            if let Some(v) = headers.get(CONTENT_TYPE) {
                resp.headers_mut().insert(CONTENT_TYPE, v.clone());
            }
            return Ok(resp);
        }
    }
}

/// Is `body` a token endpoint's `use_dpop_nonce` error?
fn asks_nonce(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error")
                .and_then(Value::as_str)
                .map(|e| e == super::dpop::USE_NONCE)
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_or_loopback_only() {
        let ok = |s: &str| check_url(&Url::parse(s).unwrap()).is_ok();
        assert!(ok("https://as.example.com/token"));
        assert!(ok("http://127.0.0.1:8080/token"));
        assert!(ok("http://localhost/x"));
        assert!(ok("http://[::1]:9/x"));
        assert!(!ok("http://as.example.com/token"));
        assert!(!ok("http://10.0.0.1/token"));
        assert!(!ok("ftp://127.0.0.1/x"));
    }

    #[test]
    fn redaction_drops_query_and_user() {
        let u = Url::parse("https://u:p@h.example/cb?code=secret#f").unwrap();
        assert_eq!(redact(&u), "https://h.example/cb");
    }
}
