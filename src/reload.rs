//! The one SIGHUP handler. [`Hangups`] is the program's only subscription to SIGHUP; a
//! [`Reloader`] holds every part that can be reloaded (the daemon's configuration, TLS
//! certificates, JWKS, bearer token files), each registered with its [`Part`] and an async
//! reload function. One SIGHUP runs one pass: every registered part once, in registration
//! order, one after the other (no two parts race on the signal).
//!
//! A part's reload either replaces its state or fails and keeps the old one (each part's own
//! reload guarantees that); the outcome goes to stderr (tracing, with the part's name and the
//! reason) and to `mcp_bridge_reloads_total{part,outcome}`.
//!
//! Parts are held weakly: a part whose owner is gone (an auth replaced by a configuration
//! reload, a server removed) is dropped from the list, so the list holds only live parts.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::metrics::{Metrics, ReloadCounter};

/// Longest one part's reload may take (the configuration's own steps carry their own bounds).
pub const PART_LIMIT: Duration = Duration::from_secs(60);

/// Most parts held at once (live ones: a few per configured server).
pub const MAX_PARTS: usize = 4096;

/// What a registered reload is: the `part` label and the words of its log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The daemon's configuration file (or plain `serve`'s flags).
    Config,
    /// A TLS certificate and key.
    Tls,
    /// A JWT verifier's JWKS (file or URL).
    Jwt,
    /// A `--token-file`.
    Bearer,
    /// The audit log's file (reopened: logrotate moved it).
    Audit,
}

impl Part {
    /// The label value (see `metrics::RELOAD_PARTS`).
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Config => "config",
            Part::Tls => "tls",
            Part::Jwt => "jwt",
            Part::Bearer => "bearer",
            Part::Audit => "audit",
        }
    }

    /// The start of the log line of a failed reload.
    fn failed_text(self) -> &'static str {
        match self {
            Part::Config => "configuration reload rejected; the running configuration stays",
            Part::Tls => "TLS certificate reload failed; keeping the previous one",
            Part::Jwt => "JWKS reload failed; keeping the previous keys",
            Part::Bearer => "bearer token reload failed; keeping the previous tokens",
            Part::Audit => "audit log reopen failed; writing on to the open file",
        }
    }

    /// How long its reload may take; `None`: not cut (the configuration is all or nothing,
    /// and each of its steps is bounded on its own).
    fn limit(self) -> Option<Duration> {
        match self {
            Part::Config => None,
            _ => Some(PART_LIMIT),
        }
    }
}

/// A reload's result: what was loaded (for the log line), or why nothing was.
pub type Outcome = Result<String, String>;

/// A registered reload: `None` once its part is gone.
type ReloadFn = Box<dyn Fn() -> Option<BoxFuture<'static, Outcome>> + Send + Sync>;

struct Entry {
    part: Part,
    /// Is its part still there?
    alive: Box<dyn Fn() -> bool + Send + Sync>,
    run: ReloadFn,
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Each part that ran, in order, and whether it reloaded.
    pub ran: Vec<(Part, bool)>,
}

/// The parts one SIGHUP reloads, and the reload triggers of their own (a certificate's
/// file-change check, a JWKS's periodic refresh), which run on its tracker until its stop.
pub struct Reloader {
    parts: Mutex<Vec<Entry>>,
    counter: Option<ReloadCounter>,
    triggers: TaskTracker,
    stop: CancellationToken,
}

impl Reloader {
    /// An empty registry; outcomes are counted in `metrics` when given. The parts' own
    /// triggers run on `triggers` until `stop`: the owner cancels it and waits for them at
    /// shutdown ([`Reloader::shut_down`]).
    pub fn new(
        metrics: Option<&Metrics>,
        triggers: &TaskTracker,
        stop: &CancellationToken,
    ) -> Arc<Reloader> {
        Arc::new(Reloader {
            parts: Mutex::new(Vec::new()),
            counter: metrics.map(Metrics::reload_counter),
            triggers: triggers.clone(),
            stop: stop.clone(),
        })
    }

    /// Run a part's own reload trigger until it ends or the reloader stops.
    pub fn spawn_trigger<F>(&self, trigger: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.triggers.spawn(async move {
            tokio::select! {
                _ = trigger => {}
                _ = stop.cancelled() => {}
            }
        });
    }

