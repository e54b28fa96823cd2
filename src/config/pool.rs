//! A command server's `pool`: read from its table, from `--pool-min/--pool-max/--pool-idle`,
//! or both (the flags over the file), and checked against its isolation.

use crate::cli::{Isolation, ServeArgs};
use crate::upstream::pool::PoolSize;

use super::file;

/// A pool of more than one child and a child per session do not go together.
pub(super) fn fits(pool: PoolSize, isolation: Isolation) -> Result<(), String> {
    if pool.max > 1 && isolation == Isolation::Session {
        return Err(
            "a pool (max > 1) and isolation = \"session\" (a child per session) \
                    exclude each other"
                .into(),
        );
    }
    Ok(())
}

/// A server table's `pool`, checked (defaults for what it leaves out).
pub(super) fn of(p: Option<file::PoolFile>) -> Result<PoolSize, String> {
    let d = PoolSize::default();
    let Some(p) = p else { return Ok(d) };
    let min = p.min.unwrap_or(d.min);
    let size = PoolSize {
        min,
        max: p.max.unwrap_or(min.max(d.max)),
        idle: p.idle.map_or(d.idle, |v| v.0),
    };
    size.check().map(|()| size)
}

/// The pool flags given on the command line over a server's `pool` from the file; `given`
/// says which flags were.
pub(super) fn override_with(
    p: &mut PoolSize,
    args: &ServeArgs,
    given: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let flags = args.pool_size();
    if given("pool_min") {
        p.min = flags.min;
        p.max = p.max.max(p.min);
    }
    if given("pool_max") {
        p.max = flags.max;
    }
    if given("pool_idle") {
        p.idle = flags.idle;
    }
    p.check()
}
