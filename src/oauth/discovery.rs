//! Discovery (MCP authorization, 2025-11-25 and 2026-07-28): the resource's Protected Resource
//! Metadata (RFC 9728) from the 401's `resource_metadata`, else the well-known URIs in the
//! spec's order (path-inserted, then root); then its authorization server's metadata in the
//! spec's order (RFC 8414 path insertion, OIDC path insertion, OIDC path appending), with the
//! issuer checked against the URL it came from; and the scopes to ask for (the 401's `scope`,
//! else the resource's `scopes_supported`, else none). Hand-written: these are two small JSON
//! fetches and the `oauth2` crate does not do them.
//!
//! The 2025-03-26 servers publish no Protected Resource Metadata: when every PRM URI misses,
//! the MCP server's origin is the authorization server ([`legacy`]): its RFC 8414 metadata at
//! `<origin>/.well-known/oauth-authorization-server` (an issuer other than the origin is
//! accepted there, as such servers publish one), else, when OAuth was asked for explicitly,
//! the default endpoints `<origin>/authorize`, `/token`, `/register` ([`legacy_defaults`]).
//! The resource is then the server's canonical URL.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{debug, info};
use url::Url;

use super::challenge::Bearer;
use super::http::{check_url, redact, Fetch};

/// What an authorization server says about itself (the fields this client uses). Only the
/// issuer and the token endpoint are always needed: a server for machines may have no
/// authorization endpoint (checked where the browser login needs it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsMeta {
    pub issuer: String,
    #[serde(default)]
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    /// RFC 8628 (the device login).
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
    /// How a confidential client may authenticate at the token endpoint (RFC 8414; absent
    /// means `client_secret_basic`).
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
    /// The server takes an https URL of a Client ID Metadata Document as the `client_id`
    /// (no registration).
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// RFC 9207: the authorization response carries `iss`, which the client must then find.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// RFC 9449 §5.1: the algorithms the server takes DPoP proofs in (none: no DPoP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dpop_signing_alg_values_supported: Vec<String>,
}

/// The outcome of discovery.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The resource identifier (RFC 8707 `resource`): the PRM's `resource`.
    pub resource: String,
    pub server: AsMeta,
    /// The scopes to ask for (space-separated), if any.
    pub scope: Option<String>,
    /// The resource takes DPoP-bound tokens: its challenge had the `DPoP` scheme, or its
    /// metadata lists `dpop_signing_alg_values_supported` or requires bound tokens (RFC 9728
    /// §2). A token bound at an authorization server that offers DPoP is of no use at a
    /// resource that only reads `Authorization: Bearer`.
    pub resource_dpop: bool,
}

/// Why discovery stopped.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The resource publishes no metadata: it is not an OAuth-protected MCP server.
    #[error("the server publishes no OAuth protected resource metadata ({0})")]
    NoMetadata(String),
    #[error("{0}")]
    Bad(String),
}

/// The PRM URLs to try for `server` when the 401 named none: path-inserted, then root.
pub fn prm_candidates(server: &Url) -> Vec<Url> {
    well_known(server, "oauth-protected-resource")
}

/// The metadata URLs of an issuer, in the spec's order.
pub fn as_candidates(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let mut out = Vec::new();
    let mut at = |p: String| {
        let mut u = issuer.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        out.push(u);
    };
    if path.is_empty() {
        at("/.well-known/oauth-authorization-server".into());
        at("/.well-known/openid-configuration".into());
    } else {
        at(format!("/.well-known/oauth-authorization-server{path}"));
        at(format!("/.well-known/openid-configuration{path}"));
        at(format!("{path}/.well-known/openid-configuration"));
    }
    out
}

fn well_known(server: &Url, name: &str) -> Vec<Url> {
    let path = server.path().trim_end_matches('/');
    let mut out = Vec::new();
    for p in [
        format!("/.well-known/{name}{path}"),
        format!("/.well-known/{name}"),
    ] {
        let mut u = server.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        if !out.contains(&u) {
            out.push(u);
        }
    }
    out
}

