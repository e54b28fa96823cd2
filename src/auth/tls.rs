//! TLS termination: rustls with the aws-lc-rs provider, TLS 1.2 and 1.3 only, ALPN `h2` and
//! `http/1.1`. The certificate and key are PEM files; they are reloaded on SIGHUP (a part of
//! `crate::reload`) and when either file's modification time or size changes (checked every
//! [`POLL`]). A reload that fails keeps the previous certificate and logs why; new
//! connections pick up the new one, open connections keep theirs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::{debug, info, warn};

use crate::reload::{Part, Reloader};

/// How often the files are checked for changes.
pub const POLL: Duration = Duration::from_secs(2);
/// Longest a client may take for the handshake.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

type Stamp = Option<(SystemTime, u64, SystemTime, u64)>;

/// The current server configuration and where it came from.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
    stamp: Mutex<Stamp>,
    /// Set once the reloader runs (several endpoints may share one certificate).
    reloading: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn stamp(cert: &PathBuf, key: &PathBuf) -> Stamp {
    let m = |p: &PathBuf| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    let (c, k) = (m(cert)?, m(key)?);
    Some((c.0, c.1, k.0, k.1))
}

/// Build a server configuration from the PEM files.
pub fn server_config(cert: &PathBuf, key: &PathBuf) -> Result<ServerConfig, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in the file",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("TLS certificate and key do not fit: {e}"))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

impl Tls {
    /// Load the files (a failure here is a start-up error).
    pub fn load(cert: PathBuf, key: PathBuf) -> Result<Arc<Tls>, String> {
        let st = stamp(&cert, &key);
        let cfg = server_config(&cert, &key)?;
        Ok(Arc::new(Tls {
            cert,
            key,
            current: RwLock::new(Arc::new(cfg)),
            stamp: Mutex::new(st),
            reloading: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Re-read the files; on error the previous configuration stays.
    pub fn reload(&self) -> Result<(), String> {
        let st = stamp(&self.cert, &self.key);
        let cfg = server_config(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
        *self.stamp.lock().unwrap_or_else(|p| p.into_inner()) = st;
        Ok(())
    }

    fn changed(&self) -> bool {
        let now = stamp(&self.cert, &self.key);
        now.is_some() && *self.stamp.lock().unwrap_or_else(|p| p.into_inner()) != now
    }

    /// Re-read the files for a reload; on error the previous configuration stays and a
    /// half-written file is not retried in a tight loop: the poller waits for the next change.
    fn reload_or_keep(&self) -> Result<(), String> {
        let r = self.reload();
        if r.is_err() {
            *self.stamp.lock().unwrap_or_else(|p| p.into_inner()) = stamp(&self.cert, &self.key);
        }
        r
    }

    /// Reload on SIGHUP (registered with `reloader`) and when the files change, for the life
    /// of the certificate. Once per certificate: several endpoints may share it.
    pub fn watch(self: &Arc<Self>, reloader: &Reloader) {
        if self
            .reloading
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        reloader.register(Part::Tls, self, |t| async move {
            tokio::task::spawn_blocking(move || t.reload_or_keep())
                .await
                .map_err(|e| format!("reload task: {e}"))??;
            Ok("TLS certificate reloaded".to_owned())
        });
        let me = Arc::downgrade(self);
        // Polled: a change of the files has no event without a file watcher; one metadata
        // read of each file per `POLL`, off the runtime's threads, for the life of the
        // certificate or until the reloader stops.
        reloader.spawn_trigger(async move {
            let mut every = tokio::time::interval_at(tokio::time::Instant::now() + POLL, POLL);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(t) = me.upgrade() else { break };
                let changed = {
                    let t = t.clone();
                    tokio::task::spawn_blocking(move || t.changed().then(|| t.reload_or_keep()))
                        .await
                };
                match changed {
                    Ok(None) => {}
                    Ok(Some(Ok(()))) => info!(cause = "file change", "TLS certificate reloaded"),
                    Ok(Some(Err(e))) => {
                        warn!("TLS certificate reload failed; keeping the previous one: {e}")
                    }
                    Err(e) => warn!("TLS certificate check failed: {e}"),
                }
            }
        });
    }

    /// Handshake on an accepted connection (bounded in time); `None` when it fails.
    pub async fn accept(&self, tcp: TcpStream) -> Option<TlsStream<TcpStream>> {
        let cfg = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        match tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(tcp)).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                debug!("TLS handshake timed out");
                None
            }
        }
    }
}
