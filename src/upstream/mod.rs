//! Upstreams: the peers that answer. Today: a supervised stdio child process.

pub mod child;
pub mod observe;
