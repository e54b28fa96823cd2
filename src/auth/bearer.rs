//! Static bearer tokens (API keys). Only SHA-256 digests are kept; a presented token is hashed
//! and compared with every digest in constant time, so neither the match position nor a common
//! prefix leaks through timing. A line `name:TOKEN` names the caller; the name (never the
//! token) appears in logs and metrics.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::reload::{Part, Reloader};

#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    digest: [u8; 32],
}

/// The configured tokens, hashed.
#[derive(Default, Clone)]
pub struct TokenSet {
    entries: Vec<Entry>,
}

/// RFC 6750 `b64token` characters (the only ones a Bearer credential may hold).
fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/' | '=')
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '@')
}

impl TokenSet {
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Add tokens from text: one per line, `#` comments and blank lines skipped, optional
    /// `name:` prefix. Unnamed tokens are called `DEFAULT` (or `token-N` by line).
    /// Errors name the line, never its content.
    pub fn add_lines(&mut self, text: &str, default_name: Option<&str>) -> Result<(), String> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, token) = match line.split_once(':') {
                Some((n, t)) if !n.is_empty() && n.len() <= 64 && n.chars().all(name_char) => {
                    (n.to_owned(), t.trim())
                }
                Some(_) => return Err(format!("line {}: malformed `name:token`", i + 1)),
                None => (
                    default_name
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("token-{}", i + 1)),
                    line,
                ),
            };
            if token.is_empty() || !token.chars().all(token_char) {
                return Err(format!(
                    "line {}: a token must be non-empty and use only A-Z a-z 0-9 - . _ ~ + / =",
                    i + 1
                ));
            }
            if token.len() < 16 {
                tracing::warn!(name = %name, "bearer token shorter than 16 characters; use a long random one");
            }
            self.entries.push(Entry {
                name: Arc::from(name),
                digest: Sha256::digest(token.as_bytes()).into(),
            });
        }
        Ok(())
    }

    /// Add every token of `other`.
    pub fn extend(&mut self, other: &TokenSet) {
        self.entries.extend(other.entries.iter().cloned());
    }

    /// The name of the matching token, if any. Every entry is compared (no early exit).
    pub fn verify(&self, token: &str) -> Option<Arc<str>> {
        let d: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut hit = subtle::Choice::from(0);
        let mut idx = 0u64;
        for (i, e) in self.entries.iter().enumerate() {
            let eq = e.digest.ct_eq(&d);
            idx = u64::conditional_select(&idx, &(i as u64), eq);
            hit |= eq;
        }
        if bool::from(hit) {
            self.entries.get(idx as usize).map(|e| e.name.clone())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_comments_and_lookups() {
        let mut s = TokenSet::default();
        s.add_lines(
            "# comment\n\nalice:aaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbbbbbb\n",
            None,
        )
        .unwrap();
        s.add_lines("cccccccccccccccccccc", Some("env")).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.verify("aaaaaaaaaaaaaaaaaaaa").as_deref(), Some("alice"));
        assert_eq!(
            s.verify("bbbbbbbbbbbbbbbbbbbbbbbb").as_deref(),
            Some("token-4")
        );
        assert_eq!(s.verify("cccccccccccccccccccc").as_deref(), Some("env"));
        assert!(s.verify("aaaaaaaaaaaaaaaaaaa").is_none());
        assert!(s.verify("").is_none());
    }

    #[test]
    fn bad_lines_are_refused_without_echoing_them() {
        let mut s = TokenSet::default();
        let e = s.add_lines("ok:has space inside", None).unwrap_err();
        assert!(e.contains("line 1") && !e.contains("space"));
        assert!(s.add_lines("bad name:tok", None).is_err());
    }
}

/// The token set in use, replaceable at run time: `--token-file` is re-read on SIGHUP; tokens
/// from `--token-env` (read once at start, then removed from the environment) are kept.
pub struct LiveTokens {
    current: std::sync::RwLock<Arc<TokenSet>>,
    file: Option<std::path::PathBuf>,
    from_env: TokenSet,
}

impl LiveTokens {
    pub fn new(all: TokenSet, file: Option<std::path::PathBuf>, from_env: TokenSet) -> Self {
        Self {
            current: std::sync::RwLock::new(Arc::new(all)),
            file,
            from_env,
        }
    }

    pub fn verify(&self, token: &str) -> Option<Arc<str>> {
        let set = self
            .current
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        set.verify(token)
    }

    /// Re-read the token file; on any error (or an empty result) the old set stays.
    pub fn reload(&self) -> Result<usize, String> {
        let Some(p) = &self.file else {
            return Ok(0);
        };
        let text = std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read --token-file {}: {e}", p.display()))?;
        let mut set = self.from_env.clone();
        set.add_lines(&text, None)
            .map_err(|e| format!("--token-file {}: {e}", p.display()))?;
        if set.is_empty() {
            return Err("the reloaded token file has no tokens; keeping the previous ones".into());
        }
        let n = set.len();
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(set),
            Err(p) => *p.into_inner() = Arc::new(set),
        }
        Ok(n)
    }

    /// Reload on SIGHUP (registered with `reloader`) for as long as it lives; the file is
    /// read off the runtime's threads.
    pub fn watch(self: &Arc<Self>, reloader: &Reloader) {
        if self.file.is_none() {
            return;
        }
        reloader.register(Part::Bearer, self, |t| async move {
            let n = tokio::task::spawn_blocking(move || t.reload())
                .await
                .map_err(|e| format!("reload task: {e}"))??;
            Ok(format!("bearer tokens reloaded: {n} tokens"))
        });
    }
}

#[cfg(test)]
mod live_tests {
    use super::*;

    #[test]
    fn reload_replaces_file_tokens_and_keeps_env_ones() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "alice:aaaaaaaaaaaaaaaa\n").unwrap();
        let mut env = TokenSet::default();
        env.add_lines("envtokenenvtoken", Some("env")).unwrap();
        let mut all = env.clone();
        all.add_lines(&std::fs::read_to_string(&f).unwrap(), None)
            .unwrap();
        let live = LiveTokens::new(all, Some(f.clone()), env);
        assert_eq!(live.verify("aaaaaaaaaaaaaaaa").as_deref(), Some("alice"));
        std::fs::write(&f, "bob:bbbbbbbbbbbbbbbb\n").unwrap();
        assert_eq!(live.reload(), Ok(2));
        assert_eq!(live.verify("aaaaaaaaaaaaaaaa"), None);
        assert_eq!(live.verify("bbbbbbbbbbbbbbbb").as_deref(), Some("bob"));
        assert!(live.verify("envtokenenvtoken").is_some());
        std::fs::write(&f, "not a valid line with spaces\n").unwrap();
        assert!(live.reload().is_err());
        assert_eq!(live.verify("bbbbbbbbbbbbbbbb").as_deref(), Some("bob"));
    }
}