/// The resource identifier of `server`: no fragment, no query.
pub fn canonical(server: &Url) -> String {
    let mut u = server.clone();
    u.set_fragment(None);
    u.set_query(None);
    u.to_string()
}

/// Is `resource` (from the PRM) the resource the client asked for, or a parent of it
/// (same origin, its path a prefix of the server's on a segment boundary)?
pub fn resource_matches(resource: &str, server: &Url) -> bool {
    let Ok(r) = Url::parse(resource) else {
        return false;
    };
    if r.origin() != server.origin() {
        return false;
    }
    let rp = r.path().trim_end_matches('/');
    let sp = server.path().trim_end_matches('/');
    sp == rp || sp.starts_with(&format!("{rp}/"))
}

/// Run discovery for `server` after a 401 with `challenge`; `browser`: the login will use the
/// authorization endpoint (which must then exist and offer PKCE S256).
pub async fn discover(
    fetch: &Fetch,
    server: &Url,
    challenge: &Bearer,
    browser: bool,
) -> Result<Discovered, DiscoverError> {
    let (prm_url, prm) = match fetch_prm(fetch, server, challenge).await {
        Err(DiscoverError::NoMetadata(tried)) => {
            return legacy(fetch, server, challenge, browser, tried).await
        }
        r => r?,
    };
    let resource = match prm.get("resource").and_then(Value::as_str) {
        Some(r) if resource_matches(r, server) => r.to_owned(),
        Some(r) => {
            return Err(DiscoverError::Bad(format!(
                "the protected resource metadata at {} is for {r}, not for {}",
                redact(&prm_url),
                canonical(server)
            )))
        }
        None => {
            return Err(DiscoverError::Bad(format!(
                "the protected resource metadata at {} has no \"resource\"",
                redact(&prm_url)
            )))
        }
    };
    let issuer = prm
        .get("authorization_servers")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find_map(Value::as_str))
        .ok_or_else(|| {
            DiscoverError::Bad(format!(
                "the protected resource metadata at {} names no authorization server",
                redact(&prm_url)
            ))
        })?;
    let server_meta = fetch_as(fetch, issuer, browser).await?;
    let scope = challenge
        .scope
        .clone()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            let s: Vec<&str> = prm
                .get("scopes_supported")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (!s.is_empty()).then(|| s.join(" "))
        });
    info!(
        "authorization server for {}: {}",
        canonical(server),
        server_meta.issuer
    );
    let lists_algs = prm
        .get("dpop_signing_alg_values_supported")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let requires = prm.get("dpop_bound_access_tokens_required") == Some(&Value::Bool(true));
    Ok(Discovered {
        resource,
        server: server_meta,
        scope,
        resource_dpop: challenge.dpop || lists_algs || requires,
    })
}

/// The origin of `server` (its root URL).
fn origin_root(server: &Url) -> Url {
    let mut u = server.clone();
    u.set_path("/");
    u.set_query(None);
    u.set_fragment(None);
    u
}

/// The 2025-03-26 discovery (no PRM): the origin's RFC 8414 metadata; `NoMetadata` when it is
/// not published either.
async fn legacy(
    fetch: &Fetch,
    server: &Url,
    challenge: &Bearer,
    browser: bool,
    tried: String,
) -> Result<Discovered, DiscoverError> {
    let mut u = origin_root(server);
    u.set_path("/.well-known/oauth-authorization-server");
    check_url(&u).map_err(DiscoverError::Bad)?;
    let v = match fetch.get_json(&u).await {
        Ok(Some(v)) if v.is_object() => v,
        Ok(_) => {
            debug!("no authorization server metadata at {}", redact(&u));
            return Err(DiscoverError::NoMetadata(format!(
                "{tried}, {}",
                redact(&u)
            )));
        }
        Err(e) => {
            debug!("no authorization server metadata: {e}");
            return Err(DiscoverError::NoMetadata(format!(
                "{tried}, {}",
                redact(&u)
            )));
        }
    };
    let m = parse_as(&u, v)?;
    let origin = origin_root(server);
    if m.issuer.trim_end_matches('/') != origin.as_str().trim_end_matches('/') {
        debug!(
            "the metadata at {} names issuer {} (not the origin); accepted (2025-03-26 discovery)",
            redact(&u),
            m.issuer
        );
    }
    check_as(&m, &m.issuer, browser, true)?;
    info!(
        "{} publishes no protected resource metadata: its origin is the authorization server \
         ({}; MCP 2025-03-26)",
        canonical(server),
        m.issuer
    );
    Ok(Discovered {
        resource: canonical(server),
        server: m,
        scope: challenge.scope.clone().filter(|s| !s.trim().is_empty()),
        resource_dpop: challenge.dpop,
    })
}

