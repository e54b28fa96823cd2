//! Era translation: everything that maps one protocol era onto the other, in one module tree
//! that both faces (and the remote upstream) use, so a rule holds the same in both directions.
//!
//! - [`lifecycle`]: `initialize` ⇄ `server/discover` synthesis (a 2025 client of a 2026
//!   upstream, a 2026 client of a 2025 upstream);
//! - [`mrtr`]: multi-round-trip requests: signed `requestState` (with the signer's key id, so
//!   other bridges' states pass), parked calls, input requests for 2025 peers, the capability
//!   gate (`may_ask`) and bridge-minted request ids;
//! - [`request_state`]: the signed `requestState` itself (format, keys, HMAC, checks), which
//!   `mrtr` re-exports;
//! - [`notifications`]: listens and their filters, resource subscription ref-counts,
//!   `subscriptionId` tags, acknowledgement/completion bodies, the 2025 log-level floor;
//! - [`park`]: parking a 2026 caller's call on a 2025 upstream (the gate per request, the
//!   signed state, the bounded store, the `input_required` body), for both faces;
//! - [`rounds`]: the driver of a 2025 caller's input rounds with a 2026 upstream (both faces
//!   run it; each supplies a `RoundsFace` for its transport).
//!
//! Result translation (2025 ⇄ 2026 result shapes) is pure byte work in `crate::protocol`. The
//! listen held for a 2025 caller on a 2026 upstream is per-caller state, so it lives in
//! `crate::core::held` (it starts its call through `core::start`; `era` stays below `core`).

pub mod lifecycle;
pub mod mrtr;
pub mod notifications;
pub mod park;
pub mod request_state;
pub mod rounds;
