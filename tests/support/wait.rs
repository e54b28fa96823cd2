//! The generic bounded wait (`until`: poll a condition until it holds or time runs out) and
//! `under_ci()`, the one reading of the `CI` variable that turns a visible skip into a
//! failure. The specific waits (`Log::wait_count`, `Scraper::until`, `FakeRemote::wait_for`)
//! say what they wait for; this one is for a condition a test keeps itself (a counter its
//! fake server bumps).

use std::time::{Duration, Instant};

/// Poll `ok` every 20 ms until it holds (true) or `timeout` passed (false; `ok` is asked once
/// more at the end, so a condition that became true at the deadline counts).
pub async fn until(timeout: Duration, ok: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !ok() {
        if Instant::now() >= deadline {
            return ok();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// True under CI (`CI=1` or `CI=true`, as `.ci/lib.sh`'s `ci_is_ci`): a test that would skip
/// for want of a tool fails instead.
pub fn under_ci() -> bool {
    matches!(
        std::env::var("CI").as_deref(),
        Ok("1" | "true" | "TRUE" | "True")
    )
}