/// The 2025-03-26 default endpoints at the origin of `server` (no metadata anywhere).
pub fn legacy_defaults(server: &Url, challenge: &Bearer) -> Discovered {
    let origin = origin_root(server);
    let at = |p: &str| {
        let mut u = origin.clone();
        u.set_path(p);
        u.to_string()
    };
    Discovered {
        resource: canonical(server),
        server: AsMeta {
            issuer: origin.as_str().trim_end_matches('/').to_owned(),
            authorization_endpoint: at("/authorize"),
            token_endpoint: at("/token"),
            registration_endpoint: Some(at("/register")),
            code_challenge_methods_supported: vec!["S256".into()],
            ..AsMeta::default()
        },
        scope: challenge.scope.clone().filter(|s| !s.trim().is_empty()),
        resource_dpop: challenge.dpop,
    }
}

fn parse_as(u: &Url, v: Value) -> Result<AsMeta, DiscoverError> {
    serde_json::from_value(v).map_err(|e| {
        DiscoverError::Bad(format!(
            "authorization server metadata at {}: {e}",
            redact(u)
        ))
    })
}

/// The endpoints a login needs, present and allowed; `legacy`: a 2025-03-26 server that
/// lists no PKCE methods is taken to support S256 (PKCE is mandatory there).
fn check_as(m: &AsMeta, issuer: &str, browser: bool, legacy: bool) -> Result<(), DiscoverError> {
    if browser && m.authorization_endpoint.is_empty() {
        return Err(DiscoverError::Bad(format!(
            "the authorization server {issuer} has no authorization_endpoint (a browser \
             login is impossible; see --oauth-device-code, --oauth-client-credentials)"
        )));
    }
    let s256 = m
        .code_challenge_methods_supported
        .iter()
        .any(|c| c == "S256")
        || (legacy && m.code_challenge_methods_supported.is_empty());
    if browser && !s256 {
        return Err(DiscoverError::Bad(format!(
            "the authorization server {issuer} does not list PKCE S256 in \
             code_challenge_methods_supported"
        )));
    }
    for e in [&m.authorization_endpoint, &m.token_endpoint]
        .into_iter()
        .filter(|e| !e.is_empty())
        .chain(m.registration_endpoint.as_ref())
        .chain(m.device_authorization_endpoint.as_ref())
    {
        let eu = Url::parse(e).map_err(|x| DiscoverError::Bad(format!("{e:?}: {x}")))?;
        check_url(&eu).map_err(DiscoverError::Bad)?;
    }
    Ok(())
}

