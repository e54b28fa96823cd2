//! Micro benchmarks of the byte-level JSON-RPC work the bridge does per message, against the
//! naive approach (parse into a `serde_json::Value` tree, mutate, serialize again).
//!
//! Cases: request frames of ~0.5 KB, 64 KB and 1 MB, in two shapes:
//! - `text`: the payload is one long string argument (echo text, base64 blobs, documents);
//! - `rows`: the payload is many small objects (structured arguments, table rows).
//!
//! Every request frame carries `params._meta.progressToken`, so the token rewrite really runs.
//!
//! Benches (per case):
//! - `request_rewrite/bridge`: `Envelope::parse` → `rewrite_request_params` (progress token) →
//!   `jsonrpc::request` with the bridge-minted id: exactly what `ChildUpstream::start_on` does.
//! - `request_rewrite/naive`: `from_slice::<Value>` → set `id` and `_meta.progressToken` →
//!   `to_vec`.
//! - `request_face_path/bridge`: everything the HTTP face + upstream do to a 2026 POST body
//!   before it reaches the child (era sniff, header/`_meta` validation, token lookup, params copy,
//!   rewrite, frame build) — several passes over the params, see RESULTS.md.
//! - `request_face_path_sketch/single_pass`: the same work done with one parse of the params
//!   (a sketch of the change RESULTS.md suggests; not the bridge's code).
//! - `response_rewrite/bridge` / `naive`: the answer's way back: parse the child's response,
//!   map the minted id back to the caller's id, build the client's frame.
//!
//! `cargo bench --bench frames` prints divan's table, then a bridge-vs-naive ratio summary.
//! Sample times are short (`max_time = 0.2 s` per bench) so the whole run stays under a minute.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use mcp_bridge::face::modern;
use mcp_bridge::jsonrpc::{self, Envelope, Kind};
use mcp_bridge::protocol;
use serde_json::value::RawValue;
use serde_json::Value;

const CASES: &[&str] = &[
    "text/0.5KB",
    "text/64KB",
    "text/1MB",
    "rows/0.5KB",
    "rows/64KB",
    "rows/1MB",
];

const MINTED_ID: &str = "123457";

struct Frames {
    request: Vec<u8>,
    response: Vec<u8>,
}

fn target_size(case: &str) -> usize {
    match case.split('/').nth(1) {
        Some("0.5KB") => 512,
        Some("64KB") => 64 * 1024,
        Some("1MB") => 1024 * 1024,
        _ => unreachable!("unknown case {case}"),
    }
}

/// A JSON payload (one value) of about `n` bytes.
fn payload(shape: &str, n: usize) -> String {
    match shape {
        "text" => {
            // Prose with the occasional escape, like real tool arguments.
            const WORDS: &str =
                "the quick brown fox jumps over the lazy dog \\\"quoted\\\" line\\n ";
            let mut s = String::with_capacity(n + WORDS.len() + 2);
            s.push('"');
            while s.len() + 1 < n {
                s.push_str(WORDS);
            }
            // Cut on a char boundary that does not split an escape.
            let mut cut = n.saturating_sub(1).max(1);
            while s.as_bytes()[cut - 1] == b'\\' {
                cut -= 1;
            }
            s.truncate(cut);
            s.push('"');
            s
        }
        "rows" => {
            let mut s = String::with_capacity(n + 64);
            s.push('[');
            let mut i = 0u64;
            while s.len() + 48 < n || i == 0 {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&format!(r#"{{"k":{i},"v":"value-{i}","ok":true}}"#));
                i += 1;
            }
            s.push(']');
            s
        }
        _ => unreachable!(),
    }
}

fn build(case: &str) -> Frames {
    let shape = case.split('/').next().unwrap_or("text");
    let head = r#"{"jsonrpc":"2.0","id":"client-7","method":"tools/call","params":{"name":"echo","arguments":{"text":"#;
    let tail = r#"},"_meta":{"progressToken":"tok-7","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let n = target_size(case).saturating_sub(head.len() + tail.len());
    let p = payload(shape, n);
    let request = format!("{head}{p}{tail}").into_bytes();
    let rhead = format!(
        r#"{{"jsonrpc":"2.0","id":{MINTED_ID},"result":{{"content":[{{"type":"text","text":"#
    );
    let rtail = r#"}],"resultType":"complete"}}"#;
    let response = format!("{rhead}{p}{rtail}").into_bytes();
    for f in [&request, &response] {
        serde_json::from_slice::<Value>(f).expect("bench frames are valid JSON");
    }
    Frames { request, response }
}

fn frames(case: &str) -> &'static Frames {
    static ALL: OnceLock<Vec<(&'static str, Frames)>> = OnceLock::new();
    let all = ALL.get_or_init(|| CASES.iter().map(|c| (*c, build(c))).collect());
    &all.iter().find(|(c, _)| *c == case).expect("known case").1
}

// ---------------------------------------------------------------------------------------------
// The code paths under test
// ---------------------------------------------------------------------------------------------

/// `ChildUpstream::start_on`: parse, swap the progress token for the minted id, build the frame.
fn bridge_request(frame: &[u8]) -> Bytes {
    let env = Envelope::parse(frame).expect("valid");
    let rewritten = jsonrpc::rewrite_request_params(env.params, Some(MINTED_ID), &[]);
    let params = rewritten.as_deref().or(env.params.map(RawValue::get));
    jsonrpc::request(MINTED_ID, env.method(), params)
}

/// What a straightforward implementation does.
fn naive_request(frame: &[u8]) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(frame).expect("valid");
    let minted: u64 = MINTED_ID.parse().unwrap_or(0);
    v["id"] = Value::from(minted);
    if let Some(t) = v.pointer_mut("/params/_meta/progressToken") {
        *t = Value::from(minted);
    }
    serde_json::to_vec(&v).expect("serializable")
}

