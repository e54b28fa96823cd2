//! `subscriptions/listen` (2026) and the change notifications the `notify` tool emits.
//!
//! A 2026 client opens a listen (a request that stays open and is answered only by
//! notifications tagged with its `subscriptionId`); a 2025 client gets untagged
//! `list_changed` notifications and, for the resources it `resources/subscribe`d,
//! `notifications/resources/updated`. The two eras' routing sits side by side here so that
//! what a `notify` reaches in either era can be read in one place. Listens end when the
//! client cancels them (handled with the other cancellations in [`super::server`]).

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::catalog::README_URI;
use super::server::{lock, Reply, Request, Shared};
use super::tools::Args;
use super::wire::{
    id_key, notification_line, parse_obj, RpcError, INVALID_REQUEST, META_SUBSCRIPTION_ID,
};

/// Which list changes a listen asked for.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ListenFilter {
    tools: bool,
    prompts: bool,
    resources: bool,
}

/// An open listen, keyed by its request id in `Shared::listens`.
pub(super) struct Listen {
    pub(super) id: Box<RawValue>,
    filter: ListenFilter,
    /// Honoured `resourceSubscriptions`.
    uris: Vec<String>,
}

impl Shared {
    /// `subscriptions/listen`: acknowledge what is honoured and keep the listen open.
    pub(super) fn listen(&self, req: &Request<'_>) -> Reply {
        #[derive(Deserialize, Default)]
        #[serde(default, rename_all = "camelCase")]
        struct Filter {
            tools_list_changed: bool,
            prompts_list_changed: bool,
            resources_list_changed: bool,
            resource_subscriptions: Vec<String>,
        }
        let filter: Filter = match req.params.notifications {
            Some(n) => parse_obj(n.get())
                .map_err(|e| RpcError::invalid_params(format!("invalid notifications: {e}")))?,
            None => Filter::default(),
        };
        let (key, _) = id_key(req.id)
            .ok_or_else(|| RpcError::new(INVALID_REQUEST, "Invalid Request: bad id"))?;
        if lock(&self.inflight).contains_key(&key) {
            return Err(RpcError::new(
                INVALID_REQUEST,
                "duplicate in-flight request id",
            ));
        }
        let honoured_uris: Vec<&String> = filter
            .resource_subscriptions
            .iter()
            .filter(|u| u.as_str() == README_URI)
            .collect();
        let mut honoured = serde_json::Map::new();
        for (name, on) in [
            ("toolsListChanged", filter.tools_list_changed),
            ("promptsListChanged", filter.prompts_list_changed),
            ("resourcesListChanged", filter.resources_list_changed),
        ] {
            if on {
                honoured.insert(name.to_owned(), Value::Bool(true));
            }
        }
        if !honoured_uris.is_empty() {
            honoured.insert("resourceSubscriptions".to_owned(), json!(honoured_uris));
        }
        let sub_id: Value = serde_json::from_str(req.id.get()).unwrap_or(Value::Null);
        let ack = notification_line(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": honoured, "_meta": { META_SUBSCRIPTION_ID: sub_id } }),
        );
        {
            let mut listens = lock(&self.listens);
            if listens.contains_key(&key) {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    "duplicate in-flight request id",
                ));
            }
            listens.insert(
                key,
                Listen {
                    id: req.id.to_owned(),
                    filter: ListenFilter {
                        tools: filter.tools_list_changed,
                        prompts: filter.prompts_list_changed,
                        resources: filter.resources_list_changed,
                    },
                    uris: honoured_uris.iter().map(|u| u.to_string()).collect(),
                },
            );
        }
        eprintln!("demo: listen started id={}", req.id.get());
        Ok(Some(ack))
    }

    /// The `notify` tool: a `list_changed` of the given kind, untagged for a 2025 caller and
    /// tagged for every listen that asked for it; kind `updated` is [`Self::notify_updated`].
    pub(super) async fn notify(self: &Arc<Self>, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            kind: Cow<'a, str>,
        }
        let a: A = args.parse()?;
        if a.kind == "updated" {
            return self.notify_updated(req).await;
        }
        let kind = match a.kind.as_ref() {
            "tools" => ListKind::Tools,
            "resources" => ListKind::Resources,
            "prompts" => ListKind::Prompts,
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown kind {other:?} (tools, resources, prompts, updated)"
                )))
            }
        };
        let method = kind.method();
        if !req.is_modern() {
            self.emit(notification_line(method, json!({}))).await;
        }
        let tagged: Vec<Vec<u8>> = lock(&self.listens)
            .values()
            .filter(|l| kind.wanted_by(l.filter))
            .map(|l| listen_notification(method, &l.id))
            .collect();
        for line in tagged {
            self.emit(line).await;
        }
        req.text("ok")
    }

    /// `notify` with kind `updated`: `notifications/resources/updated` for demo://readme to
    /// whoever subscribed to it (legacy: `resources/subscribe`; modern: listens naming it in
    /// `resourceSubscriptions`, tagged). The answer says how many got it.
    async fn notify_updated(self: &Arc<Self>, req: &Request<'_>) -> Reply {
        const METHOD: &str = "notifications/resources/updated";
        let lines: Vec<Vec<u8>> = if req.is_modern() {
            lock(&self.listens)
                .values()
                .filter(|l| l.uris.iter().any(|u| u == README_URI))
                .map(|l| {
                    let sub_id: Value = serde_json::from_str(l.id.get()).unwrap_or(Value::Null);
                    notification_line(
                        METHOD,
                        json!({ "uri": README_URI, "_meta": { META_SUBSCRIPTION_ID: sub_id } }),
                    )
                })
                .collect()
        } else if lock(&self.legacy).subscriptions.contains(README_URI) {
            vec![notification_line(METHOD, json!({ "uri": README_URI }))]
        } else {
            Vec::new()
        };
        let n = lines.len();
        for line in lines {
            self.emit(line).await;
        }
        req.text(&format!("updated: {n}"))
    }
}

#[derive(Debug, Clone, Copy)]
enum ListKind {
    Tools,
    Resources,
    Prompts,
}

impl ListKind {
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }

    fn wanted_by(self, f: ListenFilter) -> bool {
        match self {
            ListKind::Tools => f.tools,
            ListKind::Resources => f.resources,
            ListKind::Prompts => f.prompts,
        }
    }
}

fn listen_notification(method: &str, listen_id: &RawValue) -> Vec<u8> {
    #[derive(Serialize)]
    struct P<'a> {
        #[serde(rename = "_meta")]
        meta: M<'a>,
    }
    #[derive(Serialize)]
    struct M<'a> {
        #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
        id: &'a RawValue,
    }
    notification_line(
        method,
        P {
            meta: M { id: listen_id },
        },
    )
}
