//! The one support library of the integration tests. Every test binary starts the real
//! `mcp-bridge` through `Bridge::builder()` (bridge.rs: spawn, address from the log, stderr,
//! stop on drop) and talks to it with the pieces here: MCP over HTTP in both eras (http.rs),
//! a stdio host driving `connect` (stdio.rs), metrics (metrics.rs), auth fixtures (auth.rs),
//! config-file daemons (daemon.rs), elicitation in both eras (elicit.rs), /proc facts (procs.rs), the collected log (log.rs) and
//! the soak's workload and report (soak.rs, soak_report.rs).
//!
//! Modules are private and re-exported flat, so a test says `mod support; use support::*;`
//! and a name means one thing across all tests. Each test binary compiles this tree on its
//! own and uses only part of it, hence `dead_code` is allowed here.

#![allow(dead_code, unused_imports)]

mod auth;
mod bridge;
mod daemon;
mod elicit;
mod http;
mod log;
mod metrics;
mod procs;
mod soak;
mod soak_report;
mod stdio;

pub use self::auth::*;
pub use self::bridge::*;
pub use self::daemon::*;
pub use self::elicit::*;
pub use self::http::*;
pub use self::log::*;
pub use self::metrics::*;
pub use self::procs::*;
pub use self::soak::*;
pub use self::soak_report::*;
pub use self::stdio::*;
