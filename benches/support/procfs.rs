//! What the end-to-end benches read from `/proc` and how they summarise it: a process's CPU
//! time and memory, its children, the machine's busy time (to tell when others disturb a run),
//! waiting for a quiet machine, medians and percentiles, and the benches' knobs. Shared by `e2e` and `connect`
//! (`#[path]`-included, so `streams`, which needs none of it, does not carry it unused).

use std::time::{Duration, Instant};

/// /proc/<pid>/stat times are in USER_HZ, which the kernel ABI fixes at 100 on Linux.
pub const USER_HZ: f64 = 100.0;

/// utime + stime of a process, in seconds (NaN if it is gone).
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name: state is field 3; utime 14, stime 15.
    let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i - 3).and_then(|x| x.parse::<f64>().ok());
    match (ticks(14), ticks(15)) {
        (Some(u), Some(st)) => (u + st) / USER_HZ,
        _ => f64::NAN,
    }
}

/// A `/proc/<pid>/status` field in MB (VmRSS, VmHWM).
pub fn status_mb(pid: u32, field: &str) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return f64::NAN;
    };
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The children of `parent`, in /proc order.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = s
            .rfind(')')
            .and_then(|i| s[i + 2..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// `root` and all its descendants.
pub fn tree_of(root: u32) -> Vec<u32> {
    let mut all = vec![root];
    let mut i = 0;
    while i < all.len() {
        let kids = children_of(all[i]);
        all.extend(kids);
        i += 1;
    }
    all
}

/// CPU seconds all processes of the machine have used (busy time summed over cores).
pub fn system_busy_secs() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return f64::NAN;
    };
    let Some(line) = s.lines().next() else {
        return f64::NAN;
    };
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return f64::NAN;
    }
    (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / USER_HZ
}

/// Wait (up to `max_wait`) until other processes use at most `max_cores` cores, sampled over
/// 250 ms. Returns how many seconds were waited.
pub fn wait_quiet(max_cores: f64, max_wait: Duration) -> f64 {
    let start = Instant::now();
    loop {
        let a = system_busy_secs();
        std::thread::sleep(Duration::from_millis(250));
        let b = system_busy_secs();
        if (b - a) / 0.25 <= max_cores || a.is_nan() || start.elapsed() >= max_wait {
            return start.elapsed().as_secs_f64();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The `p` percentile of sorted nanoseconds, in milliseconds (NaN when empty).
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1e6
}

/// The median of the numbers that are not NaN (NaN when none is).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A number with `prec` decimals, or "-" for NaN.
pub fn fmt(x: f64, prec: usize) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.prec$}")
    }
}

/// A knob from the environment, or `default` when it is unset or does not parse.
pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
