//! Era translation: everything that maps one protocol era onto the other, in one module tree
//! that both faces (and the remote upstream) use, so a rule holds the same in both directions.
//!
//! - [`lifecycle`]: `initialize` ⇄ `server/discover` synthesis (a 2025 client of a 2026
//!   upstream, a 2026 client of a 2025 upstream).
//!
//! Related pure pieces still live beside it: `crate::mrtr` (signed `requestState`, parked
//! calls, input rounds, the capability gate), `crate::notifications` (listens, log floors) and
//! `crate::protocol` (result translation).

pub mod lifecycle;
