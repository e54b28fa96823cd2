//! The bridge's own `requestState` for multi-round-trip calls (2026 `input_required`):
//! `mcpb1.<key id>.<park>.<round>.<expiry>.<binding>[.<owner>].<hmac>`, HMAC-SHA256-signed,
//! expiring, and bound to the caller, the method and a digest of the params that must not
//! change between rounds. Apart from `mrtr` (which re-exports it) because it is the one piece
//! of that module with keys and cryptography: HMAC from the `hmac` and `sha2` crates, the
//! format and the checks here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(super) const PREFIX: &str = "mcpb1.";

/// A digest of the request params that must stay the same across rounds: everything but
/// `_meta`, `inputResponses` and `requestState`, with keys sorted.
pub fn params_digest(params: Option<&RawValue>) -> String {
    let mut v: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("_meta");
        o.remove("inputResponses");
        o.remove("requestState");
    }
    // serde_json's default map is a BTreeMap: this serialisation has sorted keys.
    let s = v.to_string();
    let d = Sha256::digest(s.as_bytes());
    hex(&d[..16])
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Signs and checks the bridge's `requestState` values:
/// `mcpb1.<key id>.<park>.<round>.<expiry>.<binding>[.<owner>].<hmac>`. A lone bridge draws
/// its key at start; replicas share theirs (`cluster`): the first key signs, every key
/// verifies (rotation), and the owner part (the signing replica, sealed) tells any replica
/// where the parked call lives.
pub struct StateSigner {
    /// `(key, "mcpb1.<key id>.")`, current first. The key id (a hash of the key, not the
    /// key) tells this bridge's states from another mcp-bridge's further up or down a chain,
    /// which pass through.
    keys: Vec<([u8; 32], String)>,
    /// This replica, sealed (`cluster::Cluster::sealed_me`); None for a lone bridge.
    owner: Option<String>,
}

/// What a valid `requestState` of ours says.
#[derive(Debug, PartialEq, Eq)]
pub struct StateClaims {
    pub park: u64,
    pub round: u32,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState was not issued by this bridge or was altered")]
    Invalid,
    #[error("requestState has expired")]
    Expired,
    #[error("requestState belongs to another caller, method or set of arguments")]
    Mismatch,
}

fn key_prefix(key: &[u8; 32]) -> String {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let digest = Sha256::digest([b"mcp-bridge requestState key id\n".as_slice(), key].concat());
    format!("{PREFIX}{}.", b.encode(&digest[..6]))
}

fn hmac(key: &[u8; 32], payload: &str) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
        return Vec::new();
    };
    m.update(payload.as_bytes());
    m.finalize().into_bytes().to_vec()
}

impl StateSigner {
    pub fn new() -> Self {
        let mut key = [0u8; 32];
        // Without OS randomness a fixed key would make states forgeable; fall back to a key
        // derived from the time and address space, and say so.
        if getrandom::fill(&mut key).is_err() {
            tracing::warn!("no OS randomness for the requestState key; using a weaker key");
            let seed = format!("{:?}{:p}", SystemTime::now(), &key);
            key.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        Self::with_key(key)
    }

    /// A signer with a given key (`new` draws one from the OS). Public for the fuzz targets,
    /// which must sign and verify with a key they know.
    pub fn with_key(key: [u8; 32]) -> Self {
        Self {
            keys: vec![(key, key_prefix(&key))],
            owner: None,
        }
    }

    /// A replica's signer: `keys` shared by every replica (the first signs), `owner` this
    /// replica sealed (no `/` or whitespace; dots allowed).
    pub fn for_cluster(keys: &[[u8; 32]], owner: String) -> Self {
        Self {
            keys: keys.iter().map(|k| (*k, key_prefix(k))).collect(),
            owner: Some(owner),
        }
    }

    /// A state for parked call `park`, valid for `ttl`, bound to the caller, method and params.
    pub fn sign(
        &self,
        park: u64,
        round: u32,
        ttl: Duration,
        principal: &str,
        method: &str,
        digest: &str,
    ) -> String {
        let exp = SystemTime::now()
            .checked_add(ttl)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut payload = format!(
            "{park}.{round}.{exp}.{}",
            b.encode(Sha256::digest(format!("{principal}\n{method}\n{digest}")))
        );
        if let Some(o) = &self.owner {
            payload.push('.');
            payload.push_str(o);
        }
        let Some((key, prefix)) = self.keys.first() else {
            return String::new();
        };
        let sig = b.encode(hmac(key, &payload));
        format!("{prefix}{payload}.{sig}")
    }

    /// Was this state minted with one of this signer's keys (as opposed to an upstream's own
    /// state, another mcp-bridge's included)? A state of ours that was altered is still
    /// ours, and fails [`StateSigner::verify`].
    pub fn is_ours(&self, state: &str) -> bool {
        self.keys.iter().any(|(_, p)| state.starts_with(p.as_str()))
    }

    /// The payload of a state whose signature checks out with one of the keys.
    fn payload<'a>(&self, state: &'a str) -> Result<&'a str, StateError> {
        let (key, rest) = self
            .keys
            .iter()
            .find_map(|(k, p)| state.strip_prefix(p.as_str()).map(|r| (k, r)))
            .ok_or(StateError::Invalid)?;
        let (payload, sig) = rest.rsplit_once('.').ok_or(StateError::Invalid)?;
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let sig = b.decode(sig).map_err(|_| StateError::Invalid)?;
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
            return Err(StateError::Invalid);
        };
        m.update(payload.as_bytes());
        m.verify_slice(&sig).map_err(|_| StateError::Invalid)?;
        Ok(payload)
    }

    /// The owner part of a genuine state (the sealed replica that parked the call); None for
    /// a lone bridge's state or anything not signed with these keys.
    pub fn owner_of<'a>(&self, state: &'a str) -> Option<&'a str> {
        self.payload(state).ok()?.splitn(5, '.').nth(4)
    }

    pub fn verify(
        &self,
        state: &str,
        principal: &str,
        method: &str,
        digest: &str,
    ) -> Result<StateClaims, StateError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.verify_at(state, principal, method, digest, now)
    }

    /// [`StateSigner::verify`] at `now` (seconds since the epoch): the clock is a parameter so
    /// the expiry is tested without waiting for it.
    fn verify_at(
        &self,
        state: &str,
        principal: &str,
        method: &str,
        digest: &str,
        now: u64,
    ) -> Result<StateClaims, StateError> {
        let payload = self.payload(state)?;
        let mut parts = payload.splitn(5, '.');
        let park = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or(StateError::Invalid)?;
        let round = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or(StateError::Invalid)?;
        let exp: u64 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or(StateError::Invalid)?;
        let bind = parts.next().ok_or(StateError::Invalid)?;
        if now > exp {
            return Err(StateError::Expired);
        }
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if bind != b.encode(Sha256::digest(format!("{principal}\n{method}\n{digest}"))) {
            return Err(StateError::Mismatch);
        }
        Ok(StateClaims { park, round })
    }
}

