//! Upstreams: the peers that answer: a supervised stdio child process (`serve`) or a remote
//! Streamable HTTP server (`connect`).

pub mod child;
pub mod observe;
pub mod remote;
