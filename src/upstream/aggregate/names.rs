//! How an endpoint's names are formed and routed back: a member's tool or prompt `search` of
//! server `files` is published as `files__search` (`prefix = "always"`) or `search`
//! (`"never"`); resource URIs are never renamed, so they are routed by who listed them.
//!
//! [`Routes`] is what the lists taught: for `"never"` which member owns a bare name, for every
//! mode which member listed a URI or a template. The first member in `servers` wins a name or
//! URI two of them list (warned once per name). Each table is bounded: past [`MAX_ENTRIES`]
//! new entries are not learned (a call then falls back to the prefix, or to the only member
//! that lists resources) and a warning says so once.

use std::collections::{HashMap, HashSet};

use crate::config::endpoint::Prefix;

/// Entries per table before the endpoint stops learning new ones.
pub const MAX_ENTRIES: usize = 100_000;

/// The endpoint's naming rule.
#[derive(Debug, Clone)]
pub struct Naming {
    pub separator: String,
    pub prefix: Prefix,
}

impl Naming {
    /// The name a caller sees for member `member`'s `name`.
    pub fn publish(&self, member: &str, name: &str) -> String {
        match self.prefix {
            Prefix::Always => format!("{member}{}{name}", self.separator),
            Prefix::Never => name.to_owned(),
        }
    }

    /// The member (index into `members`) and its own name for a prefixed name; the longest
    /// member name that matches wins (`a` and `a__b` both members: `a__b__x` is `a__b`'s).
    pub fn split<'a>(&self, members: &[String], name: &'a str) -> Option<(usize, &'a str)> {
        let mut best: Option<(usize, &'a str)> = None;
        for (i, m) in members.iter().enumerate() {
            let Some(rest) = name
                .strip_prefix(m.as_str())
                .and_then(|r| r.strip_prefix(self.separator.as_str()))
            else {
                continue;
            };
            if best.is_none_or(|(b, _)| members[b].len() < m.len()) {
                best = Some((i, rest));
            }
        }
        best
    }
}

/// Which table a name or URI belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Tool,
    Prompt,
    Resource,
    Template,
}

/// What the members' lists said about who owns what.
#[derive(Default)]
pub struct Routes {
    tables: HashMap<Kind, HashMap<String, usize>>,
    /// Names and URIs already warned about (two owners, or a full table).
    warned: HashSet<(Kind, String)>,
}

impl Routes {
    /// Member `member` listed `key`; returns false when another (earlier) member keeps it.
    pub fn learn(&mut self, kind: Kind, key: &str, member: usize, members: &[String]) -> bool {
        let table = self.tables.entry(kind).or_default();
        match table.get(key).copied() {
            Some(m) if m == member => true,
            Some(m) => {
                let keep = m.min(member);
                table.insert(key.to_owned(), keep);
                if self.warned.insert((kind, key.to_owned())) {
                    tracing::warn!(
                        first = %members.get(keep).map_or("?", String::as_str),
                        also = %members.get(m.max(member)).map_or("?", String::as_str),
                        "{kind:?} {key:?} is listed by two members of the endpoint; the first \
                         in `servers` gets it"
                    );
                }
                keep == member
            }
            None if table.len() >= MAX_ENTRIES => {
                if self.warned.insert((kind, String::new())) {
                    tracing::warn!(
                        limit = MAX_ENTRIES,
                        "the endpoint's {kind:?} table is full: new entries are not routed by \
                         name"
                    );
                }
                true
            }
            None => {
                table.insert(key.to_owned(), member);
                true
            }
        }
    }

    /// The member that listed `key`.
    pub fn owner(&self, kind: Kind, key: &str) -> Option<usize> {
        self.tables.get(&kind)?.get(key).copied()
    }

    /// The member whose template `uri` fits: the longest literal start (the text before the
    /// first `{`) that `uri` begins with.
    pub fn template_owner(&self, uri: &str) -> Option<usize> {
        let t = self.tables.get(&Kind::Template)?;
        t.iter()
            .filter_map(|(tpl, m)| {
                let lit = tpl.split('{').next().unwrap_or(tpl);
                (!lit.is_empty() && uri.starts_with(lit)).then_some((lit.len(), *m))
            })
            .max_by_key(|(len, m)| (*len, usize::MAX - *m))
            .map(|(_, m)| m)
    }

    /// Forget everything member `member` listed (it restarted: its next lists say anew).
    pub fn forget(&mut self, member: usize) {
        for t in self.tables.values_mut() {
            t.retain(|_, m| *m != member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> Vec<String> {
        vec!["a".into(), "a__b".into(), "files".into()]
    }

    #[test]
    fn prefixed_names_split_at_the_longest_member() {
        let n = Naming {
            separator: "__".into(),
            prefix: Prefix::Always,
        };
        let m = members();
        assert_eq!(n.publish("files", "read"), "files__read");
        assert_eq!(n.split(&m, "files__read"), Some((2, "read")));
        assert_eq!(n.split(&m, "a__b__x"), Some((1, "x")));
        assert_eq!(n.split(&m, "a__x"), Some((0, "x")));
        assert_eq!(n.split(&m, "nobody__x"), None);
        assert_eq!(n.split(&m, "files_read"), None);
    }

    #[test]
    fn the_first_member_keeps_a_uri_two_list() {
        let m = members();
        let mut r = Routes::default();
        assert!(r.learn(Kind::Resource, "file:///x", 2, &m));
        assert!(r.learn(Kind::Resource, "file:///x", 0, &m));
        assert_eq!(r.owner(Kind::Resource, "file:///x"), Some(0));
        assert!(
            !r.learn(Kind::Resource, "file:///x", 2, &m),
            "the later one loses"
        );
        assert_eq!(r.owner(Kind::Resource, "file:///x"), Some(0));
        r.learn(Kind::Template, "file:///logs/{day}", 2, &m);
        r.learn(Kind::Template, "file:///{path}", 0, &m);
        assert_eq!(r.template_owner("file:///logs/monday"), Some(2));
        assert_eq!(r.template_owner("file:///etc/hosts"), Some(0));
        assert_eq!(r.template_owner("http://x"), None);
        r.forget(0);
        assert_eq!(r.owner(Kind::Resource, "file:///x"), None);
    }
}
