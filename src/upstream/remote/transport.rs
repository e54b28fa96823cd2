//! The HTTP transport of the remote upstream: building the HTTPS client, sending one request
//! (with backoff), one exchange (JSON or SSE answer, `Last-Event-ID` resumption, bounded
//! bodies) and the SSE frame reading it uses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{
    HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tracing::{debug, info, warn};

use super::answer::{self, Head, SseAction};
use super::fault::{chain, connect_reason, Fault};
use super::{Answer, HttpClient, Remote, RemoteConfig, Session};
use crate::call::{CallEvent, EventSender};
use crate::framing::{SseDecoder, SseItem};
use crate::oauth::challenge::Bearer;
use crate::oauth::{Need, Recover};
use crate::protocol;

/// Build the HTTPS client: webpki roots (or the OS roots), plus `--ca-file`.
pub(super) fn build_client(cfg: &RemoteConfig) -> Result<HttpClient, String> {
    https_client(
        cfg.system_roots,
        cfg.ca_file.as_deref(),
        cfg.connect_timeout,
    )
}

/// The one HTTP(S) client builder (the remote upstream's, the OAuth client's, a replica's
/// hop): plain HTTP or TLS with webpki roots (or the OS roots), plus a CA file; HTTP/1.1 and
/// HTTP/2 by ALPN.
pub fn https_client(
    system_roots: bool,
    ca_file: Option<&std::path::Path>,
    connect_timeout: Duration,
) -> Result<HttpClient, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if system_roots {
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            warn!("system root certificates: {e}");
        }
        let (added, _) = roots.add_parsable_certificates(native.certs);
        info!("using {added} system root certificates");
    } else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca_file {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("--ca-file {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "--ca-file {}: no certificates found",
                path.display()
            ));
        }
        let (added, bad) = roots.add_parsable_certificates(certs);
        if bad > 0 || added == 0 {
            return Err(format!(
                "--ca-file {}: {bad} unusable certificate(s)",
                path.display()
            ));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(30)));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(https))
}

pub(super) fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A request the remote refused (`refusal`), with what was sent.
struct Refused {
    resp: Response<Incoming>,
    need: Need,
    challenge: Option<Bearer>,
    sent: Option<HeaderValue>,
}

