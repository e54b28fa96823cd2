//! Per-caller state, one type for both faces: a 2025 session of `serve` and the one host of
//! `connect` each hold a [`Caller`]. It owns what the era rules need to know about who is
//! asking — what a 2025 caller said at `initialize` (the 2026 envelope stamped on its calls
//! toward a 2026 upstream, the capabilities that gate every request it is asked), the level
//! of its last `logging/setLevel`, the answers the bridge waits for from it — and the
//! [`Bounded`] table each face keys its calls in flight and the upstream's requests by.
//!
//! Every table here has a size: reaching it is the caller's own refusal to make (the face
//! answers with a spec-shaped error and counts it), never an unbounded map. The face keeps
//! what only its transport has (an HTTP session's id and expiry, a host's listens and parked
//! calls); the rules stay in the core.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::value::RawValue;
use tokio::sync::oneshot;

use crate::call::StampMeta;
use crate::jsonrpc::{self, Fields};
use crate::protocol;

pub use crate::era::rounds::Answer;

/// Most answers the bridge waits for from one caller at once (its input requests across all
/// of its calls' rounds; each round asks at most `era::rounds::MAX_INPUTS`).
pub const MAX_ANSWERS: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A map with a size: an insert past it is refused ([`Full`]), never grown.
pub struct Bounded<K, V> {
    map: Mutex<HashMap<K, V>>,
    cap: usize,
}

/// The table is at its size: the insert was refused and the value handed back.
#[derive(Debug)]
pub struct Full<V>(pub V);

impl<K: Eq + Hash, V> Bounded<K, V> {
    pub fn new(cap: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            cap,
        }
    }
    /// Its size.
    pub fn cap(&self) -> usize {
        self.cap
    }
    /// Insert or replace `k`; refused when `k` is new and the table is full.
    pub fn insert(&self, k: K, v: V) -> Result<Option<V>, Full<V>> {
        let mut g = lock(&self.map);
        if g.len() >= self.cap && !g.contains_key(&k) {
            return Err(Full(v));
        }
        Ok(g.insert(k, v))
    }
    /// Insert `k` only if it is absent (Ok(false): present, nothing changed).
    pub fn insert_new(&self, k: K, v: V) -> Result<bool, Full<V>> {
        let mut g = lock(&self.map);
        if g.contains_key(&k) {
            return Ok(false);
        }
        if g.len() >= self.cap {
            return Err(Full(v));
        }
        g.insert(k, v);
        Ok(true)
    }
    pub fn remove<Q>(&self, k: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        lock(&self.map).remove(k)
    }
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Keep only the entries `keep` says yes to.
    pub fn retain(&self, keep: impl FnMut(&K, &mut V) -> bool) {
        lock(&self.map).retain(keep);
    }
    /// Take every entry out.
    pub fn drain(&self) -> Vec<(K, V)> {
        lock(&self.map).drain().collect()
    }
    /// Look at the entries under the lock (no await inside).
    pub fn with<R>(&self, f: impl FnOnce(&HashMap<K, V>) -> R) -> R {
        f(&lock(&self.map))
    }
}

/// What one caller is, as the era rules see it (see the module comment).
pub struct Caller {
    /// The 2026 envelope of a 2025 caller (`protocolVersion`, `clientCapabilities`,
    /// `clientInfo`), stamped on its calls toward a 2026 upstream; empty until `initialize`.
    stamp: Mutex<StampMeta>,
    /// The capabilities a 2025 caller declared at `initialize`.
    caps: Mutex<Option<Box<RawValue>>>,
    /// The level of a 2025 caller's last `logging/setLevel`.
    log_level: Mutex<Option<&'static str>>,
    /// Requests the bridge sent this caller (translated from a 2026 upstream's
    /// `input_required`), by id (exact JSON), waiting for its answer.
    answers: Bounded<String, oneshot::Sender<Answer>>,
}

impl Default for Caller {
    fn default() -> Self {
        Self {
            stamp: Mutex::new(Arc::new(Vec::new())),
            caps: Mutex::new(None),
            log_level: Mutex::new(None),
            answers: Bounded::new(MAX_ANSWERS),
        }
    }
}

impl Caller {
    /// A 2025 caller, from its `initialize` params.
    pub fn initialized(params: Option<&RawValue>) -> Self {
        let c = Self::default();
        c.initialize(params);
        c
    }

