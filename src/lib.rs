//! mcp-bridge: bridges Model Context Protocol transports (stdio <-> Streamable HTTP) across
//! protocol eras (2025 sessions, 2026-07-28 stateless).

pub mod jsonrpc;
pub mod framing;
pub mod protocol;
