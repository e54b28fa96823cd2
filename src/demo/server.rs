//! The demo server's state and the routing of one input line.
//!
//! [`Shared`] is everything the reader loop and the background tasks share: the 2025 session
//! (what `initialize` and `logging/setLevel` set), calls in flight (cancellable by id), open
//! listens, and our own pending server->client requests. Each input line is classified here as
//! a request, a notification or a response and handed on: requests to [`super::era`] (which
//! era, then the method), responses to [`super::input`] (answers to our requests),
//! notifications handled in place (cancellation, `initialized`). Long calls run through
//! [`Shared::spawn_tracked`], so cancelling one is a map removal and a oneshot send, and a
//! cancelled call can never answer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::IgnoredAny;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::input::ClientReply;
use super::listen::Listen;
use super::wire::{
    error_line, id_is_valid, id_key, parse_obj, raw_str, result_line, rpc_error_line, Envelope,
    IdKey, Level, Params, RpcError, ToolResult, EX_CACHED, EX_COMPLETE, EX_NONE, INVALID_REQUEST,
    LATEST_LEGACY, PARSE_ERROR,
};
use super::DemoMode;

/// The 2025 session: one per process (the demo serves one client).
pub(super) struct LegacySession {
    pub(super) initialized: bool,
    pub(super) version: String,
    pub(super) client_caps: Value,
    pub(super) log_level: Option<Level>,
    /// Resources the client subscribed to (`resources/subscribe`).
    pub(super) subscriptions: std::collections::BTreeSet<String>,
}

pub(super) struct InFlight {
    cancel: oneshot::Sender<()>,
    display: String,
}

/// What the reader loop and the call tasks share.
pub(super) struct Shared {
    pub(super) mode: DemoMode,
    pub(super) out: mpsc::Sender<Vec<u8>>,
    pub(super) legacy: Mutex<LegacySession>,
    pub(super) inflight: Mutex<HashMap<IdKey, InFlight>>,
    pub(super) listens: Mutex<HashMap<IdKey, Listen>>,
    pub(super) pending: Mutex<HashMap<String, oneshot::Sender<ClientReply>>>,
    pub(super) next_server_id: AtomicU64,
}

/// Lock, recovering the data if a holder panicked (the demo keeps serving).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Per-request context of a modern (2026-07-28) request.
pub(super) struct Modern<'a> {
    pub(super) caps: &'a RawValue,
    pub(super) log_level: Option<Level>,
}

/// One request, parsed and classified by era.
pub(super) struct Request<'a> {
    pub(super) id: &'a RawValue,
    pub(super) method: &'a str,
    pub(super) params: Params<'a>,
    pub(super) progress_token: Option<&'a RawValue>,
    pub(super) modern: Option<Modern<'a>>,
}

impl Request<'_> {
    pub(super) fn is_modern(&self) -> bool {
        self.modern.is_some()
    }

    /// Extras for an ordinary final result.
    pub(super) fn ex(&self) -> &'static str {
        if self.is_modern() {
            EX_COMPLETE
        } else {
            EX_NONE
        }
    }

    /// Extras for a cacheable final result.
    pub(super) fn ex_cached(&self) -> &'static str {
        if self.is_modern() {
            EX_CACHED
        } else {
            EX_NONE
        }
    }

    pub(super) fn reply<T: Serialize + ?Sized>(&self, result: &T, extras: &str) -> Reply {
        Ok(Some(result_line(self.id, result, extras)))
    }

    pub(super) fn text(&self, text: &str) -> Reply {
        self.reply(&ToolResult::text(text), self.ex())
    }

    pub(super) fn reject_cursor(&self) -> Result<(), RpcError> {
        match self.params.cursor {
            Some(c) if c.get() != "null" => Err(RpcError::invalid_params("invalid cursor")),
            _ => Ok(()),
        }
    }
}

/// `Ok(Some(line))`: answer now; `Ok(None)`: answered elsewhere (or never).
pub(super) type Reply = Result<Option<Vec<u8>>, RpcError>;

impl Shared {
    pub(super) fn new(mode: DemoMode, out: mpsc::Sender<Vec<u8>>) -> Self {
        Shared {
            mode,
            out,
            legacy: Mutex::new(LegacySession {
                initialized: false,
                version: LATEST_LEGACY.to_owned(),
                client_caps: Value::Null,
                log_level: None,
                subscriptions: std::collections::BTreeSet::new(),
            }),
            inflight: Mutex::new(HashMap::new()),
            listens: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_server_id: AtomicU64::new(1),
        }
    }

    /// Queue one line for output; false if the output is gone.
    pub(super) async fn emit(&self, line: Vec<u8>) -> bool {
        self.out.send(line).await.is_ok()
    }