    /// Keep what a 2025 caller said at `initialize` (the one place its 2026 envelope is
    /// built: `protocolVersion` 2026-07-28, its capabilities or `{}`, its `clientInfo`).
    pub fn initialize(&self, params: Option<&RawValue>) {
        let f = params.and_then(Fields::parse);
        let field = |k: &str| f.as_ref().and_then(|f| f.get(k)).map(|v| v.to_owned());
        let caps = field("capabilities");
        let mut stamp = vec![
            (
                protocol::META_PROTOCOL_VERSION.to_owned(),
                jsonrpc::raw(&format!("\"{}\"", protocol::MODERN)),
            ),
            (
                protocol::META_CLIENT_CAPABILITIES.to_owned(),
                caps.clone().unwrap_or_else(|| jsonrpc::raw("{}")),
            ),
        ];
        if let Some(ci) = field("clientInfo") {
            stamp.push((protocol::META_CLIENT_INFO.to_owned(), ci));
        }
        *lock(&self.stamp) = Arc::new(stamp);
        *lock(&self.caps) = caps;
    }

    /// The capabilities the 2025 caller declared (None before `initialize`, or none given).
    pub fn caps(&self) -> Option<Box<RawValue>> {
        lock(&self.caps).clone()
    }

    /// The `_meta` its calls carry to a 2026 upstream: the envelope, with the level of its
    /// `logging/setLevel` if it set one.
    pub fn call_meta(&self) -> StampMeta {
        protocol::stamp_with_log_level(&lock(&self.stamp), self.log_level())
    }

    /// Its envelope without a log level.
    pub fn stamp(&self) -> StampMeta {
        lock(&self.stamp).clone()
    }

    pub fn set_log_level(&self, level: &'static str) {
        *lock(&self.log_level) = Some(level);
    }

    pub fn log_level(&self) -> Option<&'static str> {
        *lock(&self.log_level)
    }

    /// Wait for the caller's answer to the bridge's request `id`; None when the caller
    /// already owes [`MAX_ANSWERS`] answers (the round is answered with an error instead).
    pub fn expect_answer(&self, id: &str) -> Option<oneshot::Receiver<Answer>> {
        let (tx, rx) = oneshot::channel();
        self.answers.insert(id.to_owned(), tx).ok()?;
        Some(rx)
    }

    pub fn forget_answer(&self, id: &str) {
        self.answers.remove(id);
    }

    /// Deliver the caller's answer to the bridge's request `id`; false if none was expected.
    pub fn deliver_answer(&self, id: &str, answer: Answer) -> bool {
        match self.answers.remove(id) {
            Some(tx) => {
                let _ = tx.send(answer);
                true
            }
            None => false,
        }
    }

    /// Stop waiting for anything (the caller is gone): every waiter sees its sender dropped.
    pub fn forget_all_answers(&self) {
        self.answers.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_refuses_new_keys_and_keeps_replacing_old_ones() {
        let t = Bounded::new(2);
        assert!(t.insert("a", 1).is_ok());
        assert!(t.insert("b", 2).is_ok());
        assert!(matches!(t.insert("c", 3), Err(Full(3))));
        assert_eq!(t.insert("a", 10).ok().flatten(), Some(1));
        assert!(matches!(t.insert_new("c", 3), Err(Full(3))));
        assert!(!t.insert_new("a", 0).unwrap());
        t.remove("b");
        assert!(t.insert_new("c", 3).unwrap());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn initialize_builds_the_envelope_once_for_both_faces() {
        let c = Caller::initialized(Some(&jsonrpc::raw(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"h","version":"1"}}"#,
        )));
        let meta = c.call_meta();
        let keys: Vec<&str> = meta.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                protocol::META_PROTOCOL_VERSION,
                protocol::META_CLIENT_CAPABILITIES,
                protocol::META_CLIENT_INFO
            ]
        );
        assert_eq!(c.caps().unwrap().get(), r#"{"roots":{}}"#);
        c.set_log_level("warning");
        let meta = c.call_meta();
        let level = meta.iter().find(|(k, _)| k == protocol::META_LOG_LEVEL);
        assert_eq!(level.map(|(_, v)| v.get()), Some("\"warning\""));
        // Without capabilities: `{}` in the envelope, none declared.
        let bare = Caller::initialized(None);
        assert!(bare.caps().is_none());
        assert_eq!(bare.stamp()[1].1.get(), "{}");
    }

    #[tokio::test]
    async fn answers_are_delivered_once_and_bounded() {
        let c = Caller::default();
        let rx = c.expect_answer("\"mcpb-1\"").unwrap();
        assert!(c.deliver_answer("\"mcpb-1\"", Ok(jsonrpc::raw("{}"))));
        assert!(!c.deliver_answer("\"mcpb-1\"", Ok(jsonrpc::raw("{}"))));
        assert_eq!(rx.await.unwrap().unwrap().get(), "{}");
        let held: Vec<_> = (0..MAX_ANSWERS)
            .map(|i| c.expect_answer(&i.to_string()).unwrap())
            .collect();
        assert!(c.expect_answer("one-more").is_none());
        drop(held);
        c.forget_all_answers();
        assert!(c.expect_answer("one-more").is_some());
    }
}
