//! An aggregation endpoint (`[endpoints.NAME]`) as an [`Upstream`]: several of the daemon's
//! servers (its *members*: children, pools, remotes, of either era) behind one face. The
//! face and the core see one upstream; this module owns what merging means:
//!
//! - **Lists** (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`)
//!   are answered here: every member's page, names published as `<server><sep><name>`
//!   ([`names`]), walked with a signed cursor of the endpoint's own ([`cursor`], [`lists`]).
//! - **Routed calls** (`tools/call`, `prompts/get`, `resources/*`, `completion/complete`) go
//!   to the member that owns the name or URI, prefix removed, as the member's own call: the
//!   handle that comes back is the member's, so cancellation, progress and the call's own
//!   requests to the caller are the member's machinery. Only the ids of those requests are
//!   renamed on the way ([`events::Asked`]): two members may use one id.
//! - **Eras.** Each member keeps its own: [`Upstream::call_era`] tells the core and the faces
//!   the era of the member a call goes to, so the era rules (`crate::core`) apply per call
//!   exactly as they do in front of that member alone. What the endpoint answers itself is
//!   already in the caller's era (each member's part went through `core::start`). Toward
//!   the session side the endpoint speaks 2025 ([`Upstream::info`]): list changes and
//!   resource updates of every member arrive on [`Upstream::subscribe`] — a 2025 member's
//!   own, and for a 2026 member a listen the endpoint holds ([`events`]) — which is how a
//!   2025 session's GET stream and a 2026 caller's listen are fed for a 2025 upstream.
//! - **A member that is down** drops out of the lists (and `list_changed` goes out); a call
//!   routed to it gets an error naming it; the others keep answering.
//! - **Per caller**: `[[policy]]` hides and refuses names ([`Aggregate::permit`]) or has the
//!   caller approve a call first ([`confirm`]); `rate`/`concurrency` ([`limits`]); one
//!   audit line per call ([`audited`]). A 2025 caller's subscriptions on a 2026 member are
//!   kept here ([`Aggregate::subscribe_modern`]).
//!
//! The members are owned by their own `[servers.NAME]` entries: stopping the endpoint stops
//! only its own tasks.

mod audited;
mod caller;
mod confirm;
pub mod cursor;
mod discover;
mod events;
mod limits;
mod lists;
pub mod names;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::{join_all, BoxFuture};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::call::{
    sinks, Call, CallHandle, CancelOnDrop, Outcome, SharedUpstream, Upstream, UpstreamEvent,
    UpstreamInfo,
};
use crate::config::endpoint::{EndpointSpec, Prefix};
use crate::error::BridgeError;
use crate::jsonrpc::{self, code, Fields};
use crate::metrics::Metrics;
use crate::protocol::Era;
use caller::caller_key;
use names::{Kind, Naming, Routes};

/// How long a call waits for a member that was up and is down now (restarting after a
/// crash, its remote unreachable): a short wait, then the caller is told which member.
const DOWN_WAIT: Duration = Duration::from_secs(2);
/// How long a computed `initialize` stays when a member did not answer for it.
const PARTIAL_INFO_TTL: Duration = Duration::from_secs(2);

/// One merged server.
pub struct Member {
    pub name: String,
    pub up: SharedUpstream,
    /// Has it been ready once? (A member never ready yet is starting: worth its start wait.)
    seen_ready: AtomicBool,
    /// Did its last list or call fail for want of it (a remote that stopped answering stays
    /// "ready" to its upstream: this is how the endpoint knows)?
    failing: AtomicBool,
}

impl Member {
    /// Up once and not now, or failing.
    fn is_down(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
            || self.seen_ready.load(Ordering::Relaxed) && !self.up.is_ready()
    }
    /// The wait a call to it gets: its start wait while it is starting, a short one once
    /// it is down.
    fn wait(&self, wait: Duration) -> Duration {
        if self.is_down() {
            wait.min(DOWN_WAIT)
        } else {
            wait
        }
    }
}

/// Does `e` say the member itself is not there (rather than that this one call failed)?
fn member_gone(e: &BridgeError) -> bool {
    matches!(
        e,
        BridgeError::ChildExited(_) | BridgeError::Unavailable(_) | BridgeError::Remote { .. }
    )
}

