//! The endpoint's own list cursor: which members still have pages, and each one's own
//! `nextCursor`, serialized, HMAC-SHA256-signed and base64url-encoded, so that a member's
//! cursor never reaches a caller raw and a caller cannot forge or edit one. Signed with a key
//! drawn at start (a cursor does not outlive the process: a caller whose cursor is refused
//! lists again from the start, as the spec allows). Bounded: a cursor over [`MAX_CURSOR`]
//! bytes is neither minted (the member's page walk ends there, warned) nor accepted.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The longest cursor the endpoint mints or reads.
pub const MAX_CURSOR: usize = 8 * 1024;
const PREFIX: &str = "mcpbc1.";

/// Members still to walk: (index in `servers`, that member's own cursor).
pub type Pending = Vec<(usize, String)>;

/// A key drawn at start for one of the endpoint's signatures (`what`: its cursors, its
/// approval rounds); without OS randomness a weaker one, warned.
pub(super) fn random_key(what: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_err() {
        tracing::warn!("no OS randomness for the endpoint's {what} key; using a weaker key");
        let seed = format!("{:?}{:p}", std::time::SystemTime::now(), &key);
        key.copy_from_slice(&<Sha256 as sha2::Digest>::digest(seed.as_bytes()));
    }
    key
}

pub struct CursorSigner {
    key: [u8; 32],
}

impl CursorSigner {
    pub fn new() -> Self {
        Self {
            key: random_key("cursor"),
        }
    }

    fn mac(&self, payload: &str) -> Vec<u8> {
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return Vec::new();
        };
        m.update(payload.as_bytes());
        m.finalize().into_bytes()[..16].to_vec()
    }

    /// The cursor for `pending`; None when it would be over [`MAX_CURSOR`].
    pub fn sign(&self, pending: &Pending) -> Option<String> {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = b.encode(serde_json::to_vec(pending).ok()?);
        let out = format!("{PREFIX}{payload}.{}", b.encode(self.mac(&payload)));
        (out.len() <= MAX_CURSOR).then_some(out)
    }

    /// What a caller's cursor says, if this endpoint minted it unaltered.
    pub fn open(&self, cursor: &str) -> Option<Pending> {
        if cursor.len() > MAX_CURSOR {
            return None;
        }
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (payload, sig) = cursor.strip_prefix(PREFIX)?.split_once('.')?;
        let sig = b.decode(sig).ok()?;
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return None;
        };
        m.update(payload.as_bytes());
        m.verify_truncated_left(&sig).ok()?;
        if sig.len() != 16 {
            return None;
        }
        serde_json::from_slice(&b.decode(payload).ok()?).ok()
    }
}

impl Default for CursorSigner {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_opens_only_unaltered_and_from_its_signer() {
        let s = CursorSigner::new();
        let p: Pending = vec![(0, "abc".into()), (2, "{\"page\":2}".into())];
        let c = s.sign(&p).unwrap();
        assert_eq!(s.open(&c), Some(p));
        assert!(
            !c.contains("page"),
            "a member's cursor is not exposed raw: {c}"
        );
        assert_eq!(CursorSigner::new().open(&c), None, "another key");
        let mut edited = c.clone();
        edited.insert(8, 'x');
        assert_eq!(s.open(&edited), None);
        assert_eq!(s.open("abc"), None);
        assert_eq!(s.open(&"x".repeat(MAX_CURSOR + 1)), None);
        assert_eq!(s.sign(&vec![(0, "y".repeat(MAX_CURSOR))]), None);
    }
}
