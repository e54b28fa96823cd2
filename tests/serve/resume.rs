//! SSE resumability of 2025-11-25 sessions (README: "Resumable streams"): every event of a
//! POST's stream and of the GET stream carries an id naming its stream, a priming event with
//! `retry:` opens each stream, a stream the client lost (or the bridge closed early with
//! `--sse-close-after`) is resumed with GET + `Last-Event-ID` without losing an event, and an id
//! the bridge cannot resume from gets a 400 that `mcp_bridge_sse_resumptions_total` counts.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// One SSE event block as sent: its id, retry and data lines.
#[derive(Debug, Clone)]
struct Block {
    id: Option<String>,
    retry: Option<String>,
    /// The data (None: no `data:` line; `Some("")`: empty data, as a priming event has).
    data: Option<String>,
}

impl Block {
    fn json(&self) -> Option<Value> {
        let d = self.data.as_deref().filter(|d| !d.is_empty())?;
        Some(serde_json::from_str(d).unwrap_or_else(|e| panic!("bad data {d:?}: {e}")))
    }

    /// `(stream key, seq)` of its id.
    fn id_parts(&self) -> (String, u64) {
        let id = self
            .id
            .as_deref()
            .unwrap_or_else(|| panic!("no id: {self:?}"));
        let (k, n) = id.rsplit_once('-').unwrap_or_else(|| panic!("id {id:?}"));
        (
            k.to_owned(),
            n.parse().unwrap_or_else(|_| panic!("id {id:?}")),
        )
    }
}

fn parse_block(block: &str) -> Option<Block> {
    let mut b = Block {
        id: None,
        retry: None,
        data: None,
    };
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
        match field {
            "id" => b.id = Some(value),
            "retry" => b.retry = Some(value),
            "data" => b.data = Some(b.data.map_or(value.clone(), |d| d + "\n" + &value)),
            _ => {}
        }
    }
    (b.id.is_some() || b.data.is_some() || b.retry.is_some()).then_some(b)
}

/// Reads an SSE response block by block (comments skipped).
struct Raw {
    resp: reqwest::Response,
    buf: String,
}

impl Raw {
    fn new(resp: reqwest::Response) -> Raw {
        assert_eq!(resp.status(), 200, "{resp:?}");
        Raw {
            resp,
            buf: String::new(),
        }
    }

    /// The next block; None at the end of the stream. Bounded by `timeout`.
    async fn next(&mut self, timeout: Duration) -> Option<Block> {
        let until = Instant::now() + timeout;
        loop {
            while let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                if let Some(b) = parse_block(&block) {
                    return Some(b);
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.resp.chunk())
                .await
                .unwrap_or_else(|_| panic!("no SSE event within {timeout:?}"));
            match chunk {
                Ok(Some(c)) => self
                    .buf
                    .push_str(&String::from_utf8_lossy(&c).replace('\r', "")),
                _ => return None,
            }
        }
    }

    /// Every block up to the end of the stream.
    async fn all(&mut self, timeout: Duration) -> Vec<Block> {
        let mut out = Vec::new();
        while let Some(b) = self.next(timeout).await {
            out.push(b);
        }
        out
    }
}

/// A `slow` call with progress, its answer read as SSE.
async fn slow_stream(s: &Session, id: u64, seconds: f64, steps: u64) -> Raw {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": seconds, "steps": steps},
                   "_meta": {"progressToken": format!("p{id}")}}});
    let resp =
        s.c.post(&s.url)
            .headers(s.headers())
            .body(body.to_string())
            .send()
            .await
            .expect("POST");
    Raw::new(resp)
}

/// GET on the session, with `Last-Event-ID` when given.
async fn get(s: &Session, last: Option<&str>) -> reqwest::Response {
    let mut h = s.headers();
    h.insert("accept", hv("text/event-stream"));
    if let Some(l) = last {
        h.insert("last-event-id", hv(l));
    }
    s.c.get(&s.url).headers(h).send().await.expect("GET")
}

