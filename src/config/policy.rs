//! `[[policy]]`: who may use which tools, prompts and resources of an endpoint. Rules are
//! evaluated in the order written; the first rule whose endpoint and `who` fit the caller and
//! one of whose globs fits the name decides (its `deny` globs are looked at first, then its
//! `confirm` globs, then its `allow` globs); when none does, `policy_default` does (`allow`
//! unless the file says `deny` or `confirm`). `confirm` allows a call once the caller itself
//! approved it (`crate::upstream::aggregate`'s approval step); for lists it is `allow`. Names are the ones callers see: prefixed tool and prompt names, resource URIs.
//!
//! What is written (`PolicyFile`) resolves to one [`Policy`] per endpoint, carried in the
//! endpoint's spec: a changed rule restarts that endpoint on SIGHUP like any changed setting.
//! Globs are the `glob` crate's patterns (`*`, `?`, `[...]`) matched against the whole name,
//! `/` included.

use std::sync::Arc;

use serde::Deserialize;

/// What a rule, or the default, says.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    #[default]
    Allow,
    Deny,
    /// Allowed once the caller approved this call.
    Confirm,
}

impl Decision {
    /// The word for it (config, metrics, `--explain`).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Confirm => "confirm",
        }
    }
    /// May the caller see and (perhaps after approving) use it?
    pub fn admits(self) -> bool {
        self != Decision::Deny
    }
}

/// Who a rule is about, as written: exactly one of the keys.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhoFile {
    /// The JWT `sub`.
    pub sub: Option<String>,
    /// A JWT claim (with `contains`: a string claim equal to it, or an array holding it).
    pub claim: Option<String>,
    pub contains: Option<String>,
    /// A granted scope (JWT `scope`/`scp`).
    pub scope: Option<String>,
    /// A bearer token's name (its `NAME:` in the token file).
    pub token: Option<String>,
}

/// One `[[policy]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The endpoint it is about (default: every endpoint).
    pub endpoint: Option<String>,
    /// Who it is about (default: every caller).
    pub who: Option<WhoFile>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Allowed after the caller approves each call (an elicitation to the caller).
    #[serde(default)]
    pub confirm: Vec<String>,
}

/// Who a rule is about, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Anyone,
    Sub(String),
    Claim { claim: String, contains: String },
    Scope(String),
    Token(String),
}

/// What the bridge knows of a caller (from its credentials; nothing without auth).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The bearer token's name.
    pub token: Option<String>,
    /// The JWT `sub`.
    pub sub: Option<String>,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// The JWT's claims that are strings or arrays of strings (bounded).
    pub claims: Vec<(String, Vec<String>)>,
}

impl Who {
    /// Does this describe `who`?
    pub fn fits(&self, who: &Identity) -> bool {
        match self {
            Who::Anyone => true,
            Who::Sub(s) => who.sub.as_deref() == Some(s),
            Who::Token(t) => who.token.as_deref() == Some(t),
            Who::Scope(s) => who.scopes.iter().any(|g| g == s),
            Who::Claim { claim, contains } => who
                .claims
                .iter()
                .any(|(k, vs)| k == claim && vs.iter().any(|v| v == contains)),
        }
    }
}

/// One rule, decided.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its place among the file's rules, from 1 (the metrics' `rule` label).
    pub number: usize,
    pub who: Who,
    pub allow: Vec<glob::Pattern>,
    pub deny: Vec<glob::Pattern>,
    pub confirm: Vec<glob::Pattern>,
}

impl PartialEq for Rule {
    fn eq(&self, o: &Self) -> bool {
        let s = |v: &[glob::Pattern]| v.iter().map(|p| p.as_str().to_owned()).collect::<Vec<_>>();
        self.number == o.number
            && self.who == o.who
            && s(&self.allow) == s(&o.allow)
            && s(&self.deny) == s(&o.deny)
            && s(&self.confirm) == s(&o.confirm)
    }
}
impl Eq for Rule {}

/// An endpoint's rules, in order, and the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub rules: Arc<Vec<Rule>>,
    pub default: Decision,
}

/// Which rule decided (None: the default), and what.
pub type Verdict = (Option<usize>, Decision);

impl Policy {
    /// May `who` use `name`?
    pub fn decide(&self, who: &Identity, name: &str) -> Verdict {
        for r in self.rules.iter() {
            if !r.who.fits(who) {
                continue;
            }
            if r.deny.iter().any(|p| p.matches(name)) {
                return (Some(r.number), Decision::Deny);
            }
            if r.confirm.iter().any(|p| p.matches(name)) {
                return (Some(r.number), Decision::Confirm);
            }
            if r.allow.iter().any(|p| p.matches(name)) {
                return (Some(r.number), Decision::Allow);
            }
        }
        (None, self.default)
    }

    /// Is there anything to decide (a rule, or a `deny` default)?
    pub fn is_open(&self) -> bool {
        self.rules.is_empty() && self.default == Decision::Allow
    }
}

/// The rules of the file for `endpoint`, checked.
pub fn for_endpoint(
    endpoint: &str,
    rules: &[PolicyFile],
    default: Decision,
) -> Result<Policy, String> {
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if r.endpoint.as_deref().is_some_and(|e| e != endpoint) {
            continue;
        }
        let number = i + 1;
        out.push(rule(number, r)?);
    }
    Ok(Policy {
        rules: Arc::new(out),
        default,
    })
}

/// Check every rule (also those of no endpoint that exists).
pub fn check_all(rules: &[PolicyFile], endpoints: &[&str]) -> Result<(), String> {
    for (i, r) in rules.iter().enumerate() {
        if let Some(e) = &r.endpoint {
            if !endpoints.contains(&e.as_str()) {
                return Err(format!(
                    "[[policy]] rule {}: endpoint {e:?} is not among [endpoints]",
                    i + 1
                ));
            }
        }
        rule(i + 1, r)?;
    }
    Ok(())
}