    /// Stop everything in flight (input is closed). Returns how many
    /// requests were abandoned.
    pub(super) fn shutdown(&self) -> usize {
        let n = lock(&self.inflight).drain().count();
        lock(&self.pending).clear();
        lock(&self.listens).clear();
        n
    }

    /// Handle one input line. Returns false once the output is gone.
    pub(super) async fn handle_line(self: &Arc<Self>, line: &[u8]) -> bool {
        let line = line.trim_ascii();
        if line.is_empty() {
            return true;
        }
        if line[0] != b'{' {
            if serde_json::from_slice::<IgnoredAny>(line).is_ok() {
                eprintln!("demo: ignoring a JSON message that is not an object");
                return true;
            }
            return self
                .emit(error_line(None, PARSE_ERROR, "Parse error", None))
                .await;
        }
        let env: Envelope = match serde_json::from_slice(line) {
            Ok(env) => env,
            Err(e) => {
                let (code, message) = if e.is_data() {
                    (INVALID_REQUEST, "Invalid Request")
                } else {
                    (PARSE_ERROR, "Parse error")
                };
                eprintln!("demo: bad input line: {e}");
                return self.emit(error_line(None, code, message, None)).await;
            }
        };
        match (env.method, env.id) {
            (Some(method), Some(id)) => {
                if !id_is_valid(id) {
                    return self
                        .emit(error_line(
                            None,
                            INVALID_REQUEST,
                            "Invalid Request: id must be a string or an integer",
                            None,
                        ))
                        .await;
                }
                let line = match self.handle_request(id, &method, env.params).await {
                    Ok(Some(line)) => line,
                    Ok(None) => return true,
                    Err(e) => rpc_error_line(Some(id), &e),
                };
                self.emit(line).await
            }
            (Some(method), None) => {
                self.handle_notification(&method, env.params);
                true
            }
            (None, Some(id)) if env.result.is_some() || env.error.is_some() => {
                self.handle_response(id, env.result, env.error);
                true
            }
            (None, id) => {
                let id = id.filter(|id| id_is_valid(id));
                self.emit(error_line(
                    id,
                    INVALID_REQUEST,
                    "Invalid Request: no method",
                    None,
                ))
                .await
            }
        }
    }

    // -- notifications -----------------------------------------------------

    fn handle_notification(&self, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/cancelled" => {
                let Some(params) = params.and_then(|p| parse_obj::<Params>(p.get()).ok()) else {
                    eprintln!("demo: ignoring notifications/cancelled with bad params");
                    return;
                };
                let Some((key, _)) = params.request_id.and_then(id_key) else {
                    eprintln!("demo: ignoring notifications/cancelled without a usable requestId");
                    return;
                };
                let reason = params
                    .reason
                    .and_then(raw_str)
                    .map(|r| r.replace(['\n', '\r'], " "))
                    .unwrap_or_default();
                let entry = lock(&self.inflight).remove(&key);
                if let Some(entry) = entry {
                    let _ = entry.cancel.send(());
                    eprintln!("demo: cancelled id={} reason={}", entry.display, reason);
                    return;
                }
                let listen = lock(&self.listens).remove(&key);
                if let Some(listen) = listen {
                    eprintln!(
                        "demo: listen ended id={} reason={}",
                        listen.id.get(),
                        reason
                    );
                }
            }
            "notifications/initialized" => {
                lock(&self.legacy).initialized = true;
            }
            _ => {}
        }
    }

    /// Run `fut` as a cancellable task registered under the request's id.
    /// Its output line (if any) is sent unless the request was cancelled.
    pub(super) fn spawn_tracked<F>(self: &Arc<Self>, id: &RawValue, fut: F) -> Result<(), RpcError>
    where
        F: Future<Output = Option<Vec<u8>>> + Send + 'static,
    {
        let (key, display) =
            id_key(id).ok_or_else(|| RpcError::new(INVALID_REQUEST, "Invalid Request: bad id"))?;
        let (cancel_tx, cancel_rx) = oneshot::channel();
        {
            let mut map = lock(&self.inflight);
            if map.contains_key(&key) || lock(&self.listens).contains_key(&key) {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "duplicate in-flight request id",
                ));
            }
            map.insert(
                key.clone(),
                InFlight {
                    cancel: cancel_tx,
                    display,
                },
            );
        }
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let line = tokio::select! {
                biased;
                _ = cancel_rx => return,
                line = fut => line,
            };
            // Whoever removes the entry first wins: a cancel that got there
            // first means nothing more may be sent for this request.
            if lock(&shared.inflight).remove(&key).is_none() {
                return;
            }
            if let Some(line) = line {
                let _ = shared.out.send(line).await;
            }
        });
        Ok(())
    }
}
