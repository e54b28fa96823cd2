//! Integration tests of authentication: `serve --auth bearer|jwt`, TLS, `/metrics` behind
//! auth, and `connect`'s OAuth logins end to end.
//! `cargo test --test auth` runs them; `cargo test --test auth oauth::` one module.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod bearer;
mod jwt;
mod oauth;
mod readme_metrics;
mod tls;