fn modern_headers() -> &'static HeaderMap {
    static H: OnceLock<HeaderMap> = OnceLock::new();
    H.get_or_init(|| {
        let mut h = HeaderMap::new();
        h.insert(
            protocol::H_PROTOCOL_VERSION,
            HeaderValue::from_static(protocol::MODERN),
        );
        h.insert(protocol::H_METHOD, HeaderValue::from_static("tools/call"));
        h.insert(protocol::H_NAME, HeaderValue::from_static("echo"));
        h
    })
}

fn no_tool_headers(_: &str) -> Vec<(String, String)> {
    Vec::new()
}

/// The whole request side of a 2026 POST, in the order `face::post::post`,
/// `face::modern::handle`, `App::run_call` and `ChildUpstream::start_on` do it.
fn bridge_face_path(frame: &[u8]) -> Bytes {
    // face::post::post
    let env = Envelope::parse(frame).expect("valid");
    let kind = env.kind().expect("request");
    let has_modern_meta = kind == Kind::Request
        && jsonrpc::meta_field(env.params, protocol::META_PROTOCOL_VERSION).is_some();
    assert!(has_modern_meta);
    // face::modern::handle
    modern::validate(modern_headers(), env.method(), env.params, &no_tool_headers)
        .expect("valid request");
    let params: Option<Box<RawValue>> = env.params.map(|p| p.to_owned());
    // App::run_call
    let orig_token = jsonrpc::meta_field(env.params, "progressToken").map(|t| t.to_owned());
    black_box(orig_token);
    let method = env.method().to_owned();
    // ChildUpstream::start_on
    let rewritten = jsonrpc::rewrite_request_params(params.as_deref(), Some(MINTED_ID), &[]);
    let p = rewritten
        .as_deref()
        .or(params.as_deref().map(RawValue::get));
    jsonrpc::request(MINTED_ID, &method, p)
}

/// `ChildUpstream::on_frame`/`on_response` + `Responder::final_frame`.
fn bridge_response(frame: &[u8]) -> Bytes {
    let env = Envelope::parse(frame).expect("valid");
    assert_eq!(env.kind(), Ok(Kind::Response));
    let id = env.id.and_then(jsonrpc::minted_u64).expect("minted id");
    black_box(id);
    let result = env.result.expect("result").to_owned();
    jsonrpc::result("\"client-7\"", result.get())
}

fn naive_response(frame: &[u8]) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(frame).expect("valid");
    let id = v["id"].as_u64().expect("minted id");
    black_box(id);
    v["id"] = Value::from("client-7");
    serde_json::to_vec(&v).expect("serializable")
}

