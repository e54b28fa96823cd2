//! An endpoint's rate limits per caller (`rate`, `burst`, `concurrency` of
//! `[endpoints.NAME]`): a token bucket and a cap on calls in flight for each identity, so
//! that one caller cannot starve the others. Over either, the call is refused at once with
//! [`BridgeError::RateLimited`] (HTTP 429 and `Retry-After` on the face) and counted; other
//! callers' buckets are untouched.
//!
//! Bounded: at most [`MAX_CALLERS`] identities are tracked; past that, the one idle longest
//! is forgotten (it starts again with a full bucket).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::endpoint::RateSpec;
use crate::error::BridgeError;

/// Identities tracked at once, at most.
pub const MAX_CALLERS: usize = 10_000;

struct Slot {
    tokens: f64,
    at: Instant,
    running: usize,
}

/// The limits of one endpoint.
pub struct Limiter {
    spec: RateSpec,
    slots: Mutex<HashMap<String, Slot>>,
}

/// One admitted call: holds its place in the caller's concurrency until dropped.
pub struct Permit {
    limiter: Arc<Limiter>,
    key: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut slots = self.limiter.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get_mut(&self.key) {
            s.running = s.running.saturating_sub(1);
        }
    }
}

impl Limiter {
    /// The limiter for `spec`; None when it limits nothing.
    pub fn new(spec: &RateSpec) -> Option<Arc<Limiter>> {
        (spec.rate.is_some() || spec.concurrency.is_some()).then(|| {
            Arc::new(Limiter {
                spec: spec.clone(),
                slots: Mutex::new(HashMap::new()),
            })
        })
    }

    /// Admit a call of `key`, or say how long until it could be.
    pub fn admit(self: &Arc<Self>, key: &str) -> Result<Permit, BridgeError> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !slots.contains_key(key) && slots.len() >= MAX_CALLERS {
            let idle = slots
                .iter()
                .filter(|(_, s)| s.running == 0)
                .min_by_key(|(_, s)| s.at)
                .map(|(k, _)| k.clone());
            if let Some(k) = idle {
                slots.remove(&k);
            }
        }
        let burst = f64::from(self.spec.burst.max(1));
        let s = slots.entry(key.to_owned()).or_insert(Slot {
            tokens: burst,
            at: now,
            running: 0,
        });
        if let Some(cap) = self.spec.concurrency {
            if s.running >= cap {
                return Err(BridgeError::RateLimited(1));
            }
        }
        if let Some((count, per)) = self.spec.rate {
            let per_sec = f64::from(count) / per.as_secs_f64().max(0.001);
            s.tokens = (s.tokens + now.duration_since(s.at).as_secs_f64() * per_sec).min(burst);
            s.at = now;
            if s.tokens < 1.0 {
                let wait = ((1.0 - s.tokens) / per_sec).ceil().max(1.0);
                return Err(BridgeError::RateLimited(wait as u64));
            }
            s.tokens -= 1.0;
        } else {
            s.at = now;
        }
        s.running += 1;
        Ok(Permit {
            limiter: self.clone(),
            key: key.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_bucket_per_caller_and_a_cap_on_calls_in_flight() {
        let l = Limiter::new(&RateSpec {
            rate: Some((2, Duration::from_secs(60))),
            burst: 2,
            concurrency: Some(1),
        })
        .unwrap();
        let a = l.admit("alice").unwrap();
        assert!(
            matches!(l.admit("alice"), Err(BridgeError::RateLimited(1))),
            "in flight"
        );
        let b = l.admit("bob").unwrap();
        drop(a);
        let _a2 = l.admit("alice").unwrap();
        drop(_a2);
        match l.admit("alice") {
            Err(BridgeError::RateLimited(s)) => assert!((1..=30).contains(&s), "{s}"),
            _ => panic!("the bucket is empty"),
        }
        drop(b);
        assert!(l.admit("bob").is_ok(), "bob has his own bucket");
    }
}
