//! Integration tests of the two protocol eras and the translation between them: the 2026
//! stateless path, 2025 sessions, the era matrix of server-initiated flows, the core's rules
//! through every face × upstream × caller, and `connect` translating between eras.
//! `cargo test --test eras` runs them; `cargo test --test eras core_matrix::` one module.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod connect;
mod connect_get_stream;
mod core_matrix;
mod era_matrix;
mod legacy_input_rounds;
mod modern_http;
mod session_2025;
