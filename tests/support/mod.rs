//! The one support library of the integration tests. Every test binary starts the real
//! `mcp-bridge` through `Bridge::builder()` (bridge.rs: spawn, address from the log, stderr,
//! stop on drop) and talks to it with the pieces here: MCP over HTTP in both eras (http.rs),
//! a stdio host driving `connect` (stdio.rs), metrics (metrics.rs), auth fixtures (auth.rs),
//! config-file daemons (daemon.rs), elicitation in both eras (elicit.rs), /proc facts
//! (procs.rs), fake remotes of either era that record what reached them (remote.rs), the
//! collected log (log.rs), the generic bounded wait and `under_ci()` (wait.rs), the lock of
//! heavy tests (serial.rs) and the soak's
//! workload and report (soak.rs, soak_report.rs).
//!
//! There are six test binaries, one an area (`tests/{serve,connect,auth,daemon,eras,soak}/
//! main.rs`); each main.rs says `#[path = "../support/mod.rs"] mod support;` and its modules
//! `use crate::support; use support::*;`. Modules here are private and re-exported flat, so a
//! name means one thing across all tests. Each binary uses only part of this tree, hence
//! `dead_code` is allowed here.

#![allow(dead_code, unused_imports)]

mod auth;
mod bridge;
mod daemon;
mod elicit;
mod http;
mod log;
mod metrics;
mod procs;
mod remote;
mod serial;
mod soak;
mod soak_report;
mod stdio;
mod wait;

pub use self::auth::*;
pub use self::bridge::*;
pub use self::daemon::*;
pub use self::elicit::*;
pub use self::http::*;
pub use self::log::*;
pub use self::metrics::*;
pub use self::procs::*;
pub use self::remote::*;
pub use self::serial::*;
pub use self::soak::*;
pub use self::soak_report::*;
pub use self::stdio::*;
pub use self::wait::*;
