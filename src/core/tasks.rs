//! Tasks through the bridge (rule 9 of [`crate::core`]): the 2025-11-25 experimental tasks
//! (`params.task` on a request, `CreateTaskResult {task}`, `tasks/get|result|list|cancel`,
//! `notifications/tasks/status`) and the 2026 tasks extension `io.modelcontextprotocol/tasks`
//! (a result with `resultType: "task"` and a top-level `taskId`, `tasks/get|update|cancel`).
//!
//! An upstream's task ids are its own, and it is shared: by every caller of `serve`, and in a
//! pool by several processes whose ids may collide. So a task is entered in the upstream's
//! [`TaskBook`] as the bridge sees it created, under an id the bridge mints (random, 128
//! bits), with its owner (the caller's principal, and for a 2025 caller its session too) and
//! the process that runs it. Then:
//! - `tasks/get|result|cancel|update` name the bridge's id; the book gives the upstream's id
//!   and the process, and the call goes there (in a pool, the child that runs the task, not
//!   the least loaded one). An id the book does not hold, or holds for another owner, is
//!   refused with `-32602` as an unknown task: another caller's task is not found, not
//!   forbidden, so its existence is not told either;
//! - `tasks/list` (2025) is answered by the upstream and filtered to the caller's own tasks;
//! - every `taskId` the upstream sends back (results, `notifications/tasks/status`, the
//!   `io.modelcontextprotocol/related-task` `_meta` of its requests) is turned into the
//!   bridge's, and a status notification about another owner's task is not delivered.
//!
//! The book is bounded ([`MAX_TASKS`] entries): a task is kept for its `ttl`/`ttlMs` (at
//! most [`MAX_KEEP`], [`MAX_KEEP`] when the upstream names none), and when the book is full
//! the entry that expires first makes room. A task the bridge no longer holds is unknown to
//! its caller from then on, as it would be once the server let it expire.
//!
//! Tasks are carried between peers of one era (a 2025 caller's experimental task on a 2025
//! upstream, a 2026 caller's extension task on a 2026 upstream); the two task protocols are
//! not translated into each other.
//!
//! A 2026 caller's tasks request is checked by its face before any of that
//! ([`modern_refusal`]), as the extension's server would: `tasks/result` and `tasks/list`
//! (the 2025 methods the extension removed) are `-32601`, never forwarded (a `tasks/result`
//! under an id the book does not route would reach the upstream as it is); and
//! `tasks/get|update|cancel` from a request whose own `_meta` client capabilities do not
//! declare the extension are `-32021` naming it, before its id is looked at.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::Value;
use tokio::time::Instant;

use crate::call::{Call, CallEvent, Outcome, SharedUpstream};
use crate::error::BridgeError;
use crate::jsonrpc;

/// The 2026 tasks extension's identifier.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A 2026 request's tasks method that its face refuses itself (see the module comment):
/// the JSON-RPC error code, message and data. `caps`: the request's
/// `_meta["io.modelcontextprotocol/clientCapabilities"]`.
pub fn modern_refusal(
    method: &str,
    caps: Option<&RawValue>,
) -> Option<(i64, String, Option<Value>)> {
    match method {
        "tasks/result" | "tasks/list" => Some((
            jsonrpc::code::METHOD_NOT_FOUND,
            format!("Method not found: {method} is not a method of the {EXTENSION} extension"),
            Some(serde_json::json!({ "method": method })),
        )),
        "tasks/get" | "tasks/update" | "tasks/cancel" if !declares_extension(caps) => Some((
            jsonrpc::code::MISSING_CLIENT_CAPABILITY,
            format!(
                "{method} needs the {EXTENSION} extension in the request's client capabilities"
            ),
            Some(serde_json::json!({"requiredCapabilities": {"extensions": {EXTENSION: {}}}})),
        )),
        _ => None,
    }
}

/// Do these client capabilities declare the tasks extension?
fn declares_extension(caps: Option<&RawValue>) -> bool {
    caps.and_then(jsonrpc::Fields::parse)
        .and_then(|c| c.get("extensions").and_then(jsonrpc::Fields::parse))
        .is_some_and(|e| e.has(EXTENSION))
}

