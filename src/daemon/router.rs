//! Several named servers behind one set of listeners. Each server is a complete HTTP face
//! ([`App`]) with its own upstream; the router picks the app by path — `/servers/<name>/mcp`,
//! or `/mcp` for the default server — and hands the request to [`http::handle`]. Plain `serve`
//! has one server that gets every request (`Routes::solo`). The route table
//! is swapped atomically on reload; a request already routed keeps its app until it finishes
//! (each app counts its requests, including response bodies still streaming, so a removed or
//! replaced server can drain before its child stops). The router's own answers (health, 404s
//! off every server's path) are counted like the apps' ones.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ::http::{Method, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::auth::WELL_KNOWN;
use crate::config::ServerSpec;
use crate::face::accept::{self, AcceptCfg, ReqBody};
use crate::face::http::{self, App, HttpConfig};
use crate::face::respond::{self, status_only, Body};
use crate::metrics::Metrics;
use crate::upstream::aggregate::Aggregate;

/// The liveness probe's path. Its `GET` does not count against `--max-streams` (a bridge full
/// of long streams is busy, not dead); `/readyz` does, so a full listener reads unready and a
/// balancer sends new work elsewhere.
pub const LIVENESS: &str = "/healthz";
/// What the accept loop leaves out of the stream cap.
pub const UNCAPPED: &[&str] = &[LIVENESS];

/// One running named server.
pub struct ServerRt {
    pub spec: ServerSpec,
    /// Settings outside the spec that shape its face (a change restarts the server).
    pub origins: Vec<String>,
    pub app: Arc<App>,
    inflight: Arc<Requests>,
    /// An endpoint (`[endpoints.NAME]`): the merge, and the running servers it merges (it
    /// is replaced when any of them is).
    pub endpoint: Option<(Arc<Aggregate>, Vec<Arc<ServerRt>>)>,
}

/// A server's requests (and response bodies) still running, and who waits for none to be.
#[derive(Default)]
struct Requests {
    n: AtomicUsize,
    /// Notified (every waiter) each time the count drops to 0.
    idle: Notify,
}

impl Requests {
    /// Until the count is 0 (at once if it is).
    async fn idle(&self) {
        loop {
            // Registered before the check: a drop to 0 between the two wakes this waiter.
            let woken = self.idle.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.n.load(Ordering::SeqCst) == 0 {
                return;
            }
            woken.await;
        }
    }
}

/// Counts one request (and its response body) against a server.
struct InFlight(Arc<Requests>);

