//! Where logins are kept: one JSON file per server under `--oauth-dir` (default
//! `$XDG_CONFIG_HOME/mcp-bridge/oauth`, else `~/.config/mcp-bridge/oauth`), named by a hash of
//! (server URL, resource setting, client settings) so that changing any of them starts afresh.
//! The folder is 0700 and the files 0600, written atomically (a temp file in the same folder,
//! synced, then renamed over the old one) so that a crash or a second copy never leaves half a
//! file. Each file carries `"version": 1` (an upgrade reads old files or starts a new login;
//! it never misreads one) and expiry as an absolute time (seconds since the epoch). Secrets are
//! [`Secret`]s: their `Debug` shows nothing.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::discovery::AsMeta;

/// The file layout this build writes.
pub const VERSION: u32 = 1;

/// A credential: serialised as itself, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Who the client is at the authorization server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRecord {
    pub client_id: String,
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// The redirect URI it was registered with (a dynamic registration is dropped when the
    /// callback moves).
    pub redirect_uri: String,
    /// Came from dynamic registration (so it may be replaced).
    #[serde(default)]
    pub registered: bool,
    /// How it authenticates at the token endpoint, as registered (RFC 7591 §3.2.1); None:
    /// as the server's metadata allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
}

/// A token set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub access_token: Secret,
    #[serde(default)]
    pub refresh_token: Option<Secret>,
    /// Seconds since the epoch; None = the server gave no lifetime.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// The lifetime the server gave (`expires_in`, seconds), so that a short-lived token is
    /// refreshed ahead by a share of its life rather than the fixed margin.
    #[serde(default)]
    pub lifetime: Option<u64>,
    #[serde(default)]
    pub scope: Option<String>,
    /// The answer's `token_type` when it is not Bearer: `DPoP` for a token bound to the
    /// login's key (sent as `Authorization: DPoP`, each request with a proof).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_type: Option<String>,
}

impl TokenRecord {
    /// Is it bound to the login's DPoP key?
    pub fn dpop(&self) -> bool {
        self.token_type
            .as_deref()
            .is_some_and(|t| t.eq_ignore_ascii_case("dpop"))
    }

    /// Is it time to replace it: within [`super::REFRESH_AHEAD`] seconds of its expiry, or
    /// within a quarter of its lifetime when that is shorter?
    pub fn due(&self, now: u64) -> bool {
        let ahead = self
            .lifetime
            .map_or(super::REFRESH_AHEAD, |l| super::REFRESH_AHEAD.min(l / 4));
        self.expires_at
            .is_some_and(|e| e <= now.saturating_add(ahead))
    }
}

/// One server's login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub server: String,
    /// The resource the token was issued for (`resource`), as discovered.
    pub resource: String,
    pub auth_server: AsMeta,
    #[serde(default)]
    pub client: Option<ClientRecord>,
    #[serde(default)]
    pub token: Option<TokenRecord>,
    /// The login's DPoP key (RFC 9449; base64url PKCS#8), when it proves possession.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<Secret>,
}

/// Now, in seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The default folder for logins.
pub fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("mcp-bridge").join("oauth"))
}

/// A held login lock (see [`Store::lock`]); dropping it releases the lock.
#[derive(Debug)]
pub struct LoginLock(#[allow(dead_code)] std::fs::File);

/// The file of one server's login. The file I/O is synchronous ([`Store::load`],
/// [`Store::save`]: for the `auth` subcommands, which run no runtime); the OAuth client uses
/// [`Store::read`], [`Store::write`] and [`Store::lock`], which keep it off the runtime's
/// threads.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    file: PathBuf,
}