/// The most tasks one upstream's book holds.
pub const MAX_TASKS: usize = 65_536;
/// The longest a task is kept (and how long when its upstream names no lifetime).
pub const MAX_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Who a task belongs to: the caller's principal, and a 2025 caller's session (None: the one
/// host of `connect`, or a caller the face knows nothing about).
pub type Owner = Option<Arc<str>>;

struct Entry {
    owner: Owner,
    upstream_id: String,
    on: SharedUpstream,
    expires: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires > now
    }
    fn runs_on(&self, on: &SharedUpstream) -> bool {
        same(&self.on, on)
    }
}

/// The same process (not an equal one)?
fn same(a: &SharedUpstream, b: &SharedUpstream) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

#[derive(Default)]
struct Book {
    by_id: HashMap<String, Entry>,
    /// The upstream's id -> the bridge's ids for it (one per process that minted it: the
    /// children of a pool may mint the same ids).
    by_upstream: HashMap<String, Vec<String>>,
}

impl Book {
    /// Forget expired tasks; then, if still full, the one that expires first.
    fn make_room(&mut self, now: Instant) {
        self.by_id.retain(|_, e| e.live(now));
        if self.by_id.len() >= MAX_TASKS {
            let first = self
                .by_id
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone());
            if let Some(k) = first {
                self.by_id.remove(&k);
            }
        }
        let by_id = &self.by_id;
        self.by_upstream.retain(|_, ids| {
            ids.retain(|id| by_id.contains_key(id));
            !ids.is_empty()
        });
    }
}

/// One upstream's tasks as the bridge handed them out (see the module comment).
#[derive(Default)]
pub struct TaskBook {
    book: Mutex<Book>,
}

/// A tasks method on its way to the process that runs the task.
pub struct Routed {
    /// The params, naming the upstream's id.
    pub params: Box<RawValue>,
    /// Where the task runs.
    pub on: SharedUpstream,
    /// The task: the upstream's id and the bridge's.
    pub ids: (String, String),
}