/// The endpoint. Built by [`Aggregate::start`]; cheap to share.
pub struct Aggregate {
    name: String,
    title: Option<String>,
    members: Vec<Member>,
    names: Vec<String>,
    naming: Naming,
    /// Who may use what (`[[policy]]`).
    policy: crate::config::policy::Policy,
    routes: RwLock<Routes>,
    signer: cursor::CursorSigner,
    events: broadcast::Sender<UpstreamEvent>,
    asked: Arc<events::Asked>,
    /// The merged `initialize`, and when it was made from fewer than every member.
    info: Mutex<Option<(UpstreamInfo, Option<Instant>)>>,
    me: Weak<Aggregate>,
    tracker: TaskTracker,
    stop: CancellationToken,
    metrics: Arc<Metrics>,
    /// Where each routed or refused call is written (`[audit]`), if anywhere.
    audit: Option<Arc<crate::audit::Audit>>,
    /// Calls per caller (`rate`, `burst`, `concurrency`), if limited.
    limiter: Option<Arc<limits::Limiter>>,
    /// The approval step of `confirm` rules: open questions, the round states' key.
    approvals: confirm::Approvals,
    /// The resources callers subscribed to on each 2026 member: carried by the listen the
    /// endpoint holds on it ([`events`]), counted per URI ([`Aggregate::subscribe_modern`]).
    subs: Vec<Arc<crate::core::held::Subscriptions>>,
    sub_counts: Mutex<std::collections::HashMap<(usize, String), usize>>,
}

/// Where a routed call goes: the member, and the call as that member reads it.
struct Routed {
    member: usize,
    call: Call,
}

impl Aggregate {
    /// The endpoint `name` over `members` (in `spec`'s order), its tasks on `tracker` until
    /// `stop`.
    pub fn start(
        name: &str,
        spec: &EndpointSpec,
        members: Vec<(String, SharedUpstream)>,
        metrics: Arc<Metrics>,
        audit: Option<Arc<crate::audit::Audit>>,
        stop: CancellationToken,
        tracker: &TaskTracker,
    ) -> Arc<Aggregate> {
        let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
        let (events, _) = broadcast::channel(256);
        let subs = names
            .iter()
            .map(|_| crate::core::held::Subscriptions::new())
            .collect();
        let agg = Arc::new_cyclic(|me| Aggregate {
            name: name.to_owned(),
            title: spec.title.clone(),
            members: members
                .into_iter()
                .map(|(name, up)| Member {
                    name,
                    up,
                    seen_ready: AtomicBool::new(false),
                    failing: AtomicBool::new(false),
                })
                .collect(),
            names,
            naming: Naming {
                separator: spec.separator.clone(),
                prefix: spec.prefix,
            },
            policy: spec.policy.clone(),
            routes: RwLock::new(Routes::default()),
            signer: cursor::CursorSigner::new(),
            events,
            asked: Arc::new(events::Asked::default()),
            info: Mutex::new(None),
            me: me.clone(),
            tracker: tracker.clone(),
            stop,
            metrics,
            audit,
            limiter: limits::Limiter::new(&spec.limits),
            approvals: confirm::Approvals::new(),
            subs,
            sub_counts: Mutex::new(std::collections::HashMap::new()),
        });
        events::start(&agg);
        agg
    }

    /// The endpoint's name.
    pub fn endpoint(&self) -> &str {
        &self.name
    }

    /// Each member and whether it is ready, in order (for `/readyz`).
    pub fn members_ready(&self) -> Vec<(&str, bool)> {
        self.members
            .iter()
            .map(|m| (m.name.as_str(), m.up.is_ready()))
            .collect()
    }

