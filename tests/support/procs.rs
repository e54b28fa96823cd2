//! Process facts read from /proc, for the tests that check nothing outlives the bridge or
//! leaks: is a pid alive, which live processes a pid parented (now, or ever while watched),
//! what a process is called, its open fds and resident memory, and a bounded wait for a pid
//! to go. A fact that cannot be read (the process is gone) reads as "none" or zero.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
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

/// How many file descriptors `pid` has open (0 if it is gone).
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The resident set size of `pid` in KiB (`VmRSS`; 0 if it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How often `ChildrenSeen` looks.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Every child a process had while watched: a task polls `children_of` every 100 ms, so a
/// child that came and went between two looks can be missed, one that lived longer cannot.
/// Watching stops when this is dropped.
pub struct ChildrenSeen {
    pid: u32,
    seen: Arc<Mutex<BTreeSet<u32>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ChildrenSeen {
    /// Start watching `pid`'s children (needs a tokio runtime).
    pub fn watch(pid: u32) -> ChildrenSeen {
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let s = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                lock(&s).extend(children_of(pid));
                tokio::time::sleep(WATCH_EVERY).await;
            }
        });
        ChildrenSeen { pid, seen, task }
    }

    /// Every child seen so far, the current ones included.
    pub fn all(&self) -> Vec<u32> {
        let mut g = lock(&self.seen);
        g.extend(children_of(self.pid));
        g.iter().copied().collect()
    }
}

impl Drop for ChildrenSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process group of `pid` (None if it is gone).
pub fn pgid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Live (non-zombie) processes in process group `group`.
pub fn group_members(group: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| pgid(*p) == Some(group) && alive(*p))
        .collect()
}
