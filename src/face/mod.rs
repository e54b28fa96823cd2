//! Faces: where the peer that asks connects. Today: the Streamable HTTP server face
//! ([`http`], with [`respond`], [`session`], [`modern`], [`rounds`], [`listen`]) and the host's
//! stdio face of `connect` ([`stdio`]).
//!
//! The face calls auth's hook, never the other way round: the HTTP face's configuration is
//! handed to `crate::auth` through the [`crate::auth::Endpoint`] trait implemented here.

pub mod http;
pub mod listen;
pub mod metrics_http;
pub mod modern;
pub mod observe;
pub mod respond;
pub mod rounds;
pub mod session;
pub mod stdio;
pub mod stdio_observe;

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