impl TaskBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enter the upstream's task `upstream_id` (run on `on`, kept `keep`) for `owner`; the
    /// bridge's id for it.
    fn enter(&self, owner: Owner, upstream_id: &str, on: SharedUpstream, keep: Duration) -> String {
        let now = Instant::now();
        let mut b = self.lock();
        let b = &mut *b;
        // The same task again (a retry answered from the server's cache): one id.
        for id in b.by_upstream.get(upstream_id).into_iter().flatten() {
            if let Some(e) = b.by_id.get_mut(id) {
                if e.runs_on(&on) && e.owner == owner {
                    e.expires = now + keep;
                    return id.clone();
                }
            }
        }
        if b.by_id.len() >= MAX_TASKS {
            b.make_room(now);
        }
        let id = mint();
        b.by_upstream
            .entry(upstream_id.to_owned())
            .or_default()
            .push(id.clone());
        b.by_id.insert(
            id.clone(),
            Entry {
                owner,
                upstream_id: upstream_id.to_owned(),
                on,
                expires: now + keep,
            },
        );
        id
    }

    /// Forget every task of `owner`: the process each runs on and its id there.
    fn take_owned(&self, owner: &Owner) -> Vec<(SharedUpstream, String)> {
        let mut g = self.lock();
        let b = &mut *g;
        let ids: Vec<String> = b
            .by_id
            .iter()
            .filter(|(_, e)| e.owner == *owner)
            .map(|(k, _)| k.clone())
            .collect();
        let gone: Vec<(SharedUpstream, String)> = ids
            .iter()
            .filter_map(|id| b.by_id.remove(id))
            .map(|e| (e.on, e.upstream_id))
            .collect();
        let by_id = &b.by_id;
        b.by_upstream.retain(|_, v| {
            v.retain(|id| by_id.contains_key(id));
            !v.is_empty()
        });
        gone
    }

    /// Does a live task run on `on` (so that a pool keeps that child)?
    pub fn runs_on(&self, on: &SharedUpstream) -> bool {
        let now = Instant::now();
        self.lock()
            .by_id
            .values()
            .any(|e| e.live(now) && e.runs_on(on))
    }

    /// The bridge's id for the upstream's `upstream_id` that `owner` may see, minted by `on`
    /// when given.
    fn ours(
        &self,
        upstream_id: &str,
        owner: &Owner,
        on: Option<&SharedUpstream>,
    ) -> Option<String> {
        let now = Instant::now();
        let b = self.lock();
        b.by_upstream.get(upstream_id)?.iter().find_map(|id| {
            let e = b.by_id.get(id)?;
            let fits = e.live(now) && e.owner == *owner && on.is_none_or(|o| e.runs_on(o));
            fits.then(|| id.clone())
        })
    }

    /// A `tasks/get|result|cancel|update` of `owner`: its params with the upstream's id and
    /// the process to send it to; refused as an unknown task when the bridge holds no such
    /// task for this owner. `Ok(None)`: a method the book does not route.
    pub fn route(
        &self,
        method: &str,
        params: Option<&RawValue>,
        owner: &Owner,
    ) -> Result<Option<Routed>, BridgeError> {
        if !matches!(
            method,
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/update"
        ) {
            return Ok(None);
        }
        let mut p: serde_json::Map<String, Value> = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .ok_or_else(|| invalid("tasks requests take an object of params"))?;
        let Some(Value::String(id)) = p.get("taskId") else {
            return Err(invalid("taskId must be a string"));
        };
        let id = id.clone();
        let (upstream_id, on) = {
            let b = self.lock();
            match b.by_id.get(&id) {
                Some(e) if e.owner == *owner && e.live(Instant::now()) => {
                    (e.upstream_id.clone(), e.on.clone())
                }
                _ => return Err(unknown()),
            }
        };
        p.insert("taskId".into(), Value::String(upstream_id.clone()));
        let params = jsonrpc::raw(&Value::Object(p).to_string());
        Ok(Some(Routed {
            params,
            on,
            ids: (upstream_id, id),
        }))
    }

    /// The outcome of `method` (run on `on` for `owner`; `routed`: the task a tasks method
    /// named, upstream id and bridge id) with every task id the upstream named turned into
    /// the bridge's: a task it created is entered in the book first; `tasks/list` keeps the
    /// owner's tasks only.
    pub fn outcome(
        &self,
        method: &str,
        owner: &Owner,
        on: &SharedUpstream,
        routed: Option<&(String, String)>,
        o: Outcome,
    ) -> Outcome {
        let Outcome::Result(r) = o else { return o };
        if !names_task(r.get()) {
            return Outcome::Result(r);
        }
        let Ok(mut v) = serde_json::from_str::<Value>(r.get()) else {
            return Outcome::Result(r);
        };
        if let Some((uid, id)) = routed {
            set_ids(&mut v, uid, id);
        } else if method == "tasks/list" {
            if let Some(Value::Array(list)) = v.get_mut("tasks") {
                list.retain_mut(|t| self.own_task(t, owner, on));
            }
        } else if let Some((upstream_id, keep)) = created(&v) {
            let id = self.enter(owner.clone(), &upstream_id, on.clone(), keep);
            set_ids(&mut v, &upstream_id, &id);
        } else {
            self.map_ids(&mut v, owner, Some(on));
        }
        Outcome::Result(jsonrpc::raw(&v.to_string()))
    }

    /// A task of a `tasks/list` answer: kept (under the bridge's id) when it is `owner`'s.
    fn own_task(&self, t: &mut Value, owner: &Owner, on: &SharedUpstream) -> bool {
        let Some(uid) = t.get("taskId").and_then(Value::as_str).map(str::to_owned) else {
            return false;
        };
        match self.ours(&uid, owner, Some(on)) {
            Some(id) => {
                t["taskId"] = Value::String(id);
                true
            }
            None => false,
        }
    }

    /// Turn every upstream task id in `v` the book holds for `owner` (minted by `on`, when
    /// given) into the bridge's; false when `v` names a task the book does not hold so.
    fn map_ids(&self, v: &mut Value, owner: &Owner, on: Option<&SharedUpstream>) -> bool {
        let mut ok = true;
        walk_ids(v, &mut |s| match self.ours(s, owner, on) {
            Some(id) => *s = id,
            None => ok = false,
        });
        ok
    }

    /// An event of a call of `owner` on `on` with the upstream's task ids turned into the
    /// bridge's (a status notification about a task the owner may not see is dropped: None).
    pub fn event(&self, ev: CallEvent, owner: &Owner, on: &SharedUpstream) -> Option<CallEvent> {
        let (method, params) = match &ev {
            CallEvent::Notification { method, params } => (method, params),
            CallEvent::ServerRequest { method, params, .. } => (method, params),
        };
        let Some(p) = params.as_deref().filter(|p| names_task(p.get())) else {
            return Some(ev);
        };
        let Ok(mut v) = serde_json::from_str::<Value>(p.get()) else {
            return Some(ev);
        };
        let ok = self.map_ids(&mut v, owner, Some(on));
        if !ok && method == "notifications/tasks/status" {
            return None;
        }
        let params = Some(jsonrpc::raw(&v.to_string()));
        Some(match ev {
            CallEvent::Notification { method, .. } => CallEvent::Notification { method, params },
            CallEvent::ServerRequest { id, method, .. } => {
                CallEvent::ServerRequest { id, method, params }
            }
        })
    }

    /// A frame the upstream sent outside any call (a 2025 child's or remote's stream), for
    /// a listener of `owner`: as it is, with its task ids turned into the bridge's, or not at
    /// all (a status notification about a task that listener may not see).
    pub fn stream_frame(&self, frame: &[u8], owner: &Owner) -> Frame {
        let Some(text) = std::str::from_utf8(frame).ok().filter(|t| names_task(t)) else {
            return Frame::Keep;
        };
        let Ok(mut v) = serde_json::from_str::<Value>(text) else {
            return Frame::Keep;
        };
        let status = v.get("method").and_then(Value::as_str) == Some("notifications/tasks/status");
        let ok = match v.get_mut("params") {
            Some(p) => self.map_ids(p, owner, None),
            None => true,
        };
        if !ok && status {
            return Frame::Drop;
        }
        Frame::Rewritten(v.to_string().into_bytes())
    }
}