/// What an answer asks of the OAuth client: a 401 (with its Bearer challenge, if any), or a
/// 403 whose Bearer challenge says `insufficient_scope` (its `scope`, possibly empty).
fn refusal(resp: &Response<Incoming>) -> Option<(Need, Option<Bearer>)> {
    let challenge = crate::oauth::challenge::bearer(
        resp.headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    match resp.status() {
        StatusCode::UNAUTHORIZED => Some((Need::Token, challenge)),
        StatusCode::FORBIDDEN => {
            let c = challenge.filter(|c| c.error.as_deref() == Some("insufficient_scope"))?;
            Some((Need::Scope(c.scope.clone().unwrap_or_default()), Some(c)))
        }
        _ => None,
    }
}

/// Is `resp` a 401 whose DPoP challenge asks for a nonce?
fn asks_nonce(resp: &Response<Incoming>) -> bool {
    resp.status() == StatusCode::UNAUTHORIZED
        && resp
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(crate::oauth::challenge::parse)
            .any(|c| {
                c.scheme.eq_ignore_ascii_case("dpop")
                    && c.param("error") == Some(crate::oauth::dpop::USE_NONCE)
            })
}

/// A short, single-line, bounded excerpt of a body for error messages.
pub(super) fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(200)]);
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Remote {
    pub(super) fn request(
        &self,
        method: Method,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(self.cfg.url.clone());
        if let Some(h) = b.headers_mut() {
            h.insert(
                ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            if !body.is_empty() {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            for (k, v) in &self.cfg.headers {
                h.append(k.clone(), v.clone());
            }
            for (k, v) in headers {
                h.insert(k.clone(), v.clone());
            }
        }
        // The builder cannot fail: the URI and every header were validated up front.
        b.body(Full::new(body))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    /// Send one request with the OAuth token (when logged in); on a 401 refresh or log in, on
    /// a 403 `insufficient_scope` log in again for the wider scope, and send it once more (a
    /// second `insufficient_scope` is the call's error, naming the scope). Without OAuth this
    /// is `send_once`.
    pub(super) async fn send(
        &self,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, Fault> {
        let Some(oauth) = &self.oauth else {
            return self.send_once(req).await;
        };
        if let Some(v) = oauth.header().await {
            req.headers_mut().insert(AUTHORIZATION, v);
        }
        let sent = req.headers().get(AUTHORIZATION).cloned();
        let (parts, body) = req.into_parts();
        let (method, headers) = (parts.method, parts.headers);
        let resp = self
            .send_proved(oauth, &method, headers.clone(), body.clone())
            .await?;
        let Some((need, challenge)) = refusal(&resp) else {
            return Ok(resp);
        };
        // Boxed: a login is rare and its future large; every request's would carry it.
        let refused = Refused {
            resp,
            need,
            challenge,
            sent,
        };
        Box::pin(self.send_after_login(oauth, refused, method, headers, body)).await
    }

    /// The remote refused a request for want of a (better) token: recover one through the
    /// OAuth client (refresh, or a new login) and send the request once more.
    async fn send_after_login(
        &self,
        oauth: &crate::oauth::OAuth,
        r: Refused,
        method: Method,
        mut headers: HeaderMap,
        body: Full<Bytes>,
    ) -> Result<Response<Incoming>, Fault> {
        let Refused {
            resp,
            need,
            challenge,
            sent,
        } = r;
        match oauth.recover(need.clone(), challenge, sent.as_ref()).await {
            Ok(v) => {
                drop(resp);
                headers.insert(AUTHORIZATION, v);
                let resp = self.send_proved(oauth, &method, headers, body).await?;
                match (need, refusal(&resp)) {
                    (Need::Scope(_), Some((Need::Scope(more), _))) => {
                        warn!(
                            "{} still wants scope {more:?} after a new login",
                            self.origin
                        );
                        Err(Fault::Scope(more))
                    }
                    _ => Ok(resp),
                }
            }
            Err(Recover::NotOAuth) => Ok(resp),
            Err(Recover::Scope(more)) => Err(Fault::Scope(more)),
            Err(Recover::Failed(why)) => {
                warn!("OAuth login for {} failed: {why}", self.origin);
                Err(Fault::Login(why))
            }
        }
    }

    /// Send `method` with `headers` and `body` to the remote, with a fresh DPoP proof when the
    /// `Authorization` is a DPoP-bound token; a `DPoP-Nonce` in the answer is kept for the
    /// next proofs, and a 401 `use_dpop_nonce` that brought a new one is answered by sending
    /// the request once more with it (RFC 9449 §9).
    async fn send_proved(
        &self,
        oauth: &crate::oauth::OAuth,
        method: &Method,
        headers: HeaderMap,
        body: Full<Bytes>,
    ) -> Result<Response<Incoming>, Fault> {
        let uri = self.cfg.url.to_string();
        let mut retried = false;
        loop {
            let mut h = headers.clone();
            let proved = h
                .get(AUTHORIZATION)
                .and_then(|a| oauth.proof(method.as_str(), &uri, a))
                .map(|p| h.insert(HeaderName::from_static("dpop"), p))
                .is_some();
            let mut req = Request::new(body.clone());
            *req.method_mut() = method.clone();
            *req.uri_mut() = self.cfg.url.clone();
            *req.headers_mut() = h;
            let resp = self.send_once(req).await?;
            let fresh = resp
                .headers()
                .get(crate::oauth::dpop::NONCE_HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|n| oauth.server_nonce(n));
            if proved && fresh && !retried && asks_nonce(&resp) {
                debug!(
                    "{} asked for a DPoP nonce: sending the request with it",
                    self.origin
                );
                retried = true;
                continue;
            }
            return Ok(resp);
        }
    }

    /// Send one request, with backoff after repeated connection failures.
    async fn send_once(&self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Fault> {
        let wait = {
            let f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            f.1.map(|t| t.saturating_duration_since(Instant::now()))
        };
        if let Some(w) = wait.filter(|w| !w.is_zero()) {
            debug!("backing off {} ms before reconnecting", w.as_millis());
            tokio::time::sleep(w).await;
        }
        let (method, sent) = (req.method().clone(), Instant::now());
        match self.client.request(req).await {
            Ok(r) => {
                let secs = sent.elapsed().as_secs_f64();
                self.obs
                    .http_answer(method.as_str(), r.status().as_u16(), secs);
                let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                if f.0 > 0 {
                    info!("reconnected to {}", self.origin);
                }
                *f = (0, None);
                Ok(r)
            }
            Err(e) if e.is_connect() => {
                let detail = chain(&e);
                let reason = connect_reason(&e);
                let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                f.0 = f.0.saturating_add(1);
                let backoff = Duration::from_millis(100u64 << f.0.min(6).saturating_sub(1))
                    .min(Duration::from_secs(5));
                f.1 = Some(Instant::now() + backoff);
                warn!(
                    "cannot reach {} ({reason}): {detail}; failure {} in a row, next attempt \
                     after {} ms",
                    self.origin,
                    f.0,
                    backoff.as_millis()
                );
                Err(Fault::Unreachable { reason, detail })
            }
            Err(e) => Err(Fault::Broken(chain(&e))),
        }
    }

    /// POST one JSON-RPC frame and read its answer: the response to `our_id` (JSON or SSE),
    /// forwarding notifications and server requests met on the way to `events`. An exchange
    /// that gets no usable answer is counted once, by reason.
    pub(super) async fn exchange(
        &self,
        frame: Bytes,
        headers: &HeaderMap,
        our_id: Option<u64>,
        events: Option<&EventSender>,
        legacy: Option<&Session>,
    ) -> Result<Answer, Fault> {
        let r = self
            .exchange_once(frame, headers, our_id, events, legacy)
            .await;
        if let Err(f) = &r {
            self.count_fault(f);
        }
        r
    }

    pub(super) async fn exchange_once(
        &self,
        frame: Bytes,
        headers: &HeaderMap,
        our_id: Option<u64>,
        events: Option<&EventSender>,
        legacy: Option<&Session>,
    ) -> Result<Answer, Fault> {
        let req = self.request(Method::POST, headers, frame);
        let resp = self.send(req).await?;
        let status = resp.status();
        debug!(
            "remote answered {} over {:?}",
            status.as_u16(),
            resp.version()
        );
        let session = header_str(resp.headers(), protocol::H_SESSION_ID);
        let ct = header_str(resp.headers(), "content-type").unwrap_or_default();
        let head = answer::classify(status, &ct, legacy.is_some_and(|s| s.id.is_some()))?;
        if head == Head::Accepted {
            return Ok(Answer {
                frame: None,
                session,
            });
        }
        if head == Head::Stream {
            let Some(our_id) = our_id else {
                return Ok(Answer {
                    frame: None,
                    session,
                });
            };
            let mut dec = SseDecoder::new(self.cfg.max_response);
            let mut body = resp.into_body();
            let mut attempts = 0u32;
            loop {
                match self.read_sse(&mut body, &mut dec, our_id, events).await {
                    Ok(Some(frame)) => {
                        return Ok(Answer {
                            frame: Some(frame),
                            session,
                        })
                    }
                    outcome => {
                        // Ended (or broke) without the answer: 2025 servers that gave event
                        // ids may be resumed with GET + Last-Event-ID.
                        let (Some(sess), Some(last)) = (legacy, dec.last_event_id.clone()) else {
                            return Err(match outcome {
                                Err(f) => f,
                                _ => Fault::Broken(
                                    "the response stream ended without an answer".into(),
                                ),
                            });
                        };
                        attempts += 1;
                        if attempts > 5 {
                            return Err(Fault::Broken(
                                "the response stream could not be resumed".into(),
                            ));
                        }
                        let wait = Duration::from_millis(dec.retry_ms.unwrap_or(500).min(30_000));
                        debug!(
                            "resuming the response stream after {} ms (Last-Event-ID)",
                            wait.as_millis()
                        );
                        tokio::time::sleep(wait).await;
                        let mut h = self.session_headers(sess);
                        if let Ok(v) = HeaderValue::from_str(&last) {
                            h.insert(HeaderName::from_static(protocol::H_LAST_EVENT_ID), v);
                        }
                        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                        let r = self
                            .send(self.request(Method::GET, &h, Bytes::new()))
                            .await?;
                        if !r.status().is_success() {
                            return Err(Fault::Broken(format!(
                                "the response stream broke and resuming it got HTTP {}",
                                r.status().as_u16()
                            )));
                        }
                        body = r.into_body();
                        dec = {
                            let mut d = SseDecoder::new(self.cfg.max_response);
                            d.last_event_id = Some(last);
                            d.retry_ms = dec.retry_ms;
                            d
                        };
                    }
                }
            }
        }
        // JSON (or anything else): read it whole, bounded; a successful one line by line as
        // it arrives, in case it is newline-delimited messages (`answer::drain_json_lines`).
        let frame = self.read_json(resp.into_body(), status, events).await?;
        Ok(Answer { frame, session })
    }

    /// A JSON body. A successful one: the messages on its complete lines as they arrive
    /// (events to `events`, a response is the answer), then what is left, read as one JSON
    /// answer; any other is read whole.
    async fn read_json(
        &self,
        mut body: Incoming,
        status: StatusCode,
        events: Option<&EventSender>,
    ) -> Result<Option<Bytes>, Fault> {
        if !status.is_success() {
            let bytes = self.read_body(body).await?;
            return answer::json_answer(status, bytes);
        }
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Fault::Broken(chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                let mut met = Vec::new();
                let r = answer::feed_json(&mut buf, &data, self.cfg.max_response, &mut met);
                forward(events, met).await;
                if let Some(f) = r? {
                    return Ok(Some(f));
                }
            }
        }
        answer::json_answer(status, buf.freeze())
    }

    /// The next body frame, or None at the end; a stream silent past `--idle-timeout` is an
    /// error.
    pub(super) async fn next_frame(
        &self,
        body: &mut Incoming,
    ) -> Option<Result<hyper::body::Frame<Bytes>, Fault>> {
        let fut = body.frame();
        let r = match self.cfg.idle_timeout {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r,
                Err(_) => {
                    return Some(Err(Fault::Broken(format!(
                        "the event stream was silent for {} ms (--idle-timeout)",
                        t.as_millis()
                    ))))
                }
            },
            None => fut.await,
        };
        r.map(|f| f.map_err(|e| Fault::Broken(chain(&e))))
    }

    pub(super) async fn read_body(&self, mut body: Incoming) -> Result<Bytes, Fault> {
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Fault::Broken(chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                answer::append_bounded(&mut buf, &data, self.cfg.max_response)?;
            }
        }
        Ok(buf.freeze())
    }

    /// Read SSE events until the response to `our_id` (Some) or the end of the stream (None).
    pub(super) async fn read_sse(
        &self,
        body: &mut Incoming,
        dec: &mut SseDecoder,
        our_id: u64,
        events: Option<&EventSender>,
    ) -> Result<Option<Bytes>, Fault> {
        loop {
            let mut met = Vec::new();
            let r = answer::drain_sse(dec, Some(our_id), false, &mut met);
            forward(events, met).await;
            if let Some(frame) = r? {
                return Ok(Some(frame));
            }
            match self.next_frame(body).await {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        dec.push(&data);
                    }
                }
                Some(Err(f)) => return Err(f),
                None => {
                    let mut met = Vec::new();
                    let r = answer::drain_sse(dec, Some(our_id), true, &mut met);
                    forward(events, met).await;
                    return r;
                }
            }
        }
    }

    /// Handle one SSE item: the response to `our_id` is returned; notifications and server
    /// requests go to `events`; other responses are dropped.
    pub(super) async fn sse_item(
        &self,
        item: SseItem,
        our_id: Option<u64>,
        events: Option<&EventSender>,
    ) -> Result<Option<Bytes>, Fault> {
        match answer::sse_action(item, our_id)? {
            SseAction::Answer(frame) => Ok(Some(frame)),
            SseAction::Event(ev) => {
                forward(events, vec![ev]).await;
                Ok(None)
            }
            SseAction::Skip => Ok(None),
        }
    }
}

/// Hand the events met in a stream to the caller, in order (none without a caller).
async fn forward(events: Option<&EventSender>, met: Vec<CallEvent>) {
    let Some(tx) = events else { return };
    for ev in met {
        let _ = tx.send(ev).await;
    }
}
