//! The grants the `oauth2` crate does not have, for logins with no person and no browser:
//! - workload identity (SEP-1933): the RFC 7523 JWT-bearer grant with a JWT the platform
//!   gives the workload (a file it rotates, or a command that prints one), read afresh for
//!   every token so a rotated one is used at once;
//! - enterprise-managed authorization (SEP-990): the user's ID token from the enterprise
//!   identity provider is exchanged there (RFC 8693 token exchange) for an Identity Assertion
//!   JWT Authorization Grant (ID-JAG) naming the MCP server's authorization server and
//!   resource, which the JWT-bearer grant then trades for the access token.
//!
//! Both are one form POST each; they go through [`Fetch::oauth2`], so a DPoP login proves
//! possession at the token endpoint here too. A refusal is the login's error, not retried
//! with the same assertion or with another grant (SEP-1933).

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request};
use serde::Deserialize;
use tracing::info;
use url::Url;

use super::assertion::ASSERTION_TYPE;
use super::discovery::AsMeta;
use super::http::{redact, Fetch};
use super::register::StaticClient;
use super::store::{now_secs, Secret, TokenRecord};

/// RFC 7523 §2.1.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// RFC 8693 §2.1.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 §3.
pub const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
/// The ID-JAG's token type (SEP-990).
pub const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// Longest assertion read from a file or a command.
const MAX_ASSERTION: usize = 64 * 1024;
/// How long a command that prints an assertion may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a JWT comes from: read again for every token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    /// Run with `sh -c`; its stdout (trimmed) is the JWT.
    Command(String),
}

impl Source {
    /// The JWT now; `what` names it in messages (the flag).
    pub async fn read(&self, what: &str) -> Result<Secret, String> {
        let raw = match self {
            Source::File(p) => tokio::fs::read(p)
                .await
                .map_err(|e| format!("{what} {}: {e}", p.display()))?,
            Source::Command(c) => run(c, what).await?,
        };
        if raw.len() > MAX_ASSERTION {
            return Err(format!("{what}: longer than {MAX_ASSERTION} bytes"));
        }
        let s = String::from_utf8(raw).map_err(|_| format!("{what}: not UTF-8"))?;
        let s = s.trim();
        // A JWT: three base64url parts (a JWE has five; neither has blanks).
        let parts = s.split('.').count();
        if s.is_empty() || !(parts == 3 || parts == 5) || s.contains(char::is_whitespace) {
            return Err(format!("{what}: not a JWT"));
        }
        Ok(Secret(s.to_owned()))
    }
}

async fn run(command: &str, what: &str) -> Result<Vec<u8>, String> {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{what}: cannot run it: {e}"))?;
    let out = tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| format!("{what}: no answer within {} s", COMMAND_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what}: the command failed ({})", out.status));
    }
    Ok(out.stdout)
}

/// The enterprise identity provider of SEP-990 (`--oauth-idp-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idp {
    /// Its issuer (its token endpoint from its metadata), unless `token_endpoint` is given.
    pub issuer: Option<String>,
    pub token_endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    /// The user's ID token issued by this provider.
    pub id_token: Source,
}

/// A token endpoint's answer.
#[derive(Deserialize)]
struct Answer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    issued_token_type: Option<String>,
}

#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// How a client authenticates at a token endpoint here.
enum ClientAuth<'a> {
    /// `client_id` in the form (a public client), if there is one.
    Public(Option<&'a str>),
    /// HTTP Basic (RFC 6749 §2.3.1: both parts form-encoded first).
    Basic(&'a str, &'a Secret),
    Post(&'a str, &'a Secret),
    /// `private_key_jwt`.
    Assertion(&'a str, String),
}

fn client_auth<'a>(meta: &AsMeta, client: &'a StaticClient) -> Result<ClientAuth<'a>, String> {
    let Some(id) = client.client_id.as_deref() else {
        return Ok(ClientAuth::Public(None));
    };
    let m = &meta.token_endpoint_auth_methods_supported;
    let has = |x: &str| m.iter().any(|a| a == x);
    Ok(match (&client.client_secret, &client.private_key) {
        (Some(s), _)
            if !m.is_empty() && !has("client_secret_basic") && has("client_secret_post") =>
        {
            ClientAuth::Post(id, s)
        }
        (Some(s), _) => ClientAuth::Basic(id, s),
        (None, Some(k)) => {
            let aud = [meta.issuer.as_str(), meta.token_endpoint.as_str()];
            let aud = if aud[0] == aud[1] {
                &aud[..1]
            } else {
                &aud[..]
            };
            ClientAuth::Assertion(id, k.assertion(id, aud)?)
        }
        (None, None) => ClientAuth::Public(Some(id)),
    })
}

