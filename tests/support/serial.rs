//! The lock of the tests that need the machine to themselves: ones that pick a free port and
//! bind it later (another test could take it in between) or put heavy load on the bridge (a
//! few hundred connections or callers). They take `serial().await` first and so run one at a
//! time within their binary, while the light tests beside them keep running in parallel.

use tokio::sync::{Mutex, MutexGuard};

static HEAVY: Mutex<()> = Mutex::const_new(());

/// Hold the returned guard for the whole test.
pub async fn serial() -> MutexGuard<'static, ()> {
    HEAVY.lock().await
}