/// A sketch of the single-pass face path suggested in RESULTS.md (not the bridge's code): parse
/// the params' top-level fields and `_meta` once, validate from those, and splice the new
/// `_meta` into the original params bytes instead of re-writing every field.
fn sketch_face_path(frame: &[u8]) -> Bytes {
    use mcp_bridge::jsonrpc::Fields;
    let env = Envelope::parse(frame).expect("valid");
    assert_eq!(env.kind(), Ok(Kind::Request));
    let params = env.params.expect("params");
    let pf = Fields::parse(params).expect("object");
    let meta_raw = pf.get("_meta").expect("_meta");
    let meta = Fields::parse(meta_raw).expect("object");
    // The checks `modern::validate` makes, from the one parse.
    let pv: String =
        serde_json::from_str(meta.get(protocol::META_PROTOCOL_VERSION).expect("pv").get())
            .expect("string");
    let h = modern_headers();
    assert_eq!(
        h.get(protocol::H_PROTOCOL_VERSION).map(|v| v.as_bytes()),
        Some(pv.as_bytes())
    );
    assert!(meta.has(protocol::META_CLIENT_CAPABILITIES));
    assert_eq!(
        h.get(protocol::H_METHOD).map(|v| v.as_bytes()),
        Some(env.method().as_bytes())
    );
    let name: String = serde_json::from_str(pf.get("name").expect("name").get()).expect("string");
    assert_eq!(
        h.get(protocol::H_NAME).map(|v| v.as_bytes()),
        Some(name.as_bytes())
    );
    // `arguments` is only parsed when the tool declares x-mcp-header params (none here).
    let orig_token = meta.get("progressToken").map(|t| t.to_owned());
    black_box(&orig_token);
    // Splice: params[..meta] + new meta + params[meta_end..].
    let p = params.get();
    let out_params: std::borrow::Cow<str> = if orig_token.is_some() {
        let start = meta_raw.get().as_ptr() as usize - p.as_ptr() as usize;
        let end = start + meta_raw.get().len();
        let tok = RawValue::from_string(MINTED_ID.to_owned()).expect("json");
        let fields: Vec<_> = meta
            .0
            .iter()
            .map(|(k, v)| {
                if k == "progressToken" {
                    (k.clone(), &*tok)
                } else {
                    (k.clone(), *v)
                }
            })
            .collect();
        let mut m = bytes::BytesMut::with_capacity(meta_raw.get().len() + 8);
        jsonrpc::write_object(&mut m, &fields);
        let mut s = String::with_capacity(p.len() + 8);
        s.push_str(&p[..start]);
        s.push_str(std::str::from_utf8(&m).expect("utf8"));
        s.push_str(&p[end..]);
        std::borrow::Cow::Owned(s)
    } else {
        std::borrow::Cow::Borrowed(p)
    };
    jsonrpc::request(MINTED_ID, env.method(), Some(&out_params))
}

// ---------------------------------------------------------------------------------------------
// divan benches
// ---------------------------------------------------------------------------------------------

const MAX_TIME: f64 = 0.2;

mod request_rewrite {
    use super::*;

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn bridge(b: divan::Bencher, case: &str) {
        let f = &frames(case).request;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| bridge_request(black_box(f)));
    }

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn naive(b: divan::Bencher, case: &str) {
        let f = &frames(case).request;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| naive_request(black_box(f)));
    }
}

mod request_face_path {
    use super::*;

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn bridge(b: divan::Bencher, case: &str) {
        let f = &frames(case).request;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| bridge_face_path(black_box(f)));
    }
}

mod request_face_path_sketch {
    use super::*;

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn single_pass(b: divan::Bencher, case: &str) {
        let f = &frames(case).request;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| sketch_face_path(black_box(f)));
    }
}

mod response_rewrite {
    use super::*;

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn bridge(b: divan::Bencher, case: &str) {
        let f = &frames(case).response;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| bridge_response(black_box(f)));
    }

    #[divan::bench(args = CASES, max_time = MAX_TIME)]
    fn naive(b: divan::Bencher, case: &str) {
        let f = &frames(case).response;
        b.counter(divan::counter::BytesCount::new(f.len()))
            .bench(|| naive_response(black_box(f)));
    }
}

// ---------------------------------------------------------------------------------------------
// Ratio summary
// ---------------------------------------------------------------------------------------------

/// Time per call: the best of 9 time-boxed batches (the machine is shared; the minimum is the
/// least disturbed estimate).
fn per_call<T>(f: impl Fn() -> T, budget: Duration) -> Duration {
    // Calibrate a batch to ~budget/10.
    let t0 = Instant::now();
    black_box(f());
    let one = t0.elapsed().max(Duration::from_nanos(20));
    let batch = ((budget.as_secs_f64() / 10.0) / one.as_secs_f64()).clamp(1.0, 1e7) as u32;
    let mut samples: Vec<Duration> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                black_box(f());
            }
            t.elapsed() / batch
        })
        .collect();
    samples.sort();
    samples[0]
}

