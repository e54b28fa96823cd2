//! A command server's `pool`: read from its table and checked against its isolation (the
//! `--pool-*` flags over it are `cli::plan`'s).

use super::Isolation;
use crate::upstream::pool::PoolSize;

use super::file;

/// A pool of more than one child and a child per session do not go together.
pub(crate) fn fits(pool: PoolSize, isolation: Isolation) -> Result<(), String> {
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
