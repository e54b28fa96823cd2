//! systemd readiness protocol (`Type=notify`): READY, RELOADING, STOPPING and STATUS lines to
//! `$NOTIFY_SOCKET`, and WATCHDOG pings every half `$WATCHDOG_USEC` from a task on the runtime,
//! so that pings stop when the runtime stops making progress. Without `$NOTIFY_SOCKET` (not
//! under systemd) every call here is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// Send states to the service manager (errors are logged at debug and otherwise ignored: the
/// daemon works the same without a manager).
pub fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        debug!("sd_notify failed: {e}");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

pub fn reloading() {
    let mut states = vec![
        NotifyState::Reloading,
        NotifyState::Status("reloading the configuration"),
    ];
    if let Ok(now) = NotifyState::monotonic_usec_now() {
        states.push(now);
    }
    send(&states);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// The watchdog period systemd asks for: `$WATCHDOG_USEC` when `$WATCHDOG_PID` is unset or
/// names this process (sd_watchdog_enabled(3)).
pub fn watchdog_period() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if usec == 0 {
        return None;
    }
    match std::env::var("WATCHDOG_PID") {
        Ok(p) if !p.is_empty() && p.trim().parse::<u32>().ok() != Some(std::process::id()) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

/// Ping the watchdog at half the period until `stop` is cancelled, on `tasks` (the owner
/// waits for it at shutdown). The task runs on the runtime that serves requests: a stalled
/// runtime sends no pings and systemd restarts us.
pub fn spawn_watchdog(period: Duration, stop: CancellationToken, tasks: &TaskTracker) {
    let every = (period / 2).max(Duration::from_millis(10));
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => send(&[NotifyState::Watchdog]),
                _ = stop.cancelled() => break,
            }
        }
    });
}