impl Store {
    /// `parts` are what the key is made of (server URL, resource setting, client settings).
    pub fn new(dir: &Path, parts: &[&str]) -> Self {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_be_bytes());
            h.update(p.as_bytes());
        }
        let d = h.finalize();
        let name: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
        Store {
            dir: dir.to_owned(),
            file: dir.join(format!("{name}.json")),
        }
    }

    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The stored login, if there is a readable one of this layout.
    pub fn load(&self) -> Option<Record> {
        let text = std::fs::read(&self.file).ok()?;
        let r: Record = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("ignoring {}: {e}", self.file.display());
                return None;
            }
        };
        (r.version == VERSION).then_some(r)
    }

    fn make_dir(&self) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
    }

    /// This server's login lock, held by one process at a time (an advisory `flock` on
    /// `<file>.lock`, released when the holder exits, however it exits), waited for up to
    /// `wait`. Copies of the bridge started together log in once: the holder logs in or
    /// refreshes, the others then read its tokens from the file.
    ///
    /// The wait is a blocking `flock` (no polling) on a thread of its own, bounded here by
    /// `wait`: when the wait runs out first, the thread closes the file (giving the lock up
    /// at once) as soon as the holder lets it go. It is a plain thread, not the runtime's
    /// blocking pool, so that a process stopping meanwhile does not wait for the holder.
    pub async fn lock(&self, wait: Duration) -> Result<LoginLock, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let me = self.clone();
        std::thread::Builder::new()
            .name("oauth-lock".into())
            .spawn(move || {
                // Nobody waiting any more: the lock (if taken) is released as `f` drops.
                let _ = tx.send(me.lock_blocking());
            })
            .map_err(|e| format!("cannot start the login lock's thread: {e}"))?;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err("the login lock's thread ended without an answer".into()),
            Err(_) => Err(format!(
                "another mcp-bridge is logging in to this server and did not finish within {} s",
                wait.as_secs()
            )),
        }
    }

    /// Open `<file>.lock` (0600, in the 0700 folder) and wait for its `flock`.
    fn lock_blocking(&self) -> Result<LoginLock, String> {
        self.make_dir()
            .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let path = self.file.with_extension("lock");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.lock().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(LoginLock(f))
    }

    /// [`Store::load`] off the runtime's threads.
    pub async fn read(&self) -> Option<Record> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.load())
            .await
            .ok()
            .flatten()
    }

    /// [`Store::save`] off the runtime's threads.
    pub async fn write(&self, r: Record) -> std::io::Result<()> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.save(&r))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Write `r` atomically with mode 0600 in a 0700 folder.
    pub fn save(&self, r: &Record) -> std::io::Result<()> {
        self.make_dir()?;
        let mut rnd = [0u8; 8];
        let _ = getrandom::fill(&mut rnd);
        let tag: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = self.dir.join(format!(".tmp-{}-{tag}", std::process::id()));
        let body = serde_json::to_vec_pretty(r).map_err(std::io::Error::other)?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.file)
        };
        let r = write();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            version: VERSION,
            server: "https://h/mcp".into(),
            resource: "https://h/mcp".into(),
            auth_server: AsMeta {
                issuer: "https://as".into(),
                authorization_endpoint: "https://as/a".into(),
                token_endpoint: "https://as/t".into(),
                registration_endpoint: None,
                code_challenge_methods_supported: vec!["S256".into()],
                ..AsMeta::default()
            },
            client: None,
            token: Some(TokenRecord {
                access_token: Secret("at-secret".into()),
                refresh_token: Some(Secret("rt-secret".into())),
                expires_at: Some(123),
                lifetime: None,
                scope: None,
                token_type: None,
            }),
            dpop_key: None,
        }
    }

    #[test]
    fn a_short_lived_token_is_due_a_quarter_of_its_life_ahead() {
        let t = |expires_at, lifetime| TokenRecord {
            access_token: Secret("a".into()),
            refresh_token: None,
            expires_at: Some(expires_at),
            lifetime,
            scope: None,
            token_type: None,
        };
        // 20 s tokens: due 5 s ahead, not 60 (which would refresh before every request).
        assert!(!t(1020, Some(20)).due(1000));
        assert!(t(1005, Some(20)).due(1000));
        // Long-lived, or of unknown lifetime: the fixed minute.
        assert!(!t(1061, Some(3600)).due(1000));
        assert!(t(1060, Some(3600)).due(1000));
        assert!(t(1060, None).due(1000));
    }

    #[test]
    fn saved_atomically_private_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("oauth");
        let s = Store::new(&dir, &["https://h/mcp", "resource", ""]);
        assert!(s.load().is_none());
        s.save(&record()).unwrap();
        s.save(&record()).unwrap();
        assert_eq!(s.load(), Some(record()));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(s.path()), 0o600);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temp file left"
        );
        let other = Store::new(&dir, &["https://h/mcp", "no-resource", ""]);
        assert_ne!(other.path(), s.path());
        let text = std::fs::read_to_string(s.path()).unwrap();
        assert!(text.contains("\"version\": 1"), "{text}");
    }

    /// The lock is a bounded wait: a second taker gives up after its wait, and a waiter that
    /// gave up does not keep the lock when it comes (its thread closes the file).
    #[tokio::test]
    async fn the_login_lock_waits_bounded_and_passes_on() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(&d.path().join("oauth"), &["x"]);
        let held = s.lock(Duration::from_secs(5)).await.unwrap();
        let t0 = std::time::Instant::now();
        let e = s.lock(Duration::from_millis(200)).await.unwrap_err();
        assert!(e.contains("did not finish within"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.lock(Duration::from_secs(20)).await });
        drop(held);
        let next = waiter.await.unwrap().unwrap();
        drop(next);
        // Free again although the waiter that gave up was still queued for it.
        s.lock(Duration::from_secs(20)).await.unwrap();
        let lock = s.path().with_extension("lock");
        let mode = std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[tokio::test]
    async fn read_and_write_off_the_runtime_match_load_and_save() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(&d.path().join("oauth"), &["y"]);
        assert!(s.read().await.is_none());
        s.write(record()).await.unwrap();
        assert_eq!(s.read().await, Some(record()));
        assert_eq!(s.load(), Some(record()));
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn secrets_stay_out_of_debug_and_other_versions_are_ignored() {
        let r = record();
        let dbg = format!("{r:?}");
        assert!(
            !dbg.contains("at-secret") && !dbg.contains("rt-secret"),
            "{dbg}"
        );
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path(), &["x"]);
        let mut r2 = record();
        r2.version = 99;
        s.save(&r2).unwrap();
        assert!(s.load().is_none());
        std::fs::write(s.path(), "{garbage").unwrap();
        assert!(s.load().is_none());
    }
}