/// How long the bridge waits for each `tasks/cancel` of an owner that is gone.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// `owner` is gone for good (a 2025 session deleted or expired: its tasks can no longer be
/// reached by anyone): forget its tasks and cancel each where it runs, with `tasks/cancel`
/// (as the tasks protocols cancel a task; `notifications/cancelled` does not), each bounded by
/// [`ABANDON_WAIT`]. How many were cancelled (answered without an error).
pub async fn abandon(book: &TaskBook, owner: &Owner) -> usize {
    let mut n = 0;
    for (on, uid) in book.take_owned(owner) {
        let call = Call {
            method: "tasks/cancel".into(),
            params: Some(jsonrpc::raw(
                &serde_json::json!({ "taskId": uid }).to_string(),
            )),
            ctx: crate::call::CallCtx {
                client_era: crate::protocol::Era::Legacy,
                ..crate::call::CallCtx::modern()
            },
        };
        let asked = async {
            let mut h = on.call(call, ABANDON_WAIT).await.ok()?;
            (&mut h.outcome).await.ok()
        };
        if let Ok(Some(Outcome::Result(_))) = tokio::time::timeout(ABANDON_WAIT, asked).await {
            n += 1;
        }
    }
    n
}

/// What becomes of a frame on a stream outside any call ([`TaskBook::stream_frame`]).
#[derive(Debug, PartialEq)]
pub enum Frame {
    Keep,
    Drop,
    Rewritten(Vec<u8>),
}

/// Can `call` create a task, or name one (so that its answer and events need their task ids
/// turned)? A tasks method; a 2025 request with a `task` field; a request of a caller that
/// declares the 2026 tasks extension (the server then decides).
pub fn may_name_tasks(call: &Call) -> bool {
    if call.method.starts_with("tasks/") {
        return true;
    }
    let Some(p) = call.params.as_deref() else {
        return false;
    };
    let b = p.get().as_bytes();
    memchr::memmem::find(b, b"\"task\"").is_some()
        || memchr::memmem::find(b, b"io.modelcontextprotocol/tasks").is_some()
        || memchr::memmem::find(b, b"\\u").is_some()
}

/// Does this JSON text name a task (or hide a key behind an escape)? A quick look that spares
/// the parse of nearly every result.
fn names_task(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memmem::find(b, b"taskId").is_some() || memchr::memmem::find(b, b"\\u").is_some()
}

/// A result that creates a task: the upstream's id and how long to keep it. 2025: a `task`
/// object; 2026: `resultType: "task"` with a top-level `taskId`.
fn created(v: &Value) -> Option<(String, Duration)> {
    let (task, ttl_key) = if v.get("resultType").and_then(Value::as_str) == Some("task") {
        (v, "ttlMs")
    } else {
        (v.get("task").filter(|t| t.is_object())?, "ttl")
    };
    let id = task.get("taskId")?.as_str()?.to_owned();
    let keep = task
        .get(ttl_key)
        .and_then(Value::as_u64)
        .map_or(MAX_KEEP, |ms| Duration::from_millis(ms).min(MAX_KEEP));
    Some((id, keep))
}