    fn routes(&self) -> std::sync::RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(|p| p.into_inner())
    }

    fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, Routes> {
        self.routes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Member `i` restarted, went down or came back: what it listed is forgotten, the
    /// merged `initialize` is made anew, and every caller hears that the lists changed.
    fn member_changed(&self, i: usize) {
        self.routes_mut().forget(i);
        *self.info.lock().unwrap_or_else(|p| p.into_inner()) = None;
        for m in [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed",
        ] {
            let _ = self
                .events
                .send(UpstreamEvent::Notification(jsonrpc::notification(m, None)));
        }
    }

    /// Member `i` answered (`ok`) or was not there for a list or a call: a change either
    /// way changes the lists, and every caller hears it.
    fn note(&self, i: usize, ok: bool) {
        let m = &self.members[i];
        if m.failing.swap(!ok, Ordering::Relaxed) != ok {
            return;
        }
        if ok {
            tracing::info!(endpoint = %self.name, member = %m.name, "member answers again");
        } else {
            tracing::warn!(endpoint = %self.name, member = %m.name,
                "member does not answer: its tools leave the endpoint's lists until it does");
        }
        self.gauge_up(i);
        self.member_changed(i);
    }

    /// Count a call of member `i` (`mcp_bridge_endpoint_calls_total`).
    fn count(&self, i: usize, method: &str, outcome: &'static str) {
        self.metrics
            .endpoint_call(&self.name, &self.members[i].name, method, outcome);
    }

    /// `mcp_bridge_endpoint_member_up` of member `i`, as things are now.
    fn gauge_up(&self, i: usize) {
        let m = &self.members[i];
        let up = m.up.is_ready() && !m.failing.load(Ordering::Relaxed);
        self.metrics.set_endpoint_member_up(&self.name, &m.name, up);
    }

    /// `e` of member `i`, saying which member it was.
    fn named(&self, i: usize, e: BridgeError) -> BridgeError {
        let who = format!(
            "member {:?} of endpoint {:?}",
            self.members[i].name, self.name
        );
        match e {
            BridgeError::ChildExited(s) => BridgeError::ChildExited(format!("{who}: {s}")),
            BridgeError::Unavailable(s) => BridgeError::Unavailable(format!("{who}: {s}")),
            BridgeError::Remote {
                reason,
                message,
                data,
            } => BridgeError::Remote {
                reason,
                message: format!("{who}: {message}"),
                data,
            },
            e => e,
        }
    }

    /// The member and own name of a published tool or prompt name, from what is known
    /// now (the prefix, or for bare names what the lists taught).
    fn lookup_name<'a>(&self, kind: Kind, name: &'a str) -> Option<(usize, &'a str)> {
        match self.naming.prefix {
            Prefix::Always => self.naming.split(&self.names, name),
            Prefix::Never => self.routes().owner(kind, name).map(|i| (i, name)),
        }
    }

    /// The member that owns a resource URI, from what is known now: who listed it, whose
    /// template fits it, or the one member that has resources at all.
    fn lookup_uri(&self, uri: &str) -> Option<usize> {
        let r = self.routes();
        r.owner(Kind::Resource, uri)
            .or_else(|| r.template_owner(uri))
            .or_else(|| (self.members.len() == 1).then_some(0))
    }

    /// [`Aggregate::lookup_name`], learning the lists first when the name is not known
    /// yet (bare names before any list; a URI nobody listed yet).
    async fn find(&self, kind: Kind, key: &str, caller: &Call, wait: Duration) -> Option<usize> {
        // Under a policy a tool or prompt must be one a member listed: a name nobody has
        // gets the endpoint's own answer, the one a denied name gets.
        let listed_only = !self.policy.is_open() && matches!(kind, Kind::Tool | Kind::Prompt);
        let known = || match kind {
            Kind::Tool | Kind::Prompt if listed_only => self.routes().owner(kind, key),
            Kind::Tool | Kind::Prompt => self.lookup_name(kind, key).map(|(i, _)| i),
            Kind::Resource | Kind::Template => self.lookup_uri(key),
        };
        let by_prefix = self.naming.prefix == Prefix::Always && kind != Kind::Resource;
        if let Some(i) = known() {
            return Some(i);
        }
        if by_prefix && !listed_only {
            return None;
        }
        lists::learn(self, kind, caller, wait).await;
        if kind == Kind::Resource {
            lists::learn(self, Kind::Template, caller, wait).await;
        }
        known()
    }

    /// Where `call` goes, and the call as its member reads it; Err: the caller's answer.
    async fn route(&self, mut call: Call, wait: Duration) -> Result<Routed, BridgeError> {
        let p = call.params.as_deref();
        let field = |k: &str| {
            p.and_then(Fields::parse).and_then(|f| {
                f.get(k)
                    .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            })
        };
        let unknown = |what: &str, name: &str| BridgeError::Refused {
            code: code::INVALID_PARAMS,
            message: format!("unknown {what}: {name}"),
        };
        match call.method.as_str() {
            "tools/call" | "prompts/get" => {
                let (kind, what) = if call.method == "tools/call" {
                    (Kind::Tool, "tool")
                } else {
                    (Kind::Prompt, "prompt")
                };
                let Some(name) = field("name") else {
                    return Err(unknown(what, "(params.name is missing)"));
                };
                let Some(member) = self.find(kind, &name, &call, wait).await else {
                    return Err(unknown(what, &name));
                };
                let bare = self
                    .lookup_name(kind, &name)
                    .map_or(name.as_str(), |(_, b)| b);
                if bare != name {
                    let v = jsonrpc::raw(&Value::String(bare.to_owned()).to_string());
                    if let Some(np) = p.and_then(|p| jsonrpc::set_field(p, "name", &v)) {
                        call.params = Some(jsonrpc::raw(&np));
                    }
                }
                if kind == Kind::Tool {
                    call.ctx.tool = Some(bare.into());
                }
                Ok(Routed { member, call })
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = field("uri") else {
                    return Err(unknown("resource", "(params.uri is missing)"));
                };
                match self.find(Kind::Resource, &uri, &call, wait).await {
                    Some(member) => Ok(Routed { member, call }),
                    None => Err(unknown("resource", &uri)),
                }
            }
            "completion/complete" => self.route_completion(call, wait).await,
            m => Err(BridgeError::Refused {
                code: code::METHOD_NOT_FOUND,
                message: format!("method not found: {m}"),
            }),
        }
    }

    /// `completion/complete`: a prompt argument goes to the prompt's member (its name
    /// unprefixed), a resource template's to the template's.
    async fn route_completion(
        &self,
        mut call: Call,
        wait: Duration,
    ) -> Result<Routed, BridgeError> {
        let mut v: Value = call
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let refused = |m: &str| BridgeError::Refused {
            code: code::INVALID_PARAMS,
            message: m.to_owned(),
        };
        let r = &v["ref"];
        let kind = r["type"].as_str().unwrap_or_default().to_owned();
        let member = match kind.as_str() {
            "ref/prompt" => {
                let name = r["name"].as_str().unwrap_or_default().to_owned();
                let Some(i) = self.find(Kind::Prompt, &name, &call, wait).await else {
                    return Err(refused(&format!("unknown prompt: {name}")));
                };
                if let Some((_, bare)) = self.lookup_name(Kind::Prompt, &name) {
                    v["ref"]["name"] = Value::String(bare.to_owned());
                    call.params = Some(jsonrpc::raw(&v.to_string()));
                }
                i
            }
            "ref/resource" => {
                let uri = r["uri"].as_str().unwrap_or_default().to_owned();
                match self.find(Kind::Resource, &uri, &call, wait).await {
                    Some(i) => i,
                    None => return Err(refused(&format!("unknown resource: {uri}"))),
                }
            }
            _ => return Err(refused("params.ref must be a ref/prompt or a ref/resource")),
        };
        Ok(Routed { member, call })
    }

    /// Start a routed call on its member: the member's handle, with the ids of its
    /// requests to the caller renamed, and the caller's answers coming back through here.
    async fn on_member(
        &self,
        r: Routed,
        wait: Duration,
        mut line: Option<audited::Guard>,
    ) -> Result<CallHandle, BridgeError> {
        let i = r.member;
        let m = &self.members[i];
        let method = r.call.method.clone();
        if let Some(l) = &mut line {
            l.set_member(&m.name);
        }
        if matches!(
            method.as_str(),
            "resources/subscribe" | "resources/unsubscribe"
        ) && events::era_now(&m.up) == Some(Era::Modern)
        {
            let me = self.me.upgrade().ok_or(BridgeError::ShuttingDown)?;
            let call = r.call;
            return Ok(self.local(async move {
                let o = me.subscribe_modern(i, &call).await;
                if let Some(l) = line {
                    l.finish_with(&o);
                }
                o
            }));
        }
        let mut h = match m.up.call(r.call, m.wait(wait)).await {
            Ok(h) => h,
            Err(e) => {
                if member_gone(&e) {
                    self.note(i, false);
                }
                self.count(i, &method, "failed");
                if let Some(l) = line {
                    l.finish("failed", Some(e.code()));
                }
                return Err(self.named(i, e));
            }
        };
        let target = h.via().cloned().unwrap_or_else(|| m.up.clone());
        let asked = self.asked.clone();
        h.events
            .map_with(Box::new(move |ev| Some(asked.rename(ev, &target))));
        if let Some(me) = self.me.upgrade() {
            // A failure of the member's says which member; it tells the endpoint too.
            let me2 = me.clone();
            h.outcome.translate_with(Box::new(move |o| {
                if let Some(l) = line {
                    l.finish_with(&o);
                }
                me2.member_outcome(i, &method, o)
            }));
            h = h.answered_via(me);
        }
        Ok(h)
    }

    /// Member `i`'s outcome of `method`: noted, counted, a failure named.
    fn member_outcome(&self, i: usize, method: &str, o: Outcome) -> Outcome {
        match o {
            Outcome::Failed(e) => {
                if member_gone(&e) {
                    self.note(i, false);
                }
                self.count(i, method, "failed");
                Outcome::Failed(self.named(i, e))
            }
            o => {
                self.note(i, true);
                let outcome = if matches!(o, Outcome::Result(_)) {
                    "result"
                } else {
                    "error"
                };
                self.count(i, method, outcome);
                o
            }
        }
    }

    /// A call the endpoint answers itself, run as a task (aborted when its handle goes).
    fn local<F>(&self, fut: F) -> CallHandle
    where
        F: std::future::Future<Output = Outcome> + Send + 'static,
    {
        self.local_with(move |_| fut)
    }

    /// [`Aggregate::local`], the task given the call's event queue (requests of the caller,
    /// a member's call relayed).
    fn local_with<M, F>(&self, make: M) -> CallHandle
    where
        M: FnOnce(crate::call::EventSender) -> F,
        F: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let (s, events, outcome, signal) = sinks();
        let answered = Arc::new(AtomicBool::new(false));
        let done = answered.clone();
        let fut = make(s.events.clone());
        let task = self.tracker.spawn(async move {
            let o = fut.await;
            done.store(true, Ordering::Release);
            let _ = s.outcome.send(o);
            drop(s.events);
        });
        CallHandle::new(
            events,
            outcome,
            Box::new(CancelOnDrop::new(
                Arc::new(crate::call::TaskCancel {
                    task: task.abort_handle(),
                    answered,
                }),
                0,
                signal,
                self.metrics.clone(),
                &crate::call::Detached::none(self.metrics.clone()),
            )),
        )
    }

    /// `logging/setLevel` of a 2025 caller: told to every 2025 member that logs (a 2026
    /// member takes the level per request, from the caller's `_meta`).
    async fn set_level(self: Arc<Self>, call: Call, wait: Duration) -> Outcome {
        let sends = self.members.iter().map(|m| {
            let call = Call {
                method: call.method.clone(),
                params: call.params.clone(),
                ctx: call.ctx.clone(),
            };
            async move {
                let Ok(info) = m.up.info(m.wait(wait)).await else {
                    return;
                };
                if info.era != Era::Legacy || info.capabilities().get("logging").is_none() {
                    return;
                }
                if let Ok(h) = crate::core::start(&m.up, call, wait).await {
                    let _ = tokio::time::timeout(lists::LIST_TIMEOUT, h.outcome).await;
                }
            }
        });
        join_all(sends).await;
        Outcome::Result(jsonrpc::raw("{}"))
    }

    /// The merged `initialize`: made from every member that answers within `wait`.
    async fn merged_info(&self, wait: Duration) -> Result<UpstreamInfo, BridgeError> {
        if let Some((i, partial)) = &*self.info.lock().unwrap_or_else(|p| p.into_inner()) {
            if partial.is_none_or(|at| at.elapsed() < PARTIAL_INFO_TTL) {
                return Ok(i.clone());
            }
        }
        let got = join_all(self.members.iter().map(|m| m.up.info(m.wait(wait)))).await;
        let answered: Vec<(&str, &UpstreamInfo)> = self
            .members
            .iter()
            .zip(&got)
            .filter_map(|(m, r)| r.as_ref().ok().map(|i| (m.name.as_str(), i)))
            .collect();
        if answered.is_empty() {
            return Err(BridgeError::Unavailable(format!(
                "no member of endpoint {:?} is available",
                self.name
            )));
        }
        let init = discover::initialize(&self.name, self.title.as_deref(), &self.naming, &answered);
        let info = UpstreamInfo {
            era: Era::Legacy,
            discover: None,
            initialize: Some(Arc::from(jsonrpc::raw(&init))),
        };
        let partial = (answered.len() < self.members.len()).then(Instant::now);
        *self.info.lock().unwrap_or_else(|p| p.into_inner()) = Some((info.clone(), partial));
        Ok(info)
    }

    /// A call past the endpoint's limits: a list or a ping answered here, anything else
    /// checked against the policy, routed and started on its member.
    async fn start_call(
        self: Arc<Self>,
        call: Call,
        wait: Duration,
    ) -> Result<CallHandle, BridgeError> {
        if lists::kind_of(&call.method).is_some() {
            return Ok(self.local(lists::merged(self.clone(), call, wait)));
        }
        match call.method.as_str() {
            "logging/setLevel" => return Ok(self.local(self.clone().set_level(call, wait))),
            "ping" => return Ok(self.local(async { Outcome::Result(jsonrpc::raw("{}")) })),
            _ => {}
        }
        let line = self
            .audit
            .as_ref()
            .map(|a| audited::Guard::new(a, &self.name, &call));
        let refused = |line: Option<audited::Guard>, e: BridgeError, outcome| {
            if let Some(l) = line {
                l.finish(outcome, Some(e.code()));
            }
            Err(e)
        };
        let confirm = match self.permit(&call) {
            Ok(c) => c,
            Err(e) => return refused(line, e, "denied"),
        };
        match (self.route(call, wait).await, confirm) {
            (Ok(routed), Some(subject)) => self.confirmed(routed, subject, wait, line).await,
            (Ok(routed), None) => self.on_member(routed, wait, line).await,
            (Err(e), _) => refused(line, e, "error"),
        }
    }

    /// With `prefix = "never"`, two members offering one tool or prompt name is an error
    /// naming both (checked when the endpoint starts; members that are not up are skipped).
    pub async fn check_names(&self, wait: Duration) -> Result<(), String> {
        if self.naming.prefix == Prefix::Always {
            return Ok(());
        }
        lists::collisions(self, wait).await
    }
}

