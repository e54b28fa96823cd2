//! Faces: where the peer that asks connects: the Streamable HTTP server face (`http` and the
//! modules under it) and the host's stdio face of `connect` (`stdio`).
//!
//! The HTTP face's modules point one way: `http` (guards, routing) → `post` (POST
//! classification) → `modern` / `session_http` (2026 stateless, 2025 sessions) → `rounds`,
//! `listen` (era translation) → `run` (a call for a POST) → `state` (`App`, `HttpConfig`) →
//! `session` (2025 session state) → `respond` (JSON or SSE) → `replay` (a 2025-11-25
//! session's resumable SSE streams: event ids, priming, the replay log and its pump and reader;
//! `session_http` answers a GET with `Last-Event-ID` from it). `hop` (a request another replica
//! owns, forwarded there) is called by `http`, `post` and `modern` before they serve it. `accept` (connections and what
//! they may cost) hands each request to a handler closure, so it knows no route; the handlers
//! know only its request body type. `observe` (per-message counts)
//! and `metrics_http` (the `/metrics` listener) hang off that chain the same way; nothing
//! below points back up.
//!
//! The face calls auth's hook, never the other way round: the HTTP face's configuration is
//! handed to `crate::auth` through the [`crate::auth::Endpoint`] trait implemented here.

pub mod accept;
pub mod hop;
pub mod http;
pub mod listen;
pub mod metrics_http;
pub mod modern;
pub mod observe;
pub mod post;
pub mod replay;
pub mod respond;
pub mod rounds;
pub mod run;
pub mod session;
pub mod session_http;
pub mod state;
pub mod stdio;

use std::sync::Arc;

use crate::auth::{tls::Tls, AuthSlot, Endpoint};

impl Endpoint for http::HttpConfig {
    fn mcp_path(&self) -> &str {
        &self.path
    }

    fn auth_slot(&self) -> &AuthSlot {
        &self.auth
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        http::origin_allowed(self, origin)
    }

    fn install(&mut self, auth: AuthSlot, tls: Option<Arc<Tls>>) {
        self.auth = auth;
        self.tls = tls;
    }
}
