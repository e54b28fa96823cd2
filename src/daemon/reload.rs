//! SIGHUP: re-read the configuration and apply the difference, all or nothing. Everything a
//! reload needs is prepared before anything changes (the new plan, the new security settings,
//! the new auth of servers that keep running, the servers that are new or changed); only then
//! are the routes swapped and the retired servers drained. Any failure on the way stops what
//! the attempt started and leaves the running configuration as it was.
//!
//! Its own module because the steps are many and each is easy to get wrong on its own; kept
//! as `impl Daemon` so it works on the daemon's state directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::{info, warn};

use super::router::{self, Routes, ServerRt};
use super::{auth_host, is_solo, load_plan, notify, off_runtime, Daemon};
use crate::auth::{Auth, Prepared};
use crate::config::Plan;

/// Servers of a new plan that keep running, with the auth they get.
type NewAuth = Vec<(Arc<ServerRt>, Option<Arc<Auth>>)>;

/// The servers a reload will run, and what changed.
#[derive(Default)]
struct Started {
    servers: BTreeMap<String, Arc<ServerRt>>,
    added: Vec<String>,
    restarted: Vec<String>,
    retired: Vec<Arc<ServerRt>>,
    unchanged: usize,
}

/// Settings that change only on restart keep their running values (warned once).
fn keep_restart_settings(old: &Plan, new: &mut Plan) {
    if new.same_restart_settings(old) {
        return;
    }
    warn!(
        "listen addresses, connection limits, TLS paths, public_url, metrics and [cluster] \
         settings change only on restart; keeping the running ones (certificates themselves \
         reload on SIGHUP; cluster keys rotate by a rolling restart)"
    );
    new.cluster_key_file = old.cluster_key_file.clone();
    new.advertise_url = old.advertise_url.clone();
    new.cluster_ca_file = old.cluster_ca_file.clone();
    new.conn = old.conn;
    new.listen = old.listen.clone();
    new.auth.tls_cert = old.auth.tls_cert.clone();
    new.auth.tls_key = old.auth.tls_key.clone();
    new.public_url = old.public_url.clone();
    new.metrics_listen = old.metrics_listen;
    new.metrics_on_main = old.metrics_on_main;
}

/// Does `rt` keep running, unchanged, under `new`?
fn keeps(rt: &ServerRt, spec: &crate::config::ServerSpec, new: &Plan) -> bool {
    rt.spec == *spec && rt.origins == new.allow_origins
}

impl Daemon {
    /// SIGHUP: one pass of the reloader (the configuration first, then every certificate,
    /// token file and JWKS), inside systemd's RELOADING=1 ... READY=1.
    pub(super) async fn on_hangup(&self) {
        notify::reloading();
        self.reloader.reload_all().await;
        notify::ready(&self.status());
    }

    /// The configuration's part of a pass: re-read it and apply the difference (see the
    /// module comment); on an error the running configuration stays.
    pub(super) async fn reload_config(self: &Arc<Self>) -> Result<String, String> {
        if is_solo(&self.sources) {
            info!("SIGHUP received: re-reading the flags' files (certificates, token files, JWKS)");
        } else {
            info!("SIGHUP: re-reading the configuration");
        }
        self.try_reload().await?;
        Ok("configuration reload done".to_owned())
    }

    async fn try_reload(self: &Arc<Self>) -> Result<(), String> {
        let old = self.plan();
        // The files (configuration, servers JSON, token files, certificates) are read off
        // the runtime's threads: the daemon serves while it reloads.
        let d = self.clone();
        let mut new = off_runtime(move || load_plan(&d.sources, &d.args, &d.given)).await?;
        keep_restart_settings(&old, &mut new);
        let auth_changed = new.auth != old.auth;
        let running_security = self.security();
        let security = if auth_changed {
            let (was, auth, host) = (
                running_security.clone(),
                new.auth.clone(),
                auth_host(&self.bound),
            );
            Arc::new(off_runtime(move || was.reconfigure(&auth, host)).await?)
        } else {
            running_security
        };
        let current = self.router.current();
        let new_auth = if auth_changed {
            self.auth_for_kept(&current, &new, &security).await?
        } else {
            Vec::new()
        };
        let mut started = self.start_changed(&current, &new, &security).await?;
        let mut removed = Vec::new();
        for (name, rt) in &current.servers {
            if !started.servers.contains_key(name) {
                removed.push(name.clone());
                started.retired.push(rt.clone());
            }
        }
        self.router.replace(Routes {
            servers: std::mem::take(&mut started.servers),
            default: new.default_server.clone(),
            solo: new.solo,
        });
        for (rt, auth) in new_auth {
            rt.app.cfg.auth.replace(auth);
        }
        if auth_changed {
            info!("authentication settings reloaded");
            *self.security.lock().unwrap_or_else(|p| p.into_inner()) = security;
        }
        // Unchanged settings: token files and the JWKS are the next parts of this pass.
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = new;
        for rt in started.retired {
            let hurry = self.hurry.clone();
            self.drains.spawn(async move {
                rt.drain_and_stop(rt.spec.limits.shutdown_grace, &hurry)
                    .await;
            });
        }
        info!(
            added = ?started.added,
            removed = ?removed,
            restarted = ?started.restarted,
            unchanged = started.unchanged,
            "configuration reloaded: {}",
            router::describe(&self.router.current())
        );
        Ok(())
    }

    /// New auth for the servers that keep running: built before anything changes, so a JWKS
    /// that cannot be loaded rejects the whole reload.
    async fn auth_for_kept(
        &self,
        current: &Routes,
        new: &Plan,
        security: &Prepared,
    ) -> Result<NewAuth, String> {
        let mut out = Vec::new();
        for spec in &new.servers {
            let Some(rt) = current.servers.get(&spec.name) else {
                continue;
            };
            if !keeps(rt, spec, new) {
                continue;
            }
            let auth = self
                .endpoint(security, spec, new)
                .build_auth(&rt.app.cfg.path, self.first_bound(), &self.reloader)
                .await
                .map_err(|e| format!("server {:?}: {e}", spec.name))?;
            out.push((rt.clone(), auth));
        }
        Ok(out)
    }

    /// Start the servers of `new` that are new or changed; keep the others. On a failure,
    /// stop what this attempt started (the running servers are untouched).
    async fn start_changed(
        &self,
        current: &Routes,
        new: &Plan,
        security: &Arc<Prepared>,
    ) -> Result<Started, String> {
        let mut s = Started::default();
        for spec in &new.servers {
            let old_rt = current.servers.get(&spec.name);
            // An endpoint stays only while every server it merges stays too.
            let stays = |rt: &&Arc<ServerRt>| keeps(rt, spec, new) && rt.members_are(&s.servers);
            if let Some(rt) = old_rt.filter(stays) {
                s.servers.insert(spec.name.clone(), rt.clone());
                s.unchanged += 1;
                continue;
            }
            match self.start_server(spec, new, security, &s.servers).await {
                Ok(rt) => {
                    s.servers.insert(spec.name.clone(), rt);
                    match old_rt {
                        Some(o) => {
                            s.restarted.push(spec.name.clone());
                            s.retired.push(o.clone());
                        }
                        None => s.added.push(spec.name.clone()),
                    }
                }
                Err(e) => {
                    for (name, rt) in s.servers {
                        let running = current.servers.get(&name);
                        if running.is_none_or(|o| !Arc::ptr_eq(&rt, o)) {
                            rt.drain_and_stop(std::time::Duration::ZERO, &self.hurry)
                                .await;
                        }
                    }
                    return Err(e.to_string());
                }
            }
        }
        Ok(s)
    }
}