impl InFlight {
    fn enter(n: &Arc<Requests>) -> Self {
        n.n.fetch_add(1, Ordering::SeqCst);
        InFlight(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl ServerRt {
    /// Start the server's upstream (spawn its child) and build its face.
    pub fn start(
        spec: ServerSpec,
        origins: Vec<String>,
        cfg: HttpConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<ServerRt>, String> {
        let tracker = TaskTracker::new();
        let children = CancellationToken::new();
        // The server's upstream is started here, by its owner; the face only holds it.
        let launched =
            crate::upstream::launch(&spec.name, spec.upstream(), &metrics, &children, &tracker)?;
        let app = App::start(
            &spec.name,
            cfg,
            launched,
            metrics,
            CancellationToken::new(),
            children,
            tracker,
        )?;
        Ok(ServerRt::running(spec, origins, app, None))
    }

    /// The running server around its face `app` (its sweeper started).
    fn running(
        spec: ServerSpec,
        origins: Vec<String>,
        app: Arc<App>,
        endpoint: Option<(Arc<Aggregate>, Vec<Arc<ServerRt>>)>,
    ) -> Arc<ServerRt> {
        http::spawn_sweeper(&app);
        Arc::new(ServerRt {
            spec,
            origins,
            app,
            inflight: Arc::new(Requests::default()),
            endpoint,
        })
    }

    /// Start an endpoint over `members` (running servers, in the spec's order) and build
    /// its face. The members are not stopped with it: they belong to their own entries.
    pub fn start_endpoint(
        spec: ServerSpec,
        members: Vec<Arc<ServerRt>>,
        origins: Vec<String>,
        cfg: HttpConfig,
        metrics: Arc<Metrics>,
        audit: Option<Arc<crate::audit::Audit>>,
    ) -> Result<Arc<ServerRt>, String> {
        let crate::config::Target::Endpoint(e) = &spec.target else {
            return Err(format!("{:?} is not an endpoint", spec.name));
        };
        let tracker = TaskTracker::new();
        let children = CancellationToken::new();
        let ups = members
            .iter()
            .map(|m| (m.name().to_owned(), m.app.upstream.clone()))
            .collect();
        let agg = Aggregate::start(
            &spec.name,
            e,
            ups,
            metrics.clone(),
            audit,
            children.clone(),
            &tracker,
        );
        let launched = crate::upstream::Launched {
            shared: agg.clone(),
            spawn_for_session: None,
            pin_for_session: None,
        };
        let app = App::start(
            &spec.name,
            cfg,
            launched,
            metrics,
            CancellationToken::new(),
            children,
            tracker,
        )?;
        Ok(ServerRt::running(spec, origins, app, Some((agg, members))))
    }

    /// For an endpoint: are its members exactly these running servers still?
    pub fn members_are(&self, running: &BTreeMap<String, Arc<ServerRt>>) -> bool {
        self.endpoint.as_ref().is_none_or(|(_, ms)| {
            ms.iter()
                .all(|m| running.get(m.name()).is_some_and(|r| Arc::ptr_eq(r, m)))
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Requests (and response bodies) still running.
    pub fn in_flight(&self) -> usize {
        self.inflight.n.load(Ordering::SeqCst)
    }

    /// Until no request (nor response body) of this server is running.
    pub async fn idle(&self) {
        self.inflight.idle().await;
    }

    /// End long-lived streams, let running requests finish for up to `grace` (less if `hurry`
    /// is cancelled), then end sessions and stop the child with its stop ladder.
    pub async fn drain_and_stop(&self, grace: Duration, hurry: &CancellationToken) {
        self.app.stopping.cancel();
        tokio::select! {
            _ = self.idle() => {}
            _ = tokio::time::sleep(grace) => {}
            _ = hurry.cancelled() => {}
        }
        let left = self.in_flight();
        if left > 0 {
            warn!(server = %self.name(), left, "drain time over; ending the remaining requests");
        }
        self.app.sessions.close_all();
        self.app.children.cancel();
        self.app.tracker.close();
        self.app.tracker.wait().await;
        info!(server = %self.name(), "server stopped");
    }
}

/// The route table.
#[derive(Default)]
pub struct Routes {
    pub servers: BTreeMap<String, Arc<ServerRt>>,
    /// Also published at `/mcp`.
    pub default: Option<String>,
    /// Plain `serve`: the one server answers every request itself (its path, health,
    /// metrics, protected-resource metadata and 404s, as its face decides).
    pub solo: bool,
}

/// Picks the app for each request.
pub struct Router {
    routes: RwLock<Arc<Routes>>,
    metrics: Arc<Metrics>,
}

enum Pick {
    /// Hand to this server, with the request path rewritten to this (when it differs).
    Server(Arc<ServerRt>, Option<String>),
    Health(bool),
    NotFound,
}

impl Router {
    pub fn new(routes: Routes, metrics: Arc<Metrics>) -> Arc<Router> {
        Arc::new(Router {
            routes: RwLock::new(Arc::new(routes)),
            metrics,
        })
    }

    pub fn current(&self) -> Arc<Routes> {
        self.routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Install a new table; returns the old one.
    pub fn replace(&self, routes: Routes) -> Arc<Routes> {
        std::mem::replace(
            &mut *self.routes.write().unwrap_or_else(|p| p.into_inner()),
            Arc::new(routes),
        )
    }

    fn pick(&self, path: &str) -> Pick {
        let routes = self.current();
        if routes.solo {
            return match routes.servers.values().next() {
                Some(rt) => Pick::Server(rt.clone(), None),
                None => Pick::NotFound,
            };
        }
        let default = routes
            .default
            .as_ref()
            .and_then(|d| routes.servers.get(d))
            .cloned();
        if path == LIVENESS {
            return Pick::Health(false);
        }
        if path == "/readyz" {
            return Pick::Health(true);
        }
        if path == "/metrics" {
            // Every app shares one registry; the app decides (metrics_on_main, auth).
            return match default.or_else(|| routes.servers.values().next().cloned()) {
                Some(rt) => Pick::Server(rt, None),
                None => Pick::NotFound,
            };
        }
        if path == "/mcp" {
            return match default {
                Some(rt) => {
                    let p = rt.app.cfg.path.clone();
                    Pick::Server(rt, Some(p))
                }
                None => Pick::NotFound,
            };
        }
        if let Some(name) = path
            .strip_prefix("/servers/")
            .and_then(|r| r.strip_suffix("/mcp"))
        {
            return match routes.servers.get(name) {
                Some(rt) => Pick::Server(rt.clone(), None),
                None => Pick::NotFound,
            };
        }
        if let Some(rt) = endpoint_at(&routes, path) {
            return Pick::Server(rt, None);
        }
        if let Some(rest) = path.strip_prefix(WELL_KNOWN) {
            if let Some(rt) = endpoint_at(&routes, rest) {
                return Pick::Server(rt, None);
            }
            // Protected-resource metadata: path-inserted for a named server, else the default's.
            if let Some(name) = rest
                .strip_prefix("/servers/")
                .and_then(|r| r.strip_suffix("/mcp"))
            {
                if let Some(rt) = routes.servers.get(name) {
                    return Pick::Server(rt.clone(), None);
                }
            }
            if rest.is_empty() || rest == "/" || rest == "/mcp" {
                if let Some(rt) = default.or_else(|| routes.servers.values().next().cloned()) {
                    let p = format!("{WELL_KNOWN}{}", rt.app.cfg.path);
                    return Pick::Server(rt, Some(p));
                }
            }
        }
        Pick::NotFound
    }

    /// Answer one request.
    pub async fn handle(&self, mut req: Request<ReqBody>, peer: SocketAddr) -> Response<Body> {
        let started = Instant::now();
        let (route, resp) = match self.pick(req.uri().path()) {
            Pick::Server(rt, rewrite) => {
                if let Some(p) = rewrite {
                    let pq = match req.uri().query() {
                        Some(q) => format!("{p}?{q}"),
                        None => p,
                    };
                    if let Ok(u) = Uri::builder().path_and_query(pq).build() {
                        *req.uri_mut() = u;
                    }
                }
                let guard = InFlight::enter(&rt.inflight);
                // The app counts its own answers.
                let resp = http::handle(rt.app.clone(), req, peer).await;
                return resp.map(|b| {
                    b.map_frame(move |f| {
                        // The guard lives as long as the body: a streaming answer counts.
                        let _held = &guard;
                        f
                    })
                    .boxed_unsync()
                });
            }
            Pick::Health(ready) => ("health", self.health(ready)),
            Pick::NotFound => ("other", status_only(StatusCode::NOT_FOUND)),
        };
        let method: &Method = req.method();
        self.metrics
            .http_response(route, method.as_str(), resp.status().as_u16());
        self.metrics
            .http_duration(route, method.as_str(), started.elapsed().as_secs_f64());
        resp
    }

    /// `/healthz` (`ready` false: the process answers) or `/readyz` (every server's upstream
    /// is ready).
    fn health(&self, ready: bool) -> Response<Body> {
        if !ready {
            return respond::json(StatusCode::OK, Bytes::from_static(b"{\"status\":\"ok\"}"));
        }
        let routes = self.current();
        let down: Vec<&str> = routes
            .servers
            .values()
            .filter(|s| !s.app.upstream.is_ready())
            .map(|s| s.name())
            .collect();
        // Each endpoint's members, ready or not (an endpoint is ready while one member is).
        let endpoints: serde_json::Map<String, serde_json::Value> = routes
            .servers
            .values()
            .filter_map(|rt| {
                let (agg, _) = rt.endpoint.as_ref()?;
                let members: serde_json::Map<String, serde_json::Value> = agg
                    .members_ready()
                    .into_iter()
                    .map(|(n, r)| (n.to_owned(), json!(if r { "ready" } else { "down" })))
                    .collect();
                Some((rt.name().to_owned(), serde_json::Value::Object(members)))
            })
            .collect();
        let mut body = if down.is_empty() {
            json!({"status": "ready"})
        } else {
            json!({"status": "not ready", "down": down})
        };
        if !endpoints.is_empty() {
            body["endpoints"] = serde_json::Value::Object(endpoints);
        }
        let status = if down.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        respond::json(status, Bytes::from(body.to_string()))
    }
}

/// The endpoint published at `path`, if any.
fn endpoint_at(routes: &Routes, path: &str) -> Option<Arc<ServerRt>> {
    routes
        .servers
        .values()
        .find(|rt| rt.endpoint.is_some() && rt.spec.path == path)
        .cloned()
}

/// Accept connections on `listener` (bounded by `cfg.limits`) until `stopping` is
/// cancelled, then let open connections finish for up to `cfg.grace`.
pub async fn accept_loop(
    listener: TcpListener,
    router: Arc<Router>,
    cfg: AcceptCfg,
    stopping: CancellationToken,
) {
    let drained = accept::accept_loop(listener, cfg, stopping, move |req, peer| {
        let r = router.clone();
        async move { r.handle(req, peer).await }
    })
    .await;
    if !drained {
        warn!("shutdown grace period over; closing remaining connections");
    }
}

/// Each server's path (`/servers/<name>/mcp`, or plain `serve`'s `--path`) for logs.
pub fn describe(routes: &Routes) -> String {
    routes
        .servers
        .iter()
        .map(|(n, rt)| {
            let path = &rt.spec.path;
            if routes.default.as_deref() == Some(n.as_str()) && path != "/mcp" {
                format!("{path} (also /mcp)")
            } else {
                path.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn idle_is_told_when_the_last_request_ends() {
        let n = Arc::new(Requests::default());
        assert_eq!(
            n.idle().now_or_never(),
            Some(()),
            "nothing running: idle at once"
        );
        let (a, b) = (InFlight::enter(&n), InFlight::enter(&n));
        let mut idle = Box::pin(n.idle());
        assert!((&mut idle).now_or_never().is_none());
        drop(a);
        assert!((&mut idle).now_or_never().is_none(), "one still runs");
        drop(b);
        // Woken by the drop to 0 (no tick): ready at the next poll.
        assert_eq!(idle.now_or_never(), Some(()));
    }
}