fn rule(number: usize, r: &PolicyFile) -> Result<Rule, String> {
    let at = |m: String| format!("[[policy]] rule {number}: {m}");
    if r.allow.is_empty() && r.deny.is_empty() && r.confirm.is_empty() {
        return Err(at(
            "give allow = [...], deny = [...] or confirm = [...]".into()
        ));
    }
    let globs = |v: &[String]| {
        v.iter()
            .map(|g| glob::Pattern::new(g).map_err(|e| at(format!("glob {g:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(Rule {
        number,
        who: who(r.who.as_ref()).map_err(at)?,
        allow: globs(&r.allow)?,
        deny: globs(&r.deny)?,
        confirm: globs(&r.confirm)?,
    })
}

fn who(w: Option<&WhoFile>) -> Result<Who, String> {
    let Some(w) = w else {
        return Ok(Who::Anyone);
    };
    let given = [&w.sub, &w.claim, &w.scope, &w.token]
        .iter()
        .filter(|v| v.is_some())
        .count();
    if given != 1 {
        return Err(
            "who = { ... } takes exactly one of sub, claim (with contains), scope, token".into(),
        );
    }
    if w.contains.is_some() != w.claim.is_some() {
        return Err("who: claim and contains go together".into());
    }
    Ok(match (&w.sub, &w.claim, &w.contains, &w.scope, &w.token) {
        (Some(s), ..) => Who::Sub(s.clone()),
        (_, Some(c), Some(v), ..) => Who::Claim {
            claim: c.clone(),
            contains: v.clone(),
        },
        (.., Some(s), _) => Who::Scope(s.clone()),
        (.., Some(t)) => Who::Token(t.clone()),
        _ => Who::Anyone,
    })
}

/// What `who` may use under `p`, as lines: each rule that is about it, in order, then the
/// default.
pub fn explain(p: &Policy, who: &Identity) -> Vec<String> {
    let list = |v: &[glob::Pattern]| v.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", ");
    let mut out: Vec<String> = p
        .rules
        .iter()
        .filter(|r| r.who.fits(who))
        .map(|r| {
            let parts: Vec<String> = [
                ("deny", &r.deny),
                ("confirm", &r.confirm),
                ("allow", &r.allow),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(w, v)| format!("{w} {}", list(v)))
            .collect();
            format!("rule {}: {}", r.number, parts.join("; "))
        })
        .collect();
    let d = p.default.as_str();
    out.push(format!("anything else: {d} (policy_default)"));
    out
}

/// An identity written on the command line (`check-config --explain`): comma-separated
/// `sub=…`, `token=…`, `scope=…`, `claim:NAME=VALUE`.
pub fn parse_identity(s: &str) -> Result<Identity, String> {
    let mut id = Identity::default();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!(
                "{part:?}: use KEY=VALUE (sub, token, scope, claim:NAME)"
            ));
        };
        match k {
            "sub" => id.sub = Some(v.to_owned()),
            "token" => id.token = Some(v.to_owned()),
            "scope" => id.scopes.push(v.to_owned()),
            _ => match k.strip_prefix("claim:") {
                Some(c) => id.claims.push((c.to_owned(), vec![v.to_owned()])),
                None => return Err(format!("{k:?}: use sub, token, scope or claim:NAME")),
            },
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(toml_text: &str) -> Vec<PolicyFile> {
        #[derive(Deserialize)]
        struct F {
            policy: Vec<PolicyFile>,
        }
        toml::from_str::<F>(toml_text).unwrap().policy
    }

    #[test]
    fn first_fitting_rule_decides_and_deny_globs_come_first() {
        let rules = file(
            r#"
            [[policy]]
            endpoint = "team"
            who = { sub = "alice" }
            allow = ["files__read_*", "search__*"]
            deny = ["search__admin"]
            [[policy]]
            who = { claim = "groups", contains = "eng" }
            allow = ["files__*"]
            [[policy]]
            endpoint = "other"
            allow = ["*"]
            "#,
        );
        let p = for_endpoint("team", &rules, Decision::Deny).unwrap();
        assert_eq!(p.rules.len(), 2);
        let alice = parse_identity("sub=alice").unwrap();
        assert_eq!(
            p.decide(&alice, "files__read_x"),
            (Some(1), Decision::Allow)
        );
        assert_eq!(p.decide(&alice, "search__admin"), (Some(1), Decision::Deny));
        assert_eq!(p.decide(&alice, "files__delete"), (None, Decision::Deny));
        let eng = parse_identity("sub=bob,claim:groups=eng").unwrap();
        assert_eq!(p.decide(&eng, "files__delete"), (Some(2), Decision::Allow));
        assert_eq!(
            p.decide(&Identity::default(), "files__read_x"),
            (None, Decision::Deny)
        );
        assert!(
            check_all(&rules, &["team"]).is_err(),
            "\"other\" is no endpoint"
        );
        assert!(check_all(&rules, &["team", "other"]).is_ok());
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in [
            "[[policy]]\nallow = []\n",
            "[[policy]]\nwho = { sub = \"a\", token = \"b\" }\nallow = [\"*\"]\n",
            "[[policy]]\nwho = { claim = \"groups\" }\nallow = [\"*\"]\n",
            "[[policy]]\nallow = [\"[\"]\n",
        ] {
            assert!(check_all(&file(bad), &[]).is_err(), "{bad}");
        }
        assert!(parse_identity("nope").is_err());
    }
}
