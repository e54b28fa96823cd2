//! Integration tests of `connect`: a stdio host in front of a remote Streamable HTTP server
//! (the happy path in both host eras, faults, notifications and logging, metrics, TLS, header
//! files, a slow host, the official Rust SDK's server as the remote).
//! `cargo test --test connect` runs them; `cargo test --test connect faults::` one module.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod bounds;
mod faults;
mod happy;
mod listen;
mod metrics;
mod readme_headers;
mod rmcp;
mod slow_host;
mod tasks;
mod tls;
