//! The stderr of a process under test, collected line by line by a reader thread, and the
//! bounded waits on it. One type for every harness: async tests use `wait_for`/`expect`,
//! blocking stdio-host tests use `wait_find`; both give up after a bound and say so.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines a process wrote to stderr so far (shared with the reader thread).
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// A log fed by a thread reading `from` until it closes.
    pub fn collect(from: impl Read + Send + 'static) -> Log {
        let log = Log::default();
        let feed = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines() {
                match line {
                    Ok(l) => feed.push(l),
                    Err(_) => break,
                }
            }
        });
        log
    }

    fn push(&self, line: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// All lines, for panic messages.
    pub fn dump(&self) -> String {
        self.lines().join("\n")
    }

    /// The last `n` lines, for panic messages of a long run.
    pub fn tail(&self, n: usize) -> String {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g[g.len().saturating_sub(n)..].join("\n")
    }

    pub fn find(&self, needle: &str) -> Option<String> {
        self.lines().into_iter().find(|l| l.contains(needle))
    }

    pub fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }

    /// Wait (bounded) until at least `n` lines contain `needle`; the count reached.
    pub async fn wait_count(&self, needle: &str, n: usize, timeout: Duration) -> usize {
        let until = Instant::now() + timeout;
        loop {
            let c = self.count(needle);
            if c >= n || Instant::now() >= until {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Like `wait_count`, but panics with the whole log when fewer than `n` lines come.
    pub async fn expect_count(&self, needle: &str, n: usize, timeout: Duration) {
        let c = self.wait_count(needle, n, timeout).await;
        assert!(
            c >= n,
            "{c} of {n} log lines containing {needle:?} within {timeout:?}; log:\n{}",
            self.dump()
        );
    }

    /// `expect` for a test without a runtime: blocks the thread while it waits.
    pub fn expect_blocking(&self, needle: &str, timeout: Duration) -> String {
        let until = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find(needle) {
                return l;
            }
            assert!(
                Instant::now() < until,
                "no log line containing {needle:?} within {timeout:?}; log:\n{}",
                self.dump()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Wait (bounded) for a line containing `needle`.
    pub async fn wait_for(&self, needle: &str, timeout: Duration) -> Option<String> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find(needle) {
                return Some(l);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Like `wait_for`, but panics with the whole log when the line does not come.
    pub async fn expect(&self, needle: &str, timeout: Duration) -> String {
        match self.wait_for(needle, timeout).await {
            Some(l) => l,
            None => panic!(
                "no log line containing {needle:?} within {timeout:?}; log:\n{}",
                self.dump()
            ),
        }
    }

    /// `find`, waiting (blocking) up to 2 s: stderr is read apart from stdout, so a log line
    /// written before an answer may be seen after it under load.
    pub fn wait_find(&self, needle: &str) -> Option<String> {
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            if let Some(l) = self.find(needle) {
                return Some(l);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(40));
        }
    }

    /// Ids from every `demo: <what> id=<id>` line, in order (`what` e.g. "slow started").
    pub fn demo_ids(&self, what: &str) -> Vec<String> {
        let needle = format!("demo: {what} id=");
        self.lines()
            .iter()
            .filter_map(|l| word_after(l, &needle))
            .collect()
    }
}

/// The whitespace-delimited word that follows `needle` in `line`.
pub fn word_after(line: &str, needle: &str) -> Option<String> {
    let i = line.find(needle)? + needle.len();
    let w: String = line[i..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    (!w.is_empty()).then_some(w)
}
