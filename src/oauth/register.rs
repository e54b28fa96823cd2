//! Who the client is: the static client id (and secret) from flags, else a cached dynamic
//! registration whose redirect URI still matches the callback, else a new RFC 7591 dynamic
//! registration (a public client: `token_endpoint_auth_method: none`, the loopback callback as
//! its only redirect URI; for the device login, no redirect URI and the device grant type).
//! Hand-written: one JSON POST, which the `oauth2` crate does not do.

use serde_json::{json, Value};
use tracing::info;
use url::Url;

use super::assertion::ClientKey;
use super::discovery::AsMeta;
use super::http::{check_url, Fetch};
use super::store::{ClientRecord, Secret};

/// The client settings from flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticClient {
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    /// The key of `private_key_jwt` (client credentials only).
    pub private_key: Option<ClientKey>,
}

/// The device grant's type URI (RFC 8628 §3.4).
pub const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// The client to use with `server` for `redirect_uri` (empty: the device login).
pub async fn client_for(
    fetch: &Fetch,
    server: &AsMeta,
    flags: &StaticClient,
    cached: Option<&ClientRecord>,
    redirect_uri: &str,
    scope: Option<&str>,
) -> Result<ClientRecord, String> {
    if let Some(id) = &flags.client_id {
        return Ok(ClientRecord {
            client_id: id.clone(),
            client_secret: flags.client_secret.clone(),
            redirect_uri: redirect_uri.to_owned(),
            registered: false,
        });
    }
    if let Some(c) = cached.filter(|c| c.registered) {
        if c.redirect_uri == redirect_uri {
            return Ok(c.clone());
        }
        info!(
            "the cached registration is for {}, the callback is now {redirect_uri}: registering again",
            c.redirect_uri
        );
    }
    let Some(endpoint) = &server.registration_endpoint else {
        return Err(format!(
            "the authorization server {} offers no dynamic client registration: give a client \
             id with --oauth-client-id",
            server.issuer
        ));
    };
    register(fetch, endpoint, redirect_uri, scope).await
}

async fn register(
    fetch: &Fetch,
    endpoint: &str,
    redirect_uri: &str,
    scope: Option<&str>,
) -> Result<ClientRecord, String> {
    let u = Url::parse(endpoint).map_err(|e| format!("registration endpoint: {e}"))?;
    check_url(&u)?;
    let mut doc = if redirect_uri.is_empty() {
        json!({
            "client_name": "mcp-bridge",
            "grant_types": [DEVICE_GRANT, "refresh_token"],
            "response_types": [],
            "token_endpoint_auth_method": "none",
        })
    } else {
        json!({
            "client_name": "mcp-bridge",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
    };
    if let Some(s) = scope {
        doc["scope"] = json!(s);
    }
    let (status, v) = fetch.post_json(&u, &doc).await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        let why = v
            .get("error_description")
            .or_else(|| v.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(format!(
            "dynamic client registration at {endpoint} failed: HTTP {} {why}",
            status.as_u16()
        ));
    }
    let id = v
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("the registration answer from {endpoint} has no client_id"))?;
    info!("registered with {endpoint} as a public client");
    Ok(ClientRecord {
        client_id: id.to_owned(),
        client_secret: v
            .get("client_secret")
            .and_then(Value::as_str)
            .map(|s| Secret(s.to_owned())),
        redirect_uri: redirect_uri.to_owned(),
        registered: true,
    })
}