impl Upstream for Aggregate {
    fn name(&self) -> &str {
        &self.name
    }
    /// Ready while any member is: a member that is down does not take the endpoint down.
    fn is_ready(&self) -> bool {
        self.members.iter().any(|m| m.up.is_ready())
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(self.merged_info(wait))
    }
    fn call_era<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        caller: Era,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Era>> {
        Box::pin(async move {
            if lists::kind_of(method).is_some() || matches!(method, "logging/setLevel" | "ping") {
                return Some(caller);
            }
            // A 2025 caller's subscriptions are the endpoint's own to keep, whatever the
            // member's era (`Aggregate::subscribe_modern`).
            if matches!(method, "resources/subscribe" | "resources/unsubscribe") {
                return Some(Era::Legacy);
            }
            let probe = Call {
                method: method.to_owned(),
                params: params.map(ToOwned::to_owned),
                ctx: crate::call::CallCtx::modern(),
            };
            let r = self.route(probe, wait).await.ok()?;
            let m = &self.members[r.member];
            m.up.info(m.wait(wait)).await.ok().map(|i| i.era)
        })
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        Box::pin(async move {
            if self.stop.is_cancelled() {
                return Err(BridgeError::ShuttingDown);
            }
            let Some(me) = self.me.upgrade() else {
                return Err(BridgeError::ShuttingDown);
            };
            // Held until the call's outcome (or its end): the caller's place in its limits.
            let permit = match &self.limiter {
                Some(l) if call.method != "ping" => {
                    let (key, label) = caller_key(&call);
                    match l.admit(&key) {
                        Ok(p) => Some(p),
                        Err(e) => {
                            self.metrics.rate_limited(&self.name, label);
                            return Err(e);
                        }
                    }
                }
                _ => None,
            };
            let mut h = me.start_call(call, wait).await?;
            if let Some(p) = permit {
                h.outcome.translate_with(Box::new(move |o| {
                    drop(p);
                    o
                }));
            }
            Ok(h)
        })
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.events.subscribe()
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        if self.approvals.answer(&frame) {
            return Ok(());
        }
        self.asked.answer(&frame)
    }
    /// A caller's notification (`roots/list_changed`, …) goes to every 2025 member.
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        for m in &self.members {
            if events::era_now(&m.up) == Some(Era::Legacy) {
                let _ = m.up.send_notification(frame.clone());
            }
        }
        Ok(())
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        match self.lookup_name(Kind::Tool, tool) {
            Some((i, bare)) => self.members[i].up.tool_headers(bare),
            None => Vec::new(),
        }
    }
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            join_all(self.members.iter().map(|m| m.up.ensure_log_level(level))).await;
        })
    }
    fn events_ready(&self, wait: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let up = self.members.iter().filter(|m| m.up.is_ready());
            join_all(up.map(|m| m.up.events_ready(wait)))
                .await
                .into_iter()
                .all(|r| r)
        })
    }
    fn stop(&self) {
        self.stop.cancel();
    }
}
