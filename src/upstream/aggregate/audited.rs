//! The endpoint's side of the audit log (`crate::audit`): what one routed call leaves there.
//! A [`Guard`] is made when the call arrives and travels with it; it writes its line when
//! the outcome is known — or, dropped before that (the caller went away, the call was
//! cancelled), as `cancelled` — so every call that entered gets exactly one line.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::audit::{Audit, Entry};
use crate::call::{Call, Outcome};
use crate::jsonrpc::Fields;

/// One call's line, written once.
pub struct Guard {
    audit: Arc<Audit>,
    entry: Option<Entry>,
    started: Instant,
}

impl Guard {
    /// The line for `call` of `endpoint`, to be finished.
    pub fn new(audit: &Arc<Audit>, endpoint: &str, call: &Call) -> Guard {
        let params: Value = call
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let name = ["name", "uri"]
            .iter()
            .find_map(|k| params[*k].as_str())
            .or_else(|| params["ref"]["name"].as_str())
            .or_else(|| params["ref"]["uri"].as_str())
            .map(str::to_owned);
        let who = call
            .ctx
            .who
            .as_ref()
            .and_then(|w| w.token.clone().or_else(|| w.sub.clone()));
        let arguments = audit
            .with_arguments()
            .then(|| params.get("arguments").cloned())
            .flatten();
        Guard {
            audit: audit.clone(),
            entry: Some(Entry {
                who,
                endpoint: endpoint.to_owned(),
                member: None,
                method: call.method.clone(),
                name,
                outcome: "cancelled",
                code: None,
                duration: Default::default(),
                session: call.ctx.session.as_deref().map(str::to_owned),
                arguments,
            }),
            started: Instant::now(),
        }
    }

    /// The member the call goes to.
    pub fn set_member(&mut self, member: &str) {
        if let Some(e) = &mut self.entry {
            e.member = Some(member.to_owned());
        }
    }

    /// Write the line: `outcome` (see [`Entry::outcome`]) with its error code.
    pub fn finish(mut self, outcome: &'static str, code: Option<i64>) {
        if let Some(e) = &mut self.entry {
            e.outcome = outcome;
            e.code = code;
        }
        self.write();
    }

    /// Write the line for the outcome the member gave.
    pub fn finish_with(self, o: &Outcome) {
        let (outcome, code) = match o {
            Outcome::Result(r) => {
                let f = Fields::parse(r);
                let field = |k: &str| f.as_ref().and_then(|f| f.get(k)).map(|v| v.get());
                let outcome = if field("isError") == Some("true") {
                    "is_error"
                } else if field("resultType") == Some("\"input_required\"") {
                    "input_required"
                } else {
                    "ok"
                };
                (outcome, None)
            }
            Outcome::Error(e) => ("error", crate::protocol::error_code(e)),
            Outcome::Failed(e) => ("failed", Some(e.code())),
        };
        self.finish(outcome, code);
    }

    fn write(&mut self) {
        if let Some(mut e) = self.entry.take() {
            e.duration = self.started.elapsed();
            self.audit.record(e);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.write();
    }
}