impl Default for StateSigner {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    #[test]
    fn state_roundtrip_and_binding() {
        let s = StateSigner::new();
        let st = s.sign(7, 1, Duration::from_secs(60), "alice", "tools/call", "d1");
        assert!(s.is_ours(&st));
        assert_eq!(
            s.verify(&st, "alice", "tools/call", "d1"),
            Ok(StateClaims { park: 7, round: 1 })
        );
        assert_eq!(
            s.verify(&st, "bob", "tools/call", "d1"),
            Err(StateError::Mismatch)
        );
        assert_eq!(
            s.verify(&st, "alice", "tools/call", "d2"),
            Err(StateError::Mismatch)
        );
        let mut forged = st.clone();
        let at = s.keys[0].1.len();
        forged.replace_range(at..at + 1, "8");
        assert!(
            s.is_ours(&forged),
            "altered, still ours: it must fail verify"
        );
        assert_eq!(
            s.verify(&forged, "alice", "tools/call", "d1"),
            Err(StateError::Invalid)
        );
        let other = StateSigner::new();
        // Another bridge's state (a chain of bridges) is not ours: it passes through.
        assert!(!other.is_ours(&st));
        assert!(st.starts_with(PREFIX));
        assert_eq!(
            other.verify(&st, "alice", "tools/call", "d1"),
            Err(StateError::Invalid)
        );
        // Expiry on a clock of our own: valid up to its second, expired the second after.
        let secs = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        let before = secs();
        let old = s.sign(7, 1, Duration::ZERO, "alice", "tools/call", "d1");
        let after = secs();
        assert_eq!(
            s.verify_at(&old, "alice", "tools/call", "d1", before),
            Ok(StateClaims { park: 7, round: 1 })
        );
        assert_eq!(
            s.verify_at(&old, "alice", "tools/call", "d1", after + 1),
            Err(StateError::Expired)
        );
    }

    #[test]
    fn replicas_share_states_across_a_key_rotation_and_name_their_owner() {
        let (old, new) = ([1u8; 32], [2u8; 32]);
        let a = StateSigner::for_cluster(&[old], "sealed.kid".into());
        let st = a.sign(3, 0, Duration::from_secs(60), "p", "tools/call", "d");
        assert_eq!(a.owner_of(&st), Some("sealed.kid"));
        // Another replica after the rotation: the new key signs, the old one still verifies.
        let b = StateSigner::for_cluster(&[new, old], "other.kid".into());
        assert!(b.is_ours(&st));
        assert_eq!(b.owner_of(&st), Some("sealed.kid"));
        assert_eq!(
            b.verify(&st, "p", "tools/call", "d"),
            Ok(StateClaims { park: 3, round: 0 })
        );
        let st2 = b.sign(4, 1, Duration::from_secs(60), "p", "tools/call", "d");
        assert!(!a.is_ours(&st2), "signed with a key the old replica lacks");
        // The old key dropped: its states are no longer verifiable.
        let c = StateSigner::for_cluster(&[new], "c.kid".into());
        assert_eq!(c.owner_of(&st), None);
        assert_eq!(
            c.verify(&st, "p", "tools/call", "d"),
            Err(StateError::Invalid)
        );
        // A lone bridge's state names no owner; an altered owner fails the signature.
        let lone = StateSigner::with_key(old);
        let st3 = lone.sign(5, 0, Duration::from_secs(60), "p", "tools/call", "d");
        assert_eq!(lone.owner_of(&st3), None);
        let forged = st.replace("sealed.kid", "evil.kid");
        assert_eq!(b.owner_of(&forged), None);
    }

    #[test]
    fn digest_ignores_meta_and_order() {
        let a = raw(r#"{"name":"x","arguments":{"b":1,"a":2},"_meta":{"k":1}}"#);
        let b =
            raw(r#"{"arguments":{"a":2,"b":1},"name":"x","inputResponses":{},"requestState":"s"}"#);
        assert_eq!(params_digest(Some(&a)), params_digest(Some(&b)));
        let c = raw(r#"{"name":"y"}"#);
        assert_ne!(params_digest(Some(&a)), params_digest(Some(&c)));
    }
}
