//! Built-in demo MCP server (`mcp-bridge demo-server`, and the child of `serve --demo`).
//!
//! A module of the binary (`src/main.rs` declares it), not of the library: nothing in the bridge
//! links the demo, it only spawns `mcp-bridge demo-server`, so the demo stays out of the
//! library's public API.
//!
//! This module tree owns a small, self-contained stdio MCP server used as the
//! bridge's test and benchmark child. It speaks both protocol eras:
//!
//! * **2025 (legacy)**: `initialize` handshake, server->client requests
//!   (`sampling/createMessage`, `elicitation/create` in form and URL mode,
//!   `roots/list`) sent on the output stream with server-minted ids
//!   (`"demo-N"`; URL elicitations carry an `elicitationId` and, once
//!   accepted, are followed by `notifications/elicitation/complete`),
//!   session-wide `logging/setLevel`, untagged list-changed notifications.
//! * **2026-07-28 (modern)**: stateless requests identified by
//!   `params._meta["io.modelcontextprotocol/protocolVersion"]`,
//!   `server/discover`, `resultType` / cache hints on results, multi
//!   round-trip (`input_required`) instead of server->client requests,
//!   request-scoped logging and `subscriptions/listen`.
//!
//! Wire format: one JSON-RPC message per line in each direction. The output
//! stream carries only MCP messages; human-readable logs go to stderr, each
//! line prefixed `demo: `. Requests are handled concurrently: quick ones
//! inline in the reader loop, long-running ones (`slow`, legacy
//! `sample`/`elicit`/`elicit_url`/`roots`) in their own tasks that `notifications/cancelled`
//! can stop. A single writer task owns the output and batches queued lines
//! into one flush.
//!
//! Nothing here panics on peer input: malformed lines get JSON-RPC errors.
//!
//! # Layout
//!
//! One file per job, in the order a line travels:
//!
//! * this file: the entry the binary calls ([`DemoMode`], [`main_with_mode`], [`serve`]) and
//!   the runtime;
//! * `stdio`: process stdin/stdout as reactor-driven pipes;
//! * `io`: the reader loop, line splitting and the batching writer;
//! * `wire`: JSON-RPC shapes in (borrowed) and out (byte builders), error codes, results;
//! * `server`: the shared state, routing of one line, cancellable background calls;
//! * `era`: which era a request is in (by [`DemoMode`] and `_meta`), `initialize`,
//!   `server/discover`;
//! * `catalog`: the plain methods (resources, prompts, completion, logging, subscriptions);
//! * `tools`: the `tools/call` table and the self-contained tools;
//! * `listen`: `subscriptions/listen` and the change notifications (`notify`);
//! * `input`: the tools that need the client's input (sampling, elicitation, roots) in both
//!   eras: server->client requests for 2025, `input_required` rounds for 2026.
//!
//! The demo is the bridge's test peer, so it deliberately restates the wire constants
//! (versions, `_meta` keys, error codes) instead of importing the bridge's: a mistake in
//! `mcp_bridge::protocol` should make the tests fail, not move both ends together. It shares
//! only the vocabulary type [`Era`].

mod catalog;
mod era;
mod input;
mod io;
mod listen;
mod server;
use mcp_bridge::pipes as stdio;
#[cfg(test)]
mod tests;
mod tools;
mod wire;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use io::serve;
use mcp_bridge::protocol::Era;

/// Which protocol eras the demo server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DemoMode {
    /// Both eras: modern `_meta` requests are served statelessly, everything
    /// else with 2025 semantics.
    #[default]
    Dual,
    /// One era only. `Only(Era::Legacy)`: a 2025-only server (no `server/discover`, modern
    /// `_meta` is ignored). `Only(Era::Modern)`: a 2026-only server (`initialize` and
    /// `_meta`-less requests are refused).
    Only(Era),
}

impl DemoMode {
    /// The command-line spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            DemoMode::Dual => "dual",
            DemoMode::Only(Era::Legacy) => "legacy",
            DemoMode::Only(Era::Modern) => "modern",
        }
    }

    /// Does a server in this mode speak `era`?
    pub fn speaks(self, era: Era) -> bool {
        match self {
            DemoMode::Dual => true,
            DemoMode::Only(only) => only == era,
        }
    }
}

impl fmt::Display for DemoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing an unknown mode name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseDemoModeError(String);

impl fmt::Display for ParseDemoModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown era {:?} (expected dual, legacy or modern)",
            self.0
        )
    }
}

impl std::error::Error for ParseDemoModeError {}

impl FromStr for DemoMode {
    type Err = ParseDemoModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dual" => Ok(DemoMode::Dual),
            "legacy" => Ok(DemoMode::Only(Era::Legacy)),
            "modern" => Ok(DemoMode::Only(Era::Modern)),
            other => Err(ParseDemoModeError(other.to_owned())),
        }
    }
}

/// Blocking entry for the `demo-server` subcommand: builds a tokio
/// current-thread runtime and serves MCP on stdin/stdout until stdin closes.
///
/// When stdin/stdout are pipes (the normal case for a spawned child) they
/// are driven by the reactor directly instead of through tokio's
/// blocking-pool stdio, which cuts per-message latency by an order of
/// magnitude; blocking mode is restored on exit.
///
/// May be called from inside another tokio runtime: the server then runs on
/// a thread of its own (the caller's thread blocks until it returns).
/// Answer `tools/list` in pages of `n` tools (0: one page); set once, before serving.
pub fn set_tools_page(n: usize) {
    tools::TOOLS_PAGE.store(n, std::sync::atomic::Ordering::Relaxed);
}

pub fn main_with_mode(mode: DemoMode) -> std::io::Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return std::thread::scope(|s| s.spawn(|| run_stdio(mode)).join())
            .unwrap_or_else(|_| Err(std::io::Error::other("demo server thread panicked")));
    }
    run_stdio(mode)
}

fn run_stdio(mode: DemoMode) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let (input, output) = stdio::open();
        let result = serve(input, output, mode).await;
        stdio::restore();
        result
    });
    // A stdin read may still sit in the blocking pool; do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}

#[cfg(test)]
mod mode_tests {
    use super::*;

    #[test]
    fn mode_parses() {
        assert_eq!("dual".parse::<DemoMode>(), Ok(DemoMode::Dual));
        assert_eq!(
            "legacy".parse::<DemoMode>(),
            Ok(DemoMode::Only(Era::Legacy))
        );
        assert_eq!(
            "modern".parse::<DemoMode>(),
            Ok(DemoMode::Only(Era::Modern))
        );
        assert!("both".parse::<DemoMode>().is_err());
        assert_eq!(DemoMode::default().to_string(), "dual");
        for m in ["dual", "legacy", "modern"] {
            assert_eq!(m.parse::<DemoMode>().map(DemoMode::as_str), Ok(m));
        }
    }

    #[test]
    fn modes_speak_their_eras() {
        assert!(DemoMode::Dual.speaks(Era::Legacy) && DemoMode::Dual.speaks(Era::Modern));
        assert!(!DemoMode::Only(Era::Legacy).speaks(Era::Modern));
        assert!(!DemoMode::Only(Era::Modern).speaks(Era::Legacy));
    }
}
