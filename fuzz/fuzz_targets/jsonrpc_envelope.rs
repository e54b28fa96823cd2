//! The JSON-RPC envelope parse (`jsonrpc::Envelope`, `Fields`, `ParamsView`) and the rewrites
//! the bridge makes on the way to a shared child and back: the request re-sent under a minted
//! id with its progress token replaced and `_meta` stamped (as `upstream::child::mux` does),
//! the answer sent back under the client's id, the progress token put back in progress
//! notifications (as `face::respond` does), and the cancellation sent under the minted id.
//!
//! Input: byte 0 picks the minted id and whether `_meta` is stamped; the rest is one frame.
//!
//! Invariants: a rebuilt request parses back with the same method and kind and the minted id;
//! the rewritten params are a JSON object whose `_meta.progressToken` is the minted id whenever
//! the client sent one, that differ from the client's only in `_meta` and whose `_meta` keeps
//! every key the client sent; putting the client's token back restores the client's `_meta`
//! value; a response and a cancellation carry the id they were built with.
#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use mcp_bridge::jsonrpc::{self, Envelope, Fields, Kind, ParamsView};
use serde_json::value::RawValue;
use serde_json::Value;

const PV: &str = "io.modelcontextprotocol/protocolVersion";

/// Keys of a JSON object, or None when it is not one or repeats a key (where "the same
/// object" has no single meaning and the comparisons below would not hold).
fn unique_keys(raw: &RawValue) -> Option<Vec<Cow<'_, str>>> {
    let f = Fields::parse(raw)?;
    let keys: Vec<_> = f.0.iter().map(|(k, _)| k.clone()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    (sorted.len() == keys.len()).then_some(keys)
}

fn value(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or(Value::Null)
}

fn check_request(env: &Envelope<'_>, minted: u64, stamp: bool) {
    let id_s = minted.to_string();
    let pv = jsonrpc::raw("\"2026-07-28\"");
    let stamp_meta: Vec<(&str, &RawValue)> = if stamp { vec![(PV, &*pv)] } else { vec![] };
    let rewritten = jsonrpc::rewrite_request_params(env.params, Some(&id_s), &stamp_meta);
    let params = rewritten.as_deref().or(env.params.map(RawValue::get));
    let frame = jsonrpc::request(&id_s, env.method(), params);
    let back = Envelope::parse(&frame).expect("a rebuilt request parses");
    assert_eq!(back.kind(), Ok(Kind::Request));
    assert_eq!(back.method(), env.method());
    assert_eq!(back.id.and_then(jsonrpc::minted_u64), Some(minted));

    let orig = ParamsView::parse(env.params);
    let sent = ParamsView::parse(back.params);
    let orig_token = orig.meta("progressToken");
    if orig_token.is_some() {
        let t = sent
            .meta("progressToken")
            .expect("the token is still there");
        assert_eq!(
            jsonrpc::minted_u64(t),
            Some(minted),
            "progress token not replaced"
        );
    }
    let meta_open = match orig.get("_meta") {
        None => true,
        Some(_) => orig.meta.as_ref().is_some_and(|m| !m.has(PV)),
    };
    if stamp && orig.fields.is_some() && meta_open {
        assert!(sent.meta(PV).is_some(), "the stamp is missing");
    }
    if rewritten.is_none() {
        return;
    }
    // The rewrite touched only `_meta`, and kept the client's `_meta` keys in order.
    let (Some(p), Some(new_p)) = (env.params, back.params) else {
        return;
    };
    let (Some(keys), Some(new_keys)) = (unique_keys(p), unique_keys(new_p)) else {
        return;
    };
    let mut want = keys.clone();
    if !want.iter().any(|k| k == "_meta") {
        want.push(Cow::Borrowed("_meta"));
    }
    assert_eq!(want, new_keys);
    let (mut a, mut b) = (value(p.get()), value(new_p.get()));
    let (meta_a, meta_b) = match (a.as_object_mut(), b.as_object_mut()) {
        (Some(a), Some(b)) => (a.remove("_meta"), b.remove("_meta")),
        _ => return,
    };
    assert_eq!(a, b, "fields outside _meta changed");
    let Some(meta_raw) = orig.get("_meta") else {
        return;
    };
    if unique_keys(meta_raw).is_none() {
        return;
    }
    let Some(Value::Object(mut meta_b)) = meta_b else {
        panic!("_meta is no longer an object");
    };
    if let Some(Value::Object(meta_a)) = &meta_a {
        for k in meta_a.keys() {
            assert!(meta_b.contains_key(k), "_meta lost {k}");
        }
        if stamp && !meta_a.contains_key(PV) {
            meta_b.remove(PV);
        }
    }
    // The inverse: the client's token put back gives the client's `_meta` again.
    if let Some(t) = orig_token {
        let restored = jsonrpc::replace_meta_field(new_p, "progressToken", t)
            .expect("a rewritten token can be put back");
        let mut r = value(&restored);
        let meta_r = r.as_object_mut().and_then(|o| o.remove("_meta"));
        if let (Some(Value::Object(mut mr)), Some(ma)) = (meta_r, meta_a) {
            if stamp && !ma.as_object().is_some_and(|m| m.contains_key(PV)) {
                mr.remove(PV);
            }
            assert_eq!(
                Value::Object(mr),
                ma,
                "restoring the token did not restore _meta"
            );
        }
    }
}

