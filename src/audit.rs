//! The audit log (`[audit]`): one JSON line per call an aggregation endpoint routes or
//! refuses — when, who, which endpoint and member, the method and name, the outcome, how
//! long it took — appended to a file that logrotate may move away (reopened on SIGHUP).
//!
//! Shaped so that auditing never slows a call: a call hands its [`Entry`] to a bounded queue
//! ([`QUEUE`]) and goes on; a writer thread of its own drains it, writes, and syncs per the
//! configured [`Fsync`]. When the queue is full the entry is dropped and counted
//! (`mcp_bridge_audit_dropped_total`), and the next line written says how many went before it
//! (`"dropped": N`), so a gap is never silent. A plain thread, not a task: file writes and
//! fsyncs block, and the runtime's workers must not.
//!
//! Arguments stay out unless `include_arguments = true`; results never go in. Identities are
//! what auth says (a token's name, a JWT's `sub`), never a credential.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::metrics::Metrics;

/// Entries waiting for the writer, at most.
pub const QUEUE: usize = 8192;
/// How long the writer waits for an entry before it looks for a reopen or a stop.
const TICK: Duration = Duration::from_millis(200);

/// When the writer syncs the file to disk.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// After each batch the writer drained (the default: a crash loses at most one batch).
    #[default]
    Batch,
    /// After every line.
    Always,
    /// Never (the OS writes back when it likes).
    Never,
}

/// `[audit]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuditSpec {
    pub path: PathBuf,
    #[serde(default)]
    pub include_arguments: bool,
    #[serde(default)]
    pub fsync: Fsync,
}

/// One audited call.
#[derive(Debug)]
pub struct Entry {
    pub who: Option<String>,
    pub endpoint: String,
    /// The member it went to (None: refused before it went anywhere).
    pub member: Option<String>,
    pub method: String,
    /// The tool or prompt name, or the URI, as the caller wrote it.
    pub name: Option<String>,
    /// `ok`, `is_error` (a tool's own error result), `error` (with `code`), `failed` (no
    /// answer from the member), `denied` (the policy).
    pub outcome: &'static str,
    pub code: Option<i64>,
    pub duration: Duration,
    /// The 2025 session, if the call was made in one.
    pub session: Option<String>,
    /// Present only with `include_arguments = true`.
    pub arguments: Option<Value>,
}

/// The log. Cheap to share; its writer ends when the last handle goes.
pub struct Audit {
    tx: SyncSender<Entry>,
    dropped: Arc<AtomicU64>,
    reopen: Arc<AtomicBool>,
    include_arguments: bool,
    metrics: Arc<Metrics>,
}

impl Audit {
    /// Open `spec.path` (created 0600 if new, appended to) and start the writer.
    pub fn open(spec: &AuditSpec, metrics: Arc<Metrics>) -> Result<Arc<Audit>, String> {
        let file = open(&spec.path)?;
        let (tx, rx) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let reopen = Arc::new(AtomicBool::new(false));
        let w = Writer {
            path: spec.path.clone(),
            file,
            fsync: spec.fsync,
            dropped: dropped.clone(),
            reopen: reopen.clone(),
        };
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || w.run(rx))
            .map_err(|e| format!("[audit]: cannot start its writer: {e}"))?;
        Ok(Arc::new(Audit {
            tx,
            dropped,
            reopen,
            include_arguments: spec.include_arguments,
            metrics,
        }))
    }

    /// Are arguments to be written?
    pub fn with_arguments(&self) -> bool {
        self.include_arguments
    }

    /// Queue `e` (never waits; a full queue drops it, counted).
    pub fn record(&self, e: Entry) {
        match self.tx.try_send(e) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.metrics.audit_dropped();
            }
        }
    }

    /// Reopen the file at its path before the next line (SIGHUP: logrotate moved it).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
    }
}

fn open(path: &PathBuf) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("[audit] path {}: {e}", path.display()))
}

/// The writer thread's state.
struct Writer {
    path: PathBuf,
    file: File,
    fsync: Fsync,
    dropped: Arc<AtomicU64>,
    reopen: Arc<AtomicBool>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Entry>) {
        loop {
            let first = match rx.recv_timeout(TICK) {
                Ok(e) => Some(e),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return self.sync(),
            };
            if self.reopen.swap(false, Ordering::AcqRel) {
                self.sync();
                match open(&self.path) {
                    Ok(f) => self.file = f,
                    Err(e) => tracing::warn!("audit log not reopened, writing on: {e}"),
                }
            }
            let Some(first) = first else { continue };
            let mut batch = vec![first];
            batch.extend(rx.try_iter().take(QUEUE));
            let mut out = Vec::with_capacity(batch.len() * 256);
            for e in batch {
                let dropped = self.dropped.swap(0, Ordering::AcqRel);
                out.extend_from_slice(line(&e, dropped).as_bytes());
                out.push(b'\n');
                if self.fsync == Fsync::Always {
                    self.write(&out);
                    out.clear();
                    self.sync();
                }
            }
            self.write(&out);
            if self.fsync == Fsync::Batch {
                self.sync();
            }
        }
    }

    fn write(&mut self, b: &[u8]) {
        if !b.is_empty() {
            if let Err(e) = self.file.write_all(b) {
                tracing::warn!("audit log write failed: {e}");
            }
        }
    }

    fn sync(&self) {
        if self.fsync != Fsync::Never {
            let _ = self.file.sync_data();
        }
    }
}

/// One entry as its JSON line.
fn line(e: &Entry, dropped: u64) -> String {
    let mut v = json!({
        "time": rfc3339_now(),
        "who": e.who,
        "endpoint": e.endpoint,
        "member": e.member,
        "method": e.method,
        "name": e.name,
        "outcome": e.outcome,
        "duration_ms": (e.duration.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
    });
    if let Some(c) = e.code {
        v["code"] = json!(c);
    }
    if let Some(s) = &e.session {
        v["session"] = json!(s);
    }
    if let Some(a) = &e.arguments {
        v["arguments"] = a.clone();
    }
    if dropped > 0 {
        v["dropped"] = json!(dropped);
    }
    v.to_string()
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC). By hand: the civil-date arithmetic is a few
/// lines, and no crate here formats dates.
fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_json_with_the_gap_named() {
        let e = Entry {
            who: Some("alice".into()),
            endpoint: "team".into(),
            member: Some("a".into()),
            method: "tools/call".into(),
            name: Some("a__echo".into()),
            outcome: "error",
            code: Some(-32602),
            duration: Duration::from_micros(1500),
            session: None,
            arguments: None,
        };
        let v: Value = serde_json::from_str(&line(&e, 3)).unwrap();
        assert_eq!(v["who"], "alice");
        assert_eq!(v["code"], -32602);
        assert_eq!(v["dropped"], 3);
        assert_eq!(v["duration_ms"], 1.5);
        assert!(v.get("arguments").is_none());
        let t = v["time"].as_str().unwrap();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'), "{t}");
    }
}
