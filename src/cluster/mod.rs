//! Replicas (`--cluster-key-file F --advertise-url URL`): several `serve` processes behind a
//! plain round-robin balancer, none of them keeping a list of the others.
//!
//! What a replica hands a client that must come back to *it* names it, sealed with a key
//! every replica holds: a 2025 session id ([`Cluster::mint_session_id`]) and the owner part
//! of a `requestState` ([`Cluster::sealed_me`], carried by `era::mrtr::StateSigner`). Any
//! replica opens the seal, and a request that belongs to another replica is forwarded there
//! as it came (`forward`): the session, its GET stream, its calls and the client's answers
//! all meet one process, and so does a parked call and its retry. Nothing else is shared; a
//! 2026 call is served wherever it lands.
//!
//! Seals are AES-256-GCM (aws-lc-rs, already in the tree for rustls) under a key derived
//! from the operator's secret; the owner's URL is not readable by clients, and a client
//! cannot make a replica forward anywhere but to a URL a replica sealed. The key file holds
//! one secret per line: the first seals and signs, the others still open and verify, so a
//! key is rotated by putting the new one first and dropping the old one after a grace
//! period (longer than `--session-timeout` and `--park-timeout`).

pub mod forward;

use std::path::Path;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use base64::Engine;
use sha2::{Digest, Sha256};

/// The shortest secret accepted (characters of a line of the key file).
pub const MIN_SECRET: usize = 32;

/// The header a forwarded request carries: the replica that receives it serves it itself,
/// whoever the owner is (no forwarding loops, whatever the advertise URLs say).
pub const H_FORWARDED: &str = "mcp-bridge-forwarded";

/// One secret of the key file, turned into what it is used for.
struct ClusterKey {
    /// Names the key in what it sealed (a hash of the key, not the key).
    kid: String,
    seal: LessSafeKey,
    /// The `requestState` HMAC key.
    state: [u8; 32],
}