fn check_progress(env: &Envelope<'_>, minted: u64) {
    // The child's progress notification for our id, given back the client's token.
    let Some(p) = env.params else { return };
    let Some(f) = Fields::parse(p) else { return };
    let Some(t) = f.get("progressToken") else {
        return;
    };
    let ours = jsonrpc::raw(&minted.to_string());
    let Some(s) = jsonrpc::set_field(p, "progressToken", &ours) else {
        panic!("set_field failed on an object");
    };
    let mid = jsonrpc::raw(&s);
    let got =
        Fields::parse(&mid).and_then(|f| f.get("progressToken").and_then(jsonrpc::minted_u64));
    assert_eq!(got, Some(minted));
    let back = jsonrpc::set_field(&mid, "progressToken", t).expect("set_field on an object");
    if unique_keys(p).is_some() {
        assert_eq!(
            value(&back),
            value(p.get()),
            "token round trip changed params"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let minted = u64::from(sel >> 1);
    let stamp = sel & 1 == 1;
    let Ok(env) = Envelope::parse(frame) else {
        return;
    };
    let _ = ParamsView::parse(env.params);
    let _ = mcp_bridge::protocol::request_log_level(env.params);
    let _ = mcp_bridge::protocol::message_rank(env.params);
    match env.kind() {
        Ok(Kind::Request) => check_request(&env, minted, stamp),
        Ok(Kind::Notification) => check_progress(&env, minted),
        Ok(Kind::Response) => {
            // The child's answer to our minted id, sent back under the client's id.
            let id = env.id.map_or("null", RawValue::get);
            let body = env.result.or(env.error).map_or("{}", RawValue::get);
            let f = if env.result.is_some() {
                jsonrpc::result(id, body)
            } else {
                jsonrpc::error_raw(Some(id), body)
            };
            let back = Envelope::parse(&f).expect("a rebuilt response parses");
            assert_eq!(back.kind(), Ok(Kind::Response));
            assert_eq!(back.id.map(RawValue::get), Some(id));
        }
        Err(_) => {}
    }
    // The cancellation the bridge sends for our id.
    let params = serde_json::json!({ "requestId": minted, "reason": "x" }).to_string();
    let c = jsonrpc::notification("notifications/cancelled", Some(&params));
    let c = Envelope::parse(&c).expect("a cancellation parses");
    let rid = c
        .params
        .and_then(Fields::parse)
        .and_then(|f| f.get("requestId").and_then(jsonrpc::minted_u64));
    assert_eq!(rid, Some(minted));
});
