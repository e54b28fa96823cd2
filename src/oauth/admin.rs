//! `mcp-bridge auth status [URL]` and `auth logout URL`: the logins `connect` keeps, seen and
//! removed from outside the host. Status shows what a user needs to judge a login (server,
//! resource, authorization server, scopes, expiry, whether it can refresh) and never a token
//! or a secret; logout removes every login kept for a server URL, whatever client settings
//! it was made with (each is a file of its own, see `store`).

use std::path::{Path, PathBuf};

use super::store::{now_secs, Record, VERSION};

/// Every readable login of this layout in `dir`, sorted by server; a missing folder has none.
fn records(dir: &Path) -> Result<Vec<(PathBuf, Record)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        match serde_json::from_slice::<Record>(&text) {
            Ok(r) if r.version == VERSION => out.push((path, r)),
            _ => {}
        }
    }
    out.sort_by(|a, b| a.1.server.cmp(&b.1.server));
    Ok(out)
}

/// Does a kept login's server URL name `url` (a trailing `/` aside)?
fn same_server(kept: &str, url: &str) -> bool {
    kept.trim_end_matches('/') == url.trim_end_matches('/')
}

/// How long until (or since) `at`, for people.
fn when(at: u64, now: u64) -> String {
    let (d, past) = if at >= now {
        (at - now, false)
    } else {
        (now - at, true)
    };
    let span = match d {
        0..=119 => format!("{d} s"),
        120..=7199 => format!("{} min", d / 60),
        7200..=172_799 => format!("{} h", d / 3600),
        _ => format!("{} days", d / 86_400),
    };
    if past {
        format!("expired {span} ago")
    } else {
        format!("expires in {span}")
    }
}

/// One line a login: nothing secret in it.
fn describe(r: &Record, now: u64) -> String {
    let mut s = format!(
        "{}\n  resource: {}\n  authorization server: {}\n",
        r.server, r.resource, r.auth_server.issuer
    );
    match &r.client {
        Some(c) => s.push_str(&format!(
            "  client: {} ({})\n",
            c.client_id,
            if c.registered {
                "registered dynamically"
            } else {
                "given"
            }
        )),
        None => s.push_str("  client: none yet\n"),
    }
    match &r.token {
        None => s.push_str("  token: none (logged out, or the login did not finish)\n"),
        Some(t) => {
            let scope = t.scope.as_deref().unwrap_or("(none given)");
            let expiry = t
                .expires_at
                .map_or_else(|| "no expiry given".to_owned(), |at| when(at, now));
            let refresh = if t.refresh_token.is_some() {
                "can refresh"
            } else {
                "no refresh token"
            };
            s.push_str(&format!("  token: {expiry}; {refresh}\n  scope: {scope}\n"));
        }
    }
    s
}

/// `auth status [URL]`: the report for stdout.
pub fn status(dir: &Path, url: Option<&str>) -> Result<String, String> {
    let now = now_secs();
    let all = records(dir)?;
    let shown: Vec<&Record> = all
        .iter()
        .map(|(_, r)| r)
        .filter(|r| url.is_none_or(|u| same_server(&r.server, u)))
        .collect();
    if shown.is_empty() {
        return Ok(match url {
            Some(u) => format!("no login kept for {u} (in {})\n", dir.display()),
            None => format!("no logins kept (in {})\n", dir.display()),
        });
    }
    Ok(shown.iter().map(|r| describe(r, now)).collect())
}

/// `auth logout URL`: remove every login kept for `url`; how many were removed.
pub fn logout(dir: &Path, url: &str) -> Result<usize, String> {
    let mut n = 0;
    for (path, r) in records(dir)? {
        if same_server(&r.server, url) {
            std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::oauth::discovery::AsMeta;
    use crate::oauth::store::{ClientRecord, Secret, Store, TokenRecord};

    fn record(server: &str, expires_at: Option<u64>) -> Record {
        Record {
            version: VERSION,
            server: server.into(),
            resource: server.into(),
            auth_server: AsMeta {
                issuer: "https://as.example".into(),
                authorization_endpoint: "https://as.example/a".into(),
                token_endpoint: "https://as.example/t".into(),
                registration_endpoint: None,
                code_challenge_methods_supported: vec!["S256".into()],
                ..AsMeta::default()
            },
            client: Some(ClientRecord {
                client_id: "cid-1".into(),
                client_secret: Some(Secret("client-secret-xyz".into())),
                redirect_uri: "http://127.0.0.1:1/cb".into(),
                registered: true,
                token_endpoint_auth_method: None,
            }),
            token: Some(TokenRecord {
                access_token: Secret("access-token-abc".into()),
                refresh_token: Some(Secret("refresh-token-def".into())),
                expires_at,
                lifetime: None,
                scope: Some("mcp:read".into()),
                token_type: None,
            }),
            dpop_key: None,
        }
    }

    #[test]
    fn status_shows_logins_without_secrets_and_logout_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let now = now_secs();
        let a = "https://a.example/mcp";
        Store::new(dir.path(), &[a, "x"])
            .save(&record(a, Some(now + 3600)))
            .unwrap();
        Store::new(dir.path(), &[a, "y"])
            .save(&record(a, Some(now - 10)))
            .unwrap();
        let b = "https://b.example/mcp";
        Store::new(dir.path(), &[b]).save(&record(b, None)).unwrap();
        std::fs::write(dir.path().join("junk.json"), "{").unwrap();

        let all = status(dir.path(), None).unwrap();
        for secret in ["access-token-abc", "refresh-token-def", "client-secret-xyz"] {
            assert!(!all.contains(secret), "{all}");
        }
        assert_eq!(all.lines().filter(|l| *l == a).count(), 2, "{all}");
        assert!(all.contains("expires in 60 min"), "{all}");
        assert!(all.contains("expired 10 s ago"), "{all}");
        assert!(all.contains("no expiry given"), "{all}");
        assert!(all.contains("scope: mcp:read"), "{all}");
        let only_b = status(dir.path(), Some("https://b.example/mcp/")).unwrap();
        assert!(!only_b.contains("a.example"), "{only_b}");

        assert_eq!(logout(dir.path(), a).unwrap(), 2);
        assert_eq!(logout(dir.path(), a).unwrap(), 0);
        assert!(status(dir.path(), Some(a))
            .unwrap()
            .starts_with("no login kept"));
        assert!(status(dir.path(), None).unwrap().contains("b.example"));
        let missing = dir.path().join("none");
        assert!(status(&missing, None)
            .unwrap()
            .starts_with("no logins kept"));
    }
}
