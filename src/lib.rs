//! mcp-bridge: bridges Model Context Protocol transports (stdio <-> Streamable HTTP) across
//! protocol eras (2025 sessions, 2026-07-28 stateless).
//!
//! Layers: `jsonrpc`, `framing` and `protocol` are pure functions over bytes; `upstream` and
//! `face` move bytes; `call` is the core between them (the `Upstream` seam); `era` holds the
//! translation both directions share; `daemon` runs `serve` (faces in front of upstreams),
//! `app` runs `connect`; `cluster` joins replicas of `serve` (sealed owners, the hop). `auth` sits below `face` (the face calls auth's hook); both answer
//! HTTP with `http_util`'s bodies.

// An HTTP response is the natural early-return of a handler; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

pub mod app;
pub mod audit;
pub mod auth;
pub mod call;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod core;
pub mod daemon;
pub mod era;
pub mod error;
pub mod face;
pub mod framing;
pub mod http_util;
pub mod jsonrpc;
pub mod metrics;
pub mod oauth;
pub mod pipes;
pub mod protocol;
pub mod reload;
pub mod telemetry;
pub mod upstream;