async fn fetch_prm(
    fetch: &Fetch,
    server: &Url,
    challenge: &Bearer,
) -> Result<(Url, Value), DiscoverError> {
    if let Some(u) = &challenge.resource_metadata {
        // The server named it: any failure is an error.
        let u = Url::parse(u)
            .map_err(|e| DiscoverError::Bad(format!("resource_metadata {u:?}: {e}")))?;
        check_url(&u).map_err(DiscoverError::Bad)?;
        return match fetch.get_json(&u).await {
            Ok(Some(v)) if v.is_object() => Ok((u, v)),
            Ok(_) => Err(DiscoverError::Bad(format!(
                "no protected resource metadata at {} (named by the server's 401)",
                redact(&u)
            ))),
            Err(e) => Err(DiscoverError::Bad(e.to_string())),
        };
    }
    // Guessed URIs: a miss of any kind means "not published here".
    let candidates = prm_candidates(server);
    for u in &candidates {
        if let Err(e) = check_url(u) {
            debug!("{e}");
            continue;
        }
        match fetch.get_json(u).await {
            Ok(Some(v)) if v.is_object() => return Ok((u.clone(), v)),
            Ok(_) => debug!("no protected resource metadata at {}", redact(u)),
            Err(e) => debug!("no protected resource metadata: {e}"),
        }
    }
    let tried: Vec<String> = candidates.iter().map(redact).collect();
    Err(DiscoverError::NoMetadata(tried.join(", ")))
}

async fn fetch_as(fetch: &Fetch, issuer: &str, browser: bool) -> Result<AsMeta, DiscoverError> {
    let iu = Url::parse(issuer)
        .map_err(|e| DiscoverError::Bad(format!("authorization server {issuer:?}: {e}")))?;
    check_url(&iu).map_err(DiscoverError::Bad)?;
    for u in as_candidates(&iu) {
        let v = match fetch.get_json(&u).await {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            Err(e) => return Err(DiscoverError::Bad(e.to_string())),
        };
        let m = parse_as(&u, v)?;
        if m.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
            return Err(DiscoverError::Bad(format!(
                "the metadata at {} names issuer {} instead of {issuer}",
                redact(&u),
                m.issuer
            )));
        }
        check_as(&m, issuer, browser, false)?;
        return Ok(m);
    }
    Err(DiscoverError::Bad(format!(
        "no authorization server metadata found for {issuer}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn prm_order_is_path_inserted_then_root() {
        let c: Vec<String> = prm_candidates(&u("https://h.example/public/mcp?x=1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            c,
            [
                "https://h.example/.well-known/oauth-protected-resource/public/mcp",
                "https://h.example/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(prm_candidates(&u("https://h.example/")).len(), 1);
    }

    #[test]
    fn as_order_follows_the_spec() {
        let c: Vec<String> = as_candidates(&u("https://auth.example/tenant1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            c,
            [
                "https://auth.example/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example/.well-known/openid-configuration/tenant1",
                "https://auth.example/tenant1/.well-known/openid-configuration"
            ]
        );
        let c: Vec<String> = as_candidates(&u("https://auth.example"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            c,
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn legacy_defaults_are_at_the_origin_and_the_resource_is_the_server() {
        let d = legacy_defaults(&u("https://h.example/public/mcp?x=1#f"), &Bearer::default());
        assert_eq!(d.resource, "https://h.example/public/mcp");
        assert_eq!(d.server.issuer, "https://h.example");
        assert_eq!(
            d.server.authorization_endpoint,
            "https://h.example/authorize"
        );
        assert_eq!(d.server.token_endpoint, "https://h.example/token");
        assert_eq!(
            d.server.registration_endpoint.as_deref(),
            Some("https://h.example/register")
        );
        assert!(!d.server.client_id_metadata_document_supported);
        let m: AsMeta = serde_json::from_value(serde_json::json!({
            "issuer": "https://a", "token_endpoint": "https://a/t",
            "client_id_metadata_document_supported": true
        }))
        .unwrap();
        assert!(m.client_id_metadata_document_supported);
    }

    #[test]
    fn resource_must_be_the_server_or_a_parent() {
        let s = u("https://h.example/mcp");
        assert!(resource_matches("https://h.example/mcp", &s));
        assert!(resource_matches("https://h.example/mcp/", &s));
        assert!(resource_matches("https://h.example", &s));
        assert!(!resource_matches("https://h.example/mc", &s));
        assert!(!resource_matches("https://evil.example/mcp", &s));
        assert!(!resource_matches("http://h.example/mcp", &s));
        assert!(!resource_matches("not a url", &s));
    }
}