impl ClusterKey {
    fn derive(secret: &str) -> Result<Self, String> {
        let label = |l: &str| -> [u8; 32] {
            Sha256::digest([l.as_bytes(), b"\n", secret.as_bytes()].concat()).into()
        };
        let seal_key = label("mcp-bridge cluster seal");
        let seal = UnboundKey::new(&AES_256_GCM, &seal_key)
            .map_err(|_| "could not set up the cluster key".to_owned())?;
        let kid = b64().encode(&label("mcp-bridge cluster key id")[..6]);
        Ok(Self {
            kid,
            seal: LessSafeKey::new(seal),
            state: label("mcp-bridge requestState key"),
        })
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// This replica's part in a cluster: the keys, its own URL, the client that forwards.
pub struct Cluster {
    /// The first is current.
    keys: Vec<ClusterKey>,
    /// `--advertise-url`, as `scheme://host:port` (no path).
    me: String,
    /// `me`, sealed once (the owner part of every `requestState` this replica signs).
    sealed_me: String,
    client: forward::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("me", &self.me)
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// `scheme://host:port` of an advertise URL (http or https, no credentials, path `/` only).
pub fn normalize_url(u: &str) -> Result<String, String> {
    let url = url::Url::parse(u).map_err(|e| format!("--advertise-url {u:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "--advertise-url {u:?}: must be http:// or https://"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "--advertise-url {u:?}: credentials are not allowed"
        ));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "--advertise-url {u:?}: give scheme://host:port only (requests keep their own path)"
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| format!("--advertise-url {u:?}: no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("--advertise-url {u:?}: no port"))?;
    Ok(format!("{}://{host}:{port}", url.scheme()))
}

/// The secrets of a key file: one a line, blank lines and `#` comments skipped.
pub fn parse_secrets(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.chars().count() < MIN_SECRET {
            return Err(format!(
                "line {}: a key must have at least {MIN_SECRET} characters (e.g. `openssl rand \
                 -hex 32`)",
                n + 1
            ));
        }
        out.push(l.to_owned());
    }
    if out.is_empty() {
        return Err("no key in the file".into());
    }
    Ok(out)
}

impl Cluster {
    /// Read the key file (warning when others may read it) and set up this replica.
    pub fn load(
        key_file: &Path,
        advertise_url: &str,
        ca_file: Option<&Path>,
    ) -> Result<Cluster, String> {
        let name = key_file.display();
        let text = std::fs::read_to_string(key_file)
            .map_err(|e| format!("--cluster-key-file {name}: {e}"))?;
        warn_if_open(key_file);
        let secrets =
            parse_secrets(&text).map_err(|e| format!("--cluster-key-file {name}: {e}"))?;
        let mut c = Self::new(&secrets, advertise_url)?;
        if ca_file.is_some() {
            c.client = forward::Client::new(ca_file)?;
        }
        Ok(c)
    }

    /// A replica with these secrets (the first current) at `advertise_url`.
    pub fn new(secrets: &[String], advertise_url: &str) -> Result<Cluster, String> {
        let keys = secrets
            .iter()
            .map(|s| ClusterKey::derive(s))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err("a cluster needs at least one key".into());
        }
        let me = normalize_url(advertise_url)?;
        let mut c = Cluster {
            keys,
            sealed_me: String::new(),
            me,
            client: forward::Client::new(None)?,
        };
        c.sealed_me = c
            .seal(c.me.as_bytes())
            .ok_or("no OS randomness to seal with")?;
        Ok(c)
    }

    /// This replica's URL (`scheme://host:port`).
    pub fn me(&self) -> &str {
        &self.me
    }

    /// This replica's URL, sealed (no dots in it).
    pub fn sealed_me(&self) -> &str {
        &self.sealed_me
    }

    /// The `requestState` keys, current first.
    pub fn state_keys(&self) -> Vec<[u8; 32]> {
        self.keys.iter().map(|k| k.state).collect()
    }

    /// `<base64url(nonce | ciphertext | tag)>.<kid>`, sealed with the current key; None
    /// without OS randomness.
    fn seal(&self, plain: &[u8]) -> Option<String> {
        let key = self.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).ok()?;
        let mut buf = plain.to_vec();
        key.seal
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut buf)
            .ok()?;
        let mut all = nonce.to_vec();
        all.extend_from_slice(&buf);
        Some(format!("{}.{}", b64().encode(all), key.kid))
    }

    /// What [`Cluster::seal`] sealed, with any key of the file; None for anything else.
    fn open(&self, sealed: &str) -> Option<Vec<u8>> {
        let (body, kid) = sealed.rsplit_once('.')?;
        let key = self.keys.iter().find(|k| k.kid == kid)?;
        let all = b64().decode(body).ok()?;
        if all.len() < NONCE_LEN {
            return None;
        }
        let (nonce, ct) = all.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = ct.to_vec();
        let plain = key.seal.open_in_place(nonce, Aad::empty(), &mut buf).ok()?;
        Some(plain.to_vec())
    }

    /// A new 2025 session id that names this replica (visible ASCII); None without OS
    /// randomness.
    pub fn mint_session_id(&self) -> Option<String> {
        let mut r = [0u8; 16];
        getrandom::fill(&mut r).ok()?;
        let mut plain = self.me.as_bytes().to_vec();
        plain.push(b'\n');
        plain.extend_from_slice(&r);
        self.seal(&plain)
    }

    /// The replica a sealed session id or owner part names, when it is another one. None: it
    /// is this replica's, or not sealed by this cluster (then it is handled here, and an
    /// unknown session is a 404 as ever).
    pub fn elsewhere(&self, sealed: &str) -> Option<String> {
        let plain = self.open(sealed)?;
        let url = match plain.iter().position(|&b| b == b'\n') {
            Some(i) => &plain[..i],
            None => &plain[..],
        };
        let url = std::str::from_utf8(url).ok()?;
        (url != self.me).then(|| url.to_owned())
    }

    pub fn client(&self) -> &forward::Client {
        &self.client
    }
}