/// The progress steps and the final answer among `blocks`.
fn progress_and_final(blocks: &[Block]) -> (Vec<u64>, Option<Value>) {
    let mut steps = Vec::new();
    let mut fin = None;
    for v in blocks.iter().filter_map(Block::json) {
        if v["method"] == "notifications/progress" {
            steps.push(v["params"]["progress"].as_u64().unwrap());
        } else if v.get("id").is_some() {
            assert!(fin.is_none(), "two final answers: {blocks:?}");
            fin = Some(v);
        }
    }
    (steps, fin)
}

/// Every event carries `<key>-<seq>`, one key per stream, seqs counting up from the priming
/// event (0, empty data, the configured `retry:`); the GET stream has its own key; a 2025-06-18
/// session's streams stay as they were (no ids, no priming).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_name_the_stream_and_priming_opens_it() {
    // A 2026 child's calls run in rounds (`face::rounds`), a 2025 child's as one call.
    for era in ["dual", "legacy"] {
        ids_and_priming(era).await;
    }
}

async fn ids_and_priming(era: &str) {
    let b = Bridge::demo(&["--demo-era", era, "--sse-retry", "750ms"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    assert_eq!(s.version, "2025-11-25");

    let mut keys = Vec::new();
    for call in [1, 2] {
        let blocks = slow_stream(&s, call, 1.5, 3)
            .await
            .all(Duration::from_secs(10))
            .await;
        let first = &blocks[0];
        assert_eq!(first.retry.as_deref(), Some("750"), "{blocks:?}");
        assert_eq!(first.data.as_deref(), Some(""), "priming data: {blocks:?}");
        let (key, _) = first.id_parts();
        assert_eq!(key.len(), 32, "{key}");
        for (i, bl) in blocks.iter().enumerate() {
            assert_eq!(bl.id_parts(), (key.clone(), i as u64), "{blocks:?}");
        }
        let (steps, fin) = progress_and_final(&blocks);
        assert_eq!(steps, [1, 2, 3]);
        assert_eq!(fin.unwrap()["result"]["content"][0]["text"], "done");
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1], "two streams, one key");

    let mut g = Raw::new(get(&s, None).await);
    let prime = g.next(Duration::from_secs(5)).await.expect("priming event");
    assert_eq!(prime.retry.as_deref(), Some("750"), "{prime:?}");
    let (gkey, seq) = prime.id_parts();
    assert_eq!(seq, 0);
    assert!(!keys.contains(&gkey), "GET stream shares a key");
    // A notification on the GET stream (the demo's `notify` tool) is numbered on it.
    let r = s.call(json!(3), "notify", json!({"kind": "tools"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let ev = g
        .next(Duration::from_secs(5))
        .await
        .expect("an event on GET");
    assert_eq!(ev.id_parts(), (gkey.clone(), 1), "{ev:?}");
    assert!(ev.json().is_some(), "{ev:?}");
    let r = s.call(json!(4), "notify", json!({"kind": "prompts"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let ev2 = g
        .next(Duration::from_secs(5))
        .await
        .expect("a second event on GET");
    assert_eq!(ev2.id_parts(), (gkey.clone(), 2), "{ev2:?}");

    // Resumed after seq 1 while the bridge still holds the old GET stream (a client whose
    // connection broke unnoticed): the new one takes over, replays seq 2, and goes on.
    let mut g2 = Raw::new(get(&s, Some(&format!("{gkey}-1"))).await);
    let replayed = g2.next(Duration::from_secs(5)).await.expect("the replay");
    assert_eq!(replayed.id_parts(), (gkey.clone(), 2), "{replayed:?}");
    assert_eq!(replayed.data, ev2.data);
    assert!(
        g.next(Duration::from_secs(5)).await.is_none(),
        "the old GET stream goes on"
    );
    let r = s.call(json!(5), "notify", json!({"kind": "tools"})).await;
    assert_eq!(r.status, 200, "{r:?}");
    let ev3 = g2
        .next(Duration::from_secs(5))
        .await
        .expect("an event after the replay");
    assert_eq!(ev3.id_parts(), (gkey, 3), "{ev3:?}");
    drop(g2);

    // 2025-06-18: no ids, no priming.
    let r = post_with(
        &c,
        &b.url,
        base_headers(),
        initialize_body(json!(0), "2025-06-18").to_string(),
    )
    .await;
    let old = Session {
        c: c.clone(),
        url: b.url.clone(),
        id: r.header("mcp-session-id").unwrap(),
        version: "2025-06-18".into(),
        init: r.result().clone(),
    };
    let blocks = slow_stream(&old, 1, 1.5, 3)
        .await
        .all(Duration::from_secs(10))
        .await;
    assert!(
        blocks.iter().all(|b| b.id.is_none() && b.retry.is_none()),
        "{blocks:?}"
    );
    assert_eq!(progress_and_final(&blocks).0, [1, 2, 3]);
}

/// The client loses the stream mid-call; events sent while it was away are replayed on GET +
/// `Last-Event-ID`, the rest of the call follows there, and its final answer arrives: every
/// step exactly once. With `--sse-close-after` the bridge itself ends the connection and the
/// client polls, again losing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_resumes_losing_nothing() {
    for era in ["dual", "legacy"] {
        dropped_and_resumed(era).await;
        closed_early_and_polled(era).await;
    }
}

async fn dropped_and_resumed(era: &str) {
    let b = Bridge::demo(&["--demo-era", era, "--metrics-listen", "127.0.0.1:0"]).await;
    let m = Scraper::of(&b).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;

    let mut post = slow_stream(&s, 1, 3.0, 6).await;
    let mut seen = Vec::new();
    while progress_and_final(&seen).0.len() < 2 {
        seen.push(post.next(Duration::from_secs(10)).await.expect("an event"));
    }
    drop(post); // the connection is gone
                // Steps go on meanwhile (one every 0.5 s).
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let last = seen.last().unwrap().id.clone().unwrap();
    let rest = Raw::new(get(&s, Some(&last)).await)
        .all(Duration::from_secs(10))
        .await;
    let (k, n) = seen.last().unwrap().id_parts();
    assert_eq!(
        rest[0].id_parts(),
        (k, n + 1),
        "replay starts after {last}: {rest:?}"
    );
    seen.extend(rest);
    let (steps, fin) = progress_and_final(&seen);
    assert_eq!(steps, [1, 2, 3, 4, 5, 6], "{seen:?}");
    assert_eq!(
        fin.expect("the final answer")["result"]["content"][0]["text"],
        "done"
    );
    m.until_sample(
        r#"mcp_bridge_sse_resumptions_total{outcome="replayed"}"#,
        1.0,
    )
    .await;
}

/// The bridge closes each connection after 700 ms; the client polls with its last id.
async fn closed_early_and_polled(era: &str) {
    let b = Bridge::demo(&[
        "--demo-era",
        era,
        "--sse-close-after",
        "700ms",
        "--sse-retry",
        "100ms",
    ])
    .await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let mut seen = slow_stream(&s, 1, 3.0, 6)
        .await
        .all(Duration::from_secs(10))
        .await;
    assert!(
        progress_and_final(&seen).1.is_none(),
        "not closed early: {seen:?}"
    );
    let mut polls = 0;
    while progress_and_final(&seen).1.is_none() {
        polls += 1;
        assert!(polls < 20, "no final answer after {polls} polls: {seen:?}");
        let last = seen.last().unwrap().id.clone().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen.extend(
            Raw::new(get(&s, Some(&last)).await)
                .all(Duration::from_secs(10))
                .await,
        );
    }
    assert!(
        polls >= 2,
        "{polls} polls for a 3 s call closed every 700 ms"
    );
    let (steps, fin) = progress_and_final(&seen);
    assert_eq!(steps, [1, 2, 3, 4, 5, 6], "{seen:?}");
    assert_eq!(fin.unwrap()["result"]["content"][0]["text"], "done");
}

/// An id whose following events left the replay buffer, an unknown stream and a malformed id
/// get a 400 with a JSON-RPC error naming why, each counted; the newest id still resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_beyond_the_buffer_is_refused_and_counted() {
    let b = Bridge::demo(&[
        "--sse-replay-events",
        "3",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    let m = Scraper::of(&b).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let blocks = slow_stream(&s, 1, 1.5, 6)
        .await
        .all(Duration::from_secs(10))
        .await;
    assert_eq!(blocks.len(), 8, "priming, 6 steps, the answer: {blocks:?}");
    let (key, _) = blocks[0].id_parts();

    let refused = |reason: &'static str, id: String| {
        let s = &s;
        async move {
            let r = get(s, Some(&id)).await;
            assert_eq!(r.status(), 400, "{id}: {r:?}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], -32600, "{v}");
            assert_eq!(v["error"]["data"]["reason"], reason, "{v}");
        }
    };
    // Kept: seqs 5, 6, 7; resuming after 3 would need 4.
    refused("beyond_buffer", format!("{key}-3")).await;
    refused("unknown", format!("{}-1", "0".repeat(32))).await;
    refused("unknown", format!("{key}-99")).await;
    refused("malformed", "not-an-id".into()).await;
    let t = m
        .until_sample(
            r#"mcp_bridge_sse_resumptions_total{outcome="unknown"}"#,
            2.0,
        )
        .await;
    for (outcome, n) in [
        ("beyond_buffer", 1.0),
        ("malformed", 1.0),
        ("replayed", 0.0),
    ] {
        let series = format!("mcp_bridge_sse_resumptions_total{{outcome=\"{outcome}\"}}");
        assert_eq!(sample(&t, &series), Some(n), "{series}:\n{t}");
    }

    // After seq 4 the rest is still kept: it is replayed, and the ended stream then ends.
    let rest = Raw::new(get(&s, Some(&format!("{key}-4"))).await)
        .all(Duration::from_secs(5))
        .await;
    let seqs: Vec<u64> = rest.iter().map(|b| b.id_parts().1).collect();
    assert_eq!(seqs, [5, 6, 7], "{rest:?}");
    assert!(progress_and_final(&rest).1.is_some(), "{rest:?}");
}

/// The `[limits]` keys do what the flags do, globally and per server: `sse_retry` in the
/// priming event, `sse_close_after` ending a call's connection early, `sse_replay_events`
/// bounding what a stream keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_keys_set_retry_close_and_buffer_per_server() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[limits]\nsse_retry = \"300ms\"\nsse_replay_events = 3\n{}{}\
         [servers.b.limits]\nsse_retry = \"450ms\"\nsse_close_after = \"700ms\"\n",
        demo_server("a", &[]),
        demo_server("b", &[])
    );
    let b = daemon(&write(dir.path(), "sse.toml", &text)).await;
    let c = client();

    let a = Session::open(&c, &server_url(&b, "a")).await;
    let blocks = slow_stream(&a, 1, 1.5, 6)
        .await
        .all(Duration::from_secs(10))
        .await;
    assert_eq!(blocks[0].retry.as_deref(), Some("300"), "{blocks:?}");
    assert!(
        progress_and_final(&blocks).1.is_some(),
        "closed early: {blocks:?}"
    );
    let (key, _) = blocks[0].id_parts();
    let r = get(&a, Some(&format!("{key}-3"))).await;
    assert_eq!(r.status(), 400, "3 events kept: {r:?}");

    let s = Session::open(&c, &server_url(&b, "b")).await;
    let blocks = slow_stream(&s, 1, 3.0, 6)
        .await
        .all(Duration::from_secs(10))
        .await;
    assert_eq!(blocks[0].retry.as_deref(), Some("450"), "{blocks:?}");
    assert!(
        progress_and_final(&blocks).1.is_none(),
        "not closed early: {blocks:?}"
    );
}