    /// Stop every trigger and wait for them, at most `within` (a trigger in the middle of a
    /// blocking read ends when that read does); false if one was still running then.
    pub async fn shut_down(&self, within: Duration) -> bool {
        self.stop.cancel();
        self.triggers.close();
        tokio::time::timeout(within, self.triggers.wait())
            .await
            .is_ok()
    }

    /// Reload `target` with `reload` on every SIGHUP for as long as it lives (it is held
    /// weakly: registering does not keep it alive).
    pub fn register<T, F, Fut>(&self, part: Part, target: &Arc<T>, reload: F)
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let weak: Weak<T> = Arc::downgrade(target);
        let probe = weak.clone();
        let alive = Box::new(move || probe.strong_count() > 0);
        let run: ReloadFn = Box::new(move || {
            let t = weak.upgrade()?;
            Some(Box::pin(reload(t)) as BoxFuture<'static, Outcome>)
        });
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts.retain(|e| (e.alive)());
        if parts.len() >= MAX_PARTS {
            warn!(
                part = part.as_str(),
                "{MAX_PARTS} reloadable parts registered already; this one will not reload on SIGHUP"
            );
            return;
        }
        parts.push(Entry { part, alive, run });
    }

    /// How many live parts are registered.
    pub fn len(&self) -> usize {
        let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
        parts.retain(|e| (e.alive)());
        parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One pass (what a SIGHUP does): every part registered now, in registration order, one
    /// at a time. Parts registered during the pass (a configuration reload builds new auth,
    /// already freshly loaded) wait for the next one.
    pub async fn reload_all(&self) -> Pass {
        let runs: Vec<(Part, BoxFuture<'static, Outcome>)> = {
            let mut parts = self.parts.lock().unwrap_or_else(|p| p.into_inner());
            let runs = parts
                .iter()
                .filter_map(|e| Some((e.part, (e.run)()?)))
                .collect();
            parts.retain(|e| (e.alive)());
            runs
        };
        if runs.is_empty() {
            info!("SIGHUP received; nothing to reload");
        }
        let mut pass = Pass::default();
        for (part, fut) in runs {
            let outcome = match part.limit() {
                Some(limit) => tokio::time::timeout(limit, fut)
                    .await
                    .unwrap_or_else(|_| Err(format!("timed out after {} s", limit.as_secs()))),
                None => fut.await,
            };
            let ok = outcome.is_ok();
            // Counted before the log line: whoever sees the line sees the count.
            if let Some(c) = &self.counter {
                c.reloaded(part.as_str(), ok);
            }
            match outcome {
                Ok(what) => info!(part = part.as_str(), "{what} (SIGHUP)"),
                Err(why) => warn!(part = part.as_str(), "{}: {why}", part.failed_text()),
            }
            pass.ran.push((part, ok));
        }
        pass
    }
}

/// The SIGHUP subscription: one per process, owned by the signal loop (the daemon's or
/// `connect`'s), which runs [`Reloader::reload_all`] on each signal.
pub struct Hangups(Option<tokio::signal::unix::Signal>);

impl Hangups {
    /// Subscribe (inside a runtime). When that fails, SIGHUP keeps its default action and
    /// [`Hangups::recv`] never returns; the failure is logged.
    pub fn watch() -> Hangups {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(s) => Hangups(Some(s)),
            Err(e) => {
                warn!("cannot watch SIGHUP; reloads are off: {e}");
                Hangups(None)
            }
        }
    }

