//! Integration tests of the daemon: the configuration file, SIGHUP reloads (servers and
//! auth), aggregation endpoints, systemd readiness and watchdog, replicas sharing sessions, and shutdown leaving
//! nothing behind. `cargo test --test daemon` runs them; `cargo test --test daemon replicas::`
//! one module.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod auth_reload;
mod config;
mod endpoints;
mod reload;
mod replicas;
mod shutdown;
mod stop_ladder;
mod systemd;