/// Every `taskId` string in `v` (at any depth: the task itself, a `related-task` `_meta`).
fn walk_ids(v: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(s) if k == "taskId" => f(s),
                    _ => walk_ids(x, f),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk_ids(x, f)),
        _ => {}
    }
}

/// `taskId` `from` -> `to` wherever it appears in `v`.
fn set_ids(v: &mut Value, from: &str, to: &str) {
    walk_ids(v, &mut |s| {
        if s == from {
            *s = to.to_owned();
        }
    });
}

fn mint() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No randomness: ids stay unique (a counter), just guessable; ownership still holds.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b[..8].copy_from_slice(&n.to_be_bytes());
    }
    let mut s = String::with_capacity(35);
    s.push_str("mb-");
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

fn invalid(message: &str) -> BridgeError {
    BridgeError::Refused {
        code: jsonrpc::code::INVALID_PARAMS,
        message: message.to_owned(),
    }
}

fn unknown() -> BridgeError {
    invalid("unknown task (no task of yours has this taskId)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_is_seen_created_in_either_era() {
        let v2025 = json!({"task": {"taskId": "a", "status": "working", "ttl": 5000}});
        assert_eq!(
            created(&v2025),
            Some(("a".into(), Duration::from_millis(5000)))
        );
        let v2026 = json!({"resultType": "task", "taskId": "b", "ttlMs": null});
        assert_eq!(created(&v2026), Some(("b".into(), MAX_KEEP)));
        let huge = json!({"resultType": "task", "taskId": "c", "ttlMs": u64::MAX});
        assert_eq!(created(&huge).map(|c| c.1), Some(MAX_KEEP));
        // A task's status (tasks/get) or a tool result that merely names a task: no creation.
        assert_eq!(
            created(&json!({"resultType": "complete", "taskId": "d"})),
            None
        );
        assert_eq!(created(&json!({"task": "not an object"})), None);
    }

    #[test]
    fn every_task_id_is_turned_at_any_depth() {
        let mut v = json!({"taskId": "u1", "_meta": {"io.modelcontextprotocol/related-task":
            {"taskId": "u1"}}, "content": [{"taskId": "u2"}], "text": "u1"});
        set_ids(&mut v, "u1", "mb-x");
        assert_eq!(v["taskId"], "mb-x");
        assert_eq!(
            v["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            "mb-x"
        );
        assert_eq!(v["content"][0]["taskId"], "u2");
        assert_eq!(v["text"], "u1", "only taskId values");
    }

    #[test]
    fn a_2026_tasks_request_is_refused_as_the_extension_would() {
        let ext = jsonrpc::raw(r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#);
        let none = jsonrpc::raw(r#"{"extensions":{}}"#);
        for m in ["tasks/result", "tasks/list"] {
            let r = modern_refusal(m, Some(&ext)).expect("refused");
            assert_eq!(r.0, jsonrpc::code::METHOD_NOT_FOUND);
        }
        for m in ["tasks/get", "tasks/update", "tasks/cancel"] {
            assert!(modern_refusal(m, Some(&ext)).is_none(), "{m} declared");
            for caps in [Some(&*none), None] {
                let (c, _, d) = modern_refusal(m, caps).expect("undeclared");
                assert_eq!(c, jsonrpc::code::MISSING_CLIENT_CAPABILITY);
                assert!(d.unwrap()["requiredCapabilities"]["extensions"][EXTENSION].is_object());
            }
        }
        assert!(modern_refusal("tools/call", None).is_none());
    }

    #[test]
    fn only_calls_that_can_name_a_task_are_looked_at() {
        let call = |method: &str, params: &str| Call {
            method: method.into(),
            params: Some(jsonrpc::raw(params)),
            ctx: crate::call::CallCtx::modern(),
        };
        assert!(may_name_tasks(&call("tasks/get", "{}")));
        assert!(may_name_tasks(&call(
            "tools/call",
            r#"{"name":"x","task":{"ttl":1}}"#
        )));
        let ext = r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":
            {"extensions":{"io.modelcontextprotocol/tasks":{}}}}}"#;
        assert!(may_name_tasks(&call("tools/call", ext)));
        // A key hidden behind an escape is looked at too.
        assert!(may_name_tasks(&call("tools/call", r#"{"t\u0061sk":{}}"#)));
        assert!(!may_name_tasks(&call(
            "tools/call",
            r#"{"name":"tasking"}"#
        )));
        assert!(mint().starts_with("mb-") && mint().len() == 35 && mint() != mint());
    }
}