    /// The next SIGHUP (signals that arrive together count once). Cancel safe.
    pub async fn recv(&mut self) {
        match self.0.as_mut() {
            Some(s) => {
                if s.recv().await.is_none() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part that records each run in `log` and answers `outcome`.
    struct Probe {
        name: &'static str,
        fail: bool,
        log: Arc<Mutex<Vec<&'static str>>>,
    }

    fn probe(name: &'static str, fail: bool, log: &Arc<Mutex<Vec<&'static str>>>) -> Arc<Probe> {
        Arc::new(Probe {
            name,
            fail,
            log: log.clone(),
        })
    }

    fn register(r: &Reloader, part: Part, p: &Arc<Probe>) {
        r.register(part, p, |p| async move {
            p.log.lock().unwrap().push(p.name);
            if p.fail {
                Err(format!("{} is broken", p.name))
            } else {
                Ok(format!("{} reloaded", p.name))
            }
        });
    }

    fn sample(m: &Metrics, part: &str, outcome: &str) -> Option<u64> {
        let text = String::from_utf8(m.render()).unwrap();
        let series = format!("mcp_bridge_reloads_total{{outcome=\"{outcome}\",part=\"{part}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map(|v| v.trim().parse().unwrap())
    }

    /// One real SIGHUP to this process: the one subscription sees it once, and the pass runs
    /// every registered part exactly once, in registration order.
    #[tokio::test]
    async fn one_sighup_runs_each_registered_part_exactly_once() {
        let m = Metrics::new();
        let r = Reloader::new(Some(&m), &TaskTracker::new(), &CancellationToken::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let parts = [
            (Part::Config, probe("config", false, &log)),
            (Part::Tls, probe("tls", false, &log)),
            (Part::Jwt, probe("jwt", false, &log)),
            (Part::Bearer, probe("bearer", false, &log)),
            (Part::Audit, probe("audit", false, &log)),
        ];
        for (part, p) in &parts {
            register(&r, *part, p);
        }
        assert_eq!(r.len(), 5);
        let mut hup = Hangups::watch();
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
        tokio::time::timeout(Duration::from_secs(10), hup.recv())
            .await
            .expect("the SIGHUP arrives");
        let pass = r.reload_all().await;
        assert_eq!(
            *log.lock().unwrap(),
            ["config", "tls", "jwt", "bearer", "audit"]
        );
        assert_eq!(
            pass.ran,
            [
                (Part::Config, true),
                (Part::Tls, true),
                (Part::Jwt, true),
                (Part::Bearer, true),
                (Part::Audit, true)
            ]
        );
        for p in crate::metrics::RELOAD_PARTS {
            assert_eq!(sample(&m, p, "ok"), Some(1), "{p}");
            assert_eq!(sample(&m, p, "failed"), Some(0), "{p}");
        }
    }

    #[tokio::test]
    async fn a_failed_part_is_counted_and_the_next_still_runs() {
        let m = Metrics::new();
        let r = Reloader::new(Some(&m), &TaskTracker::new(), &CancellationToken::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (bad, good) = (probe("bad", true, &log), probe("good", false, &log));
        register(&r, Part::Bearer, &bad);
        register(&r, Part::Tls, &good);
        let pass = r.reload_all().await;
        assert_eq!(pass.ran, [(Part::Bearer, false), (Part::Tls, true)]);
        assert_eq!(*log.lock().unwrap(), ["bad", "good"]);
        assert_eq!(sample(&m, "bearer", "failed"), Some(1));
        assert_eq!(sample(&m, "bearer", "ok"), Some(0));
        assert_eq!(sample(&m, "tls", "ok"), Some(1));
        assert_eq!(sample(&m, "config", "ok"), Some(0));
    }

    #[tokio::test]
    async fn a_part_that_is_gone_is_dropped_and_not_run() {
        let r = Reloader::new(None, &TaskTracker::new(), &CancellationToken::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (kept, gone) = (probe("kept", false, &log), probe("gone", false, &log));
        register(&r, Part::Jwt, &gone);
        register(&r, Part::Jwt, &kept);
        drop(gone);
        assert_eq!(r.len(), 1);
        assert_eq!(r.reload_all().await.ran, [(Part::Jwt, true)]);
        assert_eq!(*log.lock().unwrap(), ["kept"]);
    }

    /// What a configuration reload registers (freshly loaded auth) runs from the next pass on.
    #[tokio::test]
    async fn a_part_registered_during_a_pass_waits_for_the_next() {
        let r = Reloader::new(None, &TaskTracker::new(), &CancellationToken::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let later = probe("later", false, &log);
        let config = probe("config", false, &log);
        let (r2, later2) = (Arc::downgrade(&r), later.clone());
        r.register(Part::Config, &config, move |p| {
            let (r2, later2) = (r2.clone(), later2.clone());
            async move {
                p.log.lock().unwrap().push(p.name);
                if let Some(r) = r2.upgrade() {
                    register(&r, Part::Bearer, &later2);
                }
                Ok("config".to_owned())
            }
        });
        assert_eq!(r.reload_all().await.ran, [(Part::Config, true)]);
        assert_eq!(*log.lock().unwrap(), ["config"]);
        log.lock().unwrap().clear();
        let ran = r.reload_all().await.ran;
        assert_eq!(ran, [(Part::Config, true), (Part::Bearer, true)]);
        assert_eq!(*log.lock().unwrap(), ["config", "later"]);
    }
}