fn fmt_dur(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

fn ratio_summary() {
    let budget = Duration::from_millis(60);
    println!();
    println!("bridge vs naive (best of 9 batches per cell; ratio = naive / bridge, >1 means the bridge is faster)");
    println!(
        "{:<12} {:>9} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6} | {:>12} {:>9}",
        "case",
        "bytes",
        "req bridge",
        "req naive",
        "ratio",
        "resp bridge",
        "resp naive",
        "ratio",
        "face path",
        "GB/s face"
    );
    for case in CASES {
        let f = frames(case);
        let rb = per_call(|| bridge_request(black_box(&f.request)), budget);
        let rn = per_call(|| naive_request(black_box(&f.request)), budget);
        let sb = per_call(|| bridge_response(black_box(&f.response)), budget);
        let sn = per_call(|| naive_response(black_box(&f.response)), budget);
        let fp = per_call(|| bridge_face_path(black_box(&f.request)), budget);
        println!(
            "{:<12} {:>9} | {:>10} {:>10} {:>5.1}x | {:>10} {:>10} {:>5.1}x | {:>12} {:>9.2}",
            case,
            f.request.len(),
            fmt_dur(rb),
            fmt_dur(rn),
            rn.as_secs_f64() / rb.as_secs_f64(),
            fmt_dur(sb),
            fmt_dur(sn),
            sn.as_secs_f64() / sb.as_secs_f64(),
            fmt_dur(fp),
            f.request.len() as f64 / fp.as_secs_f64() / 1e9,
        );
    }
}

/// Where the face path's time goes, stage by stage (each stage timed alone on the same frame).
fn stage_summary() {
    use mcp_bridge::jsonrpc::Fields;
    let budget = Duration::from_millis(60);
    println!();
    println!("request face path, stage by stage (each stage timed alone; every one of them is a full pass over the params)");
    println!(
        "{:<12} | {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} | {:>10} {:>10}",
        "case",
        "env parse",
        "PV sniff",
        "validate",
        "tok lookup",
        "to_owned",
        "rewrite",
        "frame",
        "sum",
        "sketch"
    );
    for case in CASES {
        let f = &frames(case).request;
        let env = Envelope::parse(f).expect("valid");
        let params = env.params;
        let owned = params.map(|p| p.to_owned());
        let rewritten = jsonrpc::rewrite_request_params(params, Some(MINTED_ID), &[]);
        let t = [
            per_call(
                || Envelope::parse(black_box(f)).map(|e| e.params.is_some()),
                budget,
            ),
            per_call(
                || {
                    jsonrpc::meta_field(black_box(params), protocol::META_PROTOCOL_VERSION)
                        .is_some()
                },
                budget,
            ),
            per_call(
                || {
                    modern::validate(
                        modern_headers(),
                        "tools/call",
                        black_box(params),
                        &no_tool_headers,
                    )
                    .is_ok()
                },
                budget,
            ),
            per_call(
                || jsonrpc::meta_field(black_box(params), "progressToken").map(|t| t.to_owned()),
                budget,
            ),
            per_call(|| black_box(params).map(|p| p.to_owned()), budget),
            per_call(
                || {
                    jsonrpc::rewrite_request_params(
                        black_box(owned.as_deref()),
                        Some(MINTED_ID),
                        &[],
                    )
                },
                budget,
            ),
            per_call(
                || jsonrpc::request(MINTED_ID, "tools/call", black_box(rewritten.as_deref())),
                budget,
            ),
        ];
        let sum: Duration = t.iter().sum();
        let sketch = per_call(|| sketch_face_path(black_box(f)), budget);
        black_box(Fields::default());
        println!(
            "{:<12} | {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} | {:>10} {:>10}",
            case,
            fmt_dur(t[0]),
            fmt_dur(t[1]),
            fmt_dur(t[2]),
            fmt_dur(t[3]),
            fmt_dur(t[4]),
            fmt_dur(t[5]),
            fmt_dur(t[6]),
            fmt_dur(sum),
            fmt_dur(sketch),
        );
    }
}

fn main() {
    // Sanity: the bridge's rewrite and the naive one agree on meaning.
    for case in CASES {
        let f = frames(case);
        let a: Value = serde_json::from_slice(&bridge_request(&f.request)).expect("json");
        let b: Value = serde_json::from_slice(&naive_request(&f.request)).expect("json");
        assert_eq!(a, b, "request rewrite differs for {case}");
        assert_eq!(a["params"]["_meta"]["progressToken"], 123457);
        let a: Value = serde_json::from_slice(&bridge_response(&f.response)).expect("json");
        let b: Value = serde_json::from_slice(&naive_response(&f.response)).expect("json");
        assert_eq!(a, b, "response rewrite differs for {case}");
        let c: Value = serde_json::from_slice(&bridge_face_path(&f.request)).expect("json");
        assert_eq!(c["id"], 123457);
        let d: Value = serde_json::from_slice(&sketch_face_path(&f.request)).expect("json");
        assert_eq!(c, d, "sketch differs for {case}");
    }
    divan::main();
    // Under `cargo test --benches` divan runs each bench once; skip the timing summary there.
    if std::env::args().any(|a| a == "--bench") {
        ratio_summary();
        stage_summary();
    }
}