fn form_part(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// POST `form` to `endpoint` as `auth`; the answer, or the refusal's message.
async fn post(
    fetch: &Fetch,
    endpoint: &str,
    mut form: Vec<(&str, String)>,
    auth: ClientAuth<'_>,
    what: &str,
) -> Result<Answer, String> {
    let u = Url::parse(endpoint).map_err(|e| format!("{what}: token endpoint {endpoint}: {e}"))?;
    let mut basic = None;
    match auth {
        ClientAuth::Public(Some(id)) => form.push(("client_id", id.to_owned())),
        ClientAuth::Public(None) => {}
        ClientAuth::Basic(id, s) => {
            let pair = format!("{}:{}", form_part(id), form_part(&s.0));
            basic = Some(base64::engine::general_purpose::STANDARD.encode(pair));
        }
        ClientAuth::Post(id, s) => {
            form.push(("client_id", id.to_owned()));
            form.push(("client_secret", s.0.clone()));
        }
        ClientAuth::Assertion(id, a) => {
            form.push(("client_id", id.to_owned()));
            form.push(("client_assertion_type", ASSERTION_TYPE.to_owned()));
            form.push(("client_assertion", a));
        }
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let mut b = Request::builder()
        .method(Method::POST)
        .uri(u.as_str())
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(v) = basic {
        b = b.header(AUTHORIZATION, format!("Basic {v}"));
    }
    let req = b
        .body(body.into_bytes())
        .map_err(|e| format!("{what}: {e}"))?;
    let resp = fetch
        .oauth2(req)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let (status, body) = (resp.status(), resp.into_body());
    if status.is_success() {
        return serde_json::from_slice(&body)
            .map_err(|e| format!("{what}: the answer of {} is not a token: {e}", redact(&u)));
    }
    Err(match serde_json::from_slice::<Refusal>(&body) {
        Ok(r) => format!(
            "{what}: {} refused: {}{}",
            redact(&u),
            r.error,
            r.error_description
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        ),
        Err(_) => format!("{what}: {} answered HTTP {}", redact(&u), status.as_u16()),
    })
}

fn record(a: Answer, asked: Option<&str>) -> TokenRecord {
    TokenRecord {
        access_token: Secret(a.access_token),
        refresh_token: a.refresh_token.map(Secret),
        expires_at: a.expires_in.map(|d| now_secs().saturating_add(d)),
        lifetime: a.expires_in,
        scope: a.scope.or_else(|| asked.map(str::to_owned)),
        token_type: a.token_type.filter(|t| !t.eq_ignore_ascii_case("bearer")),
    }
}

/// The JWT-bearer grant (RFC 7523 §2.1) at `meta`'s token endpoint with `assertion`.
pub async fn jwt_bearer(
    fetch: &Fetch,
    meta: &AsMeta,
    client: &StaticClient,
    assertion: &Secret,
    resource: Option<&str>,
    scope: Option<&str>,
    params: &[(String, String)],
) -> Result<TokenRecord, String> {
    let mut form = vec![
        ("grant_type", JWT_BEARER.to_owned()),
        ("assertion", assertion.0.clone()),
    ];
    if let Some(s) = scope {
        form.push(("scope", s.to_owned()));
    }
    if let Some(r) = resource {
        form.push(("resource", r.to_owned()));
    }
    form.extend(params.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let auth = client_auth(meta, client)?;
    let a = post(
        fetch,
        &meta.token_endpoint,
        form,
        auth,
        "the JWT-bearer grant",
    )
    .await?;
    info!("got a token from {} (JWT-bearer grant)", meta.issuer);
    Ok(record(a, scope))
}

/// The IdP's token endpoint: given, or from its metadata (OpenID Connect discovery, then
/// RFC 8414).
async fn idp_token_endpoint(fetch: &Fetch, idp: &Idp) -> Result<String, String> {
    if let Some(t) = &idp.token_endpoint {
        return Ok(t.clone());
    }
    let Some(issuer) = &idp.issuer else {
        return Err("--oauth-idp-issuer or --oauth-idp-token-endpoint is needed".into());
    };
    let base = issuer.trim_end_matches('/');
    for path in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        let u = Url::parse(&format!("{base}{path}"))
            .map_err(|e| format!("--oauth-idp-issuer {issuer}: {e}"))?;
        if let Some(doc) = fetch.get_json(&u).await.map_err(|e| e.to_string())? {
            if let Some(t) = doc.get("token_endpoint").and_then(|t| t.as_str()) {
                return Ok(t.to_owned());
            }
        }
    }
    Err(format!(
        "the identity provider {issuer} publishes no token endpoint"
    ))
}

/// SEP-990: `id_token` exchanged at the IdP for an ID-JAG for `meta`'s issuer and
/// `resource`, then the JWT-bearer grant with it at `meta`. `idp_fetch` proves nothing (the
/// IdP is not where the token is used); `fetch` is the login's.
#[allow(clippy::too_many_arguments)]
pub async fn enterprise(
    fetch: &Fetch,
    idp_fetch: &Fetch,
    meta: &AsMeta,
    client: &StaticClient,
    idp: &Idp,
    id_token: &Secret,
    resource: &str,
    scope: Option<&str>,
    params: &[(String, String)],
) -> Result<TokenRecord, String> {
    let endpoint = idp_token_endpoint(idp_fetch, idp).await?;
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE.to_owned()),
        ("requested_token_type", ID_JAG_TYPE.to_owned()),
        ("subject_token", id_token.0.clone()),
        ("subject_token_type", ID_TOKEN_TYPE.to_owned()),
        ("audience", meta.issuer.clone()),
        ("resource", resource.to_owned()),
    ];
    if let Some(s) = scope {
        form.push(("scope", s.to_owned()));
    }
    let auth = match &idp.client_secret {
        Some(s) => ClientAuth::Basic(&idp.client_id, s),
        None => ClientAuth::Public(Some(&idp.client_id)),
    };
    let jag = post(
        idp_fetch,
        &endpoint,
        form,
        auth,
        "the token exchange at the identity provider",
    )
    .await?;
    if let Some(t) = jag
        .issued_token_type
        .as_deref()
        .filter(|t| *t != ID_JAG_TYPE)
    {
        return Err(format!(
            "the identity provider issued a {t}, not an ID-JAG ({ID_JAG_TYPE})"
        ));
    }
    info!("the identity provider issued an ID-JAG for {}", meta.issuer);
    let grant = Secret(jag.access_token);
    jwt_bearer(fetch, meta, client, &grant, Some(resource), scope, params).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_source_is_read_afresh_and_must_be_a_jwt() {
        let d = std::env::temp_dir().join(format!("mb-exchange-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("jwt");
        std::fs::write(&f, "a.b.c\n").unwrap();
        let s = Source::File(f.clone());
        assert_eq!(s.read("t").await.unwrap().0, "a.b.c");
        std::fs::write(&f, "d.e.f").unwrap();
        assert_eq!(s.read("t").await.unwrap().0, "d.e.f");
        std::fs::write(&f, "not a jwt").unwrap();
        assert!(s.read("t").await.unwrap_err().contains("not a JWT"));
        let c = Source::Command("printf 'x.y.z'".into());
        assert_eq!(c.read("t").await.unwrap().0, "x.y.z");
        let bad = Source::Command("exit 3".into());
        assert!(bad.read("t").await.unwrap_err().contains("failed"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_bearer_answer_has_no_token_type_and_keeps_the_asked_scope() {
        let a: Answer =
            serde_json::from_str(r#"{"access_token":"t","token_type":"Bearer","expires_in":60}"#)
                .unwrap();
        let r = record(a, Some("s"));
        assert_eq!(r.token_type, None);
        assert_eq!(r.scope.as_deref(), Some("s"));
        assert_eq!(r.lifetime, Some(60));
        let a: Answer =
            serde_json::from_str(r#"{"access_token":"t","token_type":"DPoP"}"#).unwrap();
        assert!(record(a, None).dpop());
    }
}
