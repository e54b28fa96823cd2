//! Prometheus metrics as the tests read them: the address of the metrics listener as the
//! binary logged it (serve and connect alike), one scrape that checks the exposition format,
//! and one sample looked up by its exact series name.

use std::time::Duration;

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

/// The value of the sample `series` (exact name and labels as exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