/// What `check-config` can check of a file's `[cluster]` (each replica may give its own
/// `--advertise-url`): the key file's secrets, the URL's form.
pub fn check(key_file: Option<&Path>, advertise_url: Option<&str>) -> Result<(), String> {
    if let Some(f) = key_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| format!("[cluster] key_file {}: {e}", f.display()))?;
        parse_secrets(&text).map_err(|e| format!("[cluster] key_file {}: {e}", f.display()))?;
    }
    if let Some(u) = advertise_url {
        normalize_url(u)?;
    }
    Ok(())
}

/// Key files should be readable by the bridge's user (and at most its group: a Kubernetes
/// secret mounted with `fsGroup` is 0440) alone; say so when others may read or write one (a
/// refusal would break the common secret mount, 0644 by default).
fn warn_if_open(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o027 != 0 {
            tracing::warn!(
                file = %path.display(),
                "the cluster key file may be read by other users; make it 0600, 0400 or 0440"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn secret(c: char) -> String {
        std::iter::repeat_n(c, 40).collect()
    }

    #[test]
    fn a_session_id_names_its_replica_to_every_other() {
        let a = Cluster::new(&[secret('a')], "http://10.0.0.1:8080").unwrap();
        let b = Cluster::new(&[secret('a')], "http://10.0.0.2:8080/").unwrap();
        let sid = a.mint_session_id().unwrap();
        assert!(sid.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{sid}");
        assert!(!sid.contains("10.0.0.1"));
        assert_eq!(a.elsewhere(&sid), None, "its own");
        assert_eq!(b.elsewhere(&sid).as_deref(), Some("http://10.0.0.1:8080"));
        assert_ne!(sid, a.mint_session_id().unwrap());
        assert_eq!(
            b.elsewhere(a.sealed_me()).as_deref(),
            Some("http://10.0.0.1:8080")
        );
    }

    #[test]
    fn only_what_the_cluster_sealed_opens() {
        let a = Cluster::new(&[secret('a')], "http://10.0.0.1:8080").unwrap();
        let other = Cluster::new(&[secret('z')], "http://10.0.0.2:8080").unwrap();
        let sid = a.mint_session_id().unwrap();
        assert_eq!(other.elsewhere(&sid), None, "another cluster's key");
        let mut bytes = sid.clone().into_bytes();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        let b = Cluster::new(&[secret('a')], "http://10.0.0.2:8080").unwrap();
        assert_eq!(b.elsewhere(&altered), None, "altered");
        for junk in ["", ".", "abc", "0123456789abcdef", "AAAA.", ".kid", "é.é"] {
            assert_eq!(b.elsewhere(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn an_old_key_still_opens_after_rotation() {
        let old = Cluster::new(&[secret('a')], "http://10.0.0.1:8080").unwrap();
        let sid = old.mint_session_id().unwrap();
        let rotated = Cluster::new(&[secret('b'), secret('a')], "http://10.0.0.2:8080").unwrap();
        assert_eq!(
            rotated.elsewhere(&sid).as_deref(),
            Some("http://10.0.0.1:8080")
        );
        let dropped = Cluster::new(&[secret('b')], "http://10.0.0.2:8080").unwrap();
        assert_eq!(dropped.elsewhere(&sid), None);
        assert_eq!(rotated.state_keys().len(), 2);
    }

    #[test]
    fn key_files_and_urls_are_checked() {
        assert_eq!(
            parse_secrets(&format!(
                "# rotated 2026-12\n\n{}\n  {}  \n",
                secret('a'),
                secret('b')
            ))
            .unwrap(),
            vec![secret('a'), secret('b')]
        );
        assert!(parse_secrets("short\n").unwrap_err().contains("line 1"));
        assert!(parse_secrets("# nothing\n").is_err());
        assert_eq!(normalize_url("http://h:80").unwrap(), "http://h:80");
        assert_eq!(normalize_url("https://h").unwrap(), "https://h:443");
        for bad in [
            "ftp://h",
            "http://u:p@h",
            "http://h/mcp",
            "nope",
            "http://h?x=1",
        ] {
            assert!(normalize_url(bad).is_err(), "{bad}");
        }
    }
}
