//! Process facts read from /proc, for the tests that check nothing outlives the bridge: is a
//! pid alive, which live processes a pid parented, what a process is called, and a bounded
//! wait for a pid to go.

use std::time::{Duration, Instant};

/// Is `pid` a live (non-zombie) process?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => stat_fields(&s).is_some_and(|(state, _)| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// (state, ppid) from a /proc/PID/stat line.
fn stat_fields(s: &str) -> Option<(char, u32)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Live processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            if let Some((state, ppid)) = stat_fields(&s) {
                if ppid == pid && state != 'Z' {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The process's command name (`/proc/PID/comm`).
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Wait (bounded) until `pid` is gone; true if it is.
pub async fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if !alive(pid) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
