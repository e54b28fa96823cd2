//! Faces: where the peer that asks connects. Today: the Streamable HTTP server face.

pub mod http;
pub mod listen;
pub mod metrics_http;
pub mod modern;
pub mod observe;
pub mod respond;
pub mod rounds;
pub mod session;
pub mod stdio;
pub mod stdio_observe;
