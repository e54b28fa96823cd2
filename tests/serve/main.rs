//! Integration tests of `serve`: the HTTP face in front of stdio children and remotes
//! (calls, cancellation, attribution, pools, child faults, guards, connection limits, metrics,
//! logs, the README's serve flags), the official Rust SDK as its client, and the house rules.
//! `cargo test --test serve` runs them; `cargo test --test serve pool::` one module.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod attribution;
mod cancellation;
mod child_faults;
mod child_start;
mod concurrency;
mod guards;
mod h2_limits;
mod house;
mod limits;
mod metrics_truth;
mod observability;
mod pool;
mod readme_child;
mod readme_keepalive;
mod readme_logs;
mod readme_sessions_metric;
mod resume;
mod rmcp_client;
mod tasks;
mod upstream;
mod workers;
