//! Prometheus metrics as the tests read them: the address of the metrics listener as the
//! binary logged it (serve and connect alike), one scrape that checks the exposition format,
//! one sample looked up by its exact series name (`sample`), and the sum of a metric's samples
//! over the series whose labels match (`metric_sum`); both are `None` for a missing series.
//! `Scraper` scrapes again and again without keeping a connection open (for tests that count
//! the bridge's fds between scrapes), and `Scraper::until*` is the one bounded wait for a
//! metric to reach a value.

use std::time::{Duration, Instant};

/// How long `Scraper::until_*` wait for a metric to get where a test says it goes.
pub const METRIC_WAIT: Duration = Duration::from_secs(20);

use super::log::{word_after, Log};

/// The `/metrics` URL a bridge or connect logged for its metrics listener
/// (`metrics on http://…`); waits up to 20 s for the line.
pub async fn metrics_url(of: impl AsRef<Log>) -> String {
    let l = of
        .as_ref()
        .expect("metrics on http://", Duration::from_secs(20))
        .await;
    let rest = word_after(&l, "metrics on http://").expect("address after 'metrics on'");
    format!("http://{rest}")
}

/// One scrape: 200 in the Prometheus text format.
pub async fn scrape(c: &reqwest::Client, url: &str) -> String {
    let r = c.get(url).send().await.expect("GET /metrics");
    assert_eq!(r.status(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    r.text().await.expect("metrics body")
}

/// The value of the sample `series` (exact name and labels as exposed); `None` when the
/// series is absent. The one way the tests read a series: a missing or renamed series is
/// `None`, never a 0, so compare with `Some(0.0)` to say "exported and zero".
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The sum of the samples of metric `name` whose labels include every `(label, value)` of
/// `want` (all of its samples when `want` is empty); `None` when no sample matches (a
/// missing or renamed series is a failure, never a 0: compare with `Some(0.0)`).
pub fn metric_sum(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let (n, labels) = series.split_once('{').unwrap_or((series, ""));
            if n != name {
                return None;
            }
            let ok = want
                .iter()
                .all(|(k, val)| labels.contains(&format!("{k}=\"{val}\"")));
            ok.then(|| v.parse::<f64>().ok()).flatten()
        })
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// A metrics endpoint scraped over a fresh connection each time (no idle connection is kept,
/// so scraping leaves the scraped process's fd count as it was). Cheap to clone.
#[derive(Clone)]
pub struct Scraper {
    c: reqwest::Client,
    url: String,
}

impl Scraper {
    /// The metrics listener `of` logged (bounded wait, see `metrics_url`).
    pub async fn of(of: impl AsRef<Log>) -> Scraper {
        Scraper::at(&metrics_url(of).await)
    }

    /// The metrics endpoint at `url` (a `/metrics` URL already known).
    pub fn at(url: &str) -> Scraper {
        let c = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .expect("reqwest client");
        Scraper {
            c,
            url: url.to_owned(),
        }
    }

    /// Scrape every 50 ms until `ok` holds of a scrape; that scrape. Panics after `timeout`
    /// with `what` and the last scrape: the one wait for "the metric gets there".
    pub async fn until(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let t = self.scrape().await;
            if ok(&t) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{what} not within {timeout:?}; last scrape:\n{t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `until` the exact series `series` reads `want` (a missing series never does).
    pub async fn until_sample(&self, series: &str, want: f64) -> String {
        let what = format!("{series} == {want}");
        self.until(&what, METRIC_WAIT, |t| sample(t, series) == Some(want))
            .await
    }

    /// `until` the exact series `series` reads at least `want`.
    pub async fn until_at_least(&self, series: &str, want: f64) -> String {
        let what = format!("{series} >= {want}");
        self.until(&what, METRIC_WAIT, |t| sample(t, series) >= Some(want))
            .await
    }

    /// `until` the sum of metric `name` over all its series reads `want`.
    pub async fn until_sum(&self, name: &str, want: f64) -> String {
        let what = format!("sum of {name} == {want}");
        self.until(&what, METRIC_WAIT, |t| {
            metric_sum(t, name, &[]) == Some(want)
        })
        .await
    }

    /// One scrape (checked like `scrape`).
    pub async fn scrape(&self) -> String {
        scrape(&self.c, &self.url).await
    }
}
