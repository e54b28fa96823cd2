//! Who the client is: the static client id (and secret) from flags, else the URL of a Client ID
//! Metadata Document (`--oauth-client-metadata-url`) when the authorization server advertises
//! `client_id_metadata_document_supported` (a public client, no registration), else a cached
//! dynamic registration whose redirect URI still matches the callback, else a new RFC 7591
//! dynamic registration (asked for as a public client: `token_endpoint_auth_method: none`, the
//! loopback callback as its only redirect URI; for the device login, no redirect URI and the
//! device grant type; `application_type` `native` for a loopback redirect, else `web`,
//! SEP-837). The server may answer with a secret and another method (RFC 7591 §3.2.1): that
//! method is kept and used.
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
    /// The URL of a Client ID Metadata Document: the client id where the server takes one.
    pub metadata_url: Option<String>,
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
) -> Result<ClientRecord, String> {
    if let Some(id) = &flags.client_id {
        return Ok(ClientRecord {
            client_id: id.clone(),
            client_secret: flags.client_secret.clone(),
            redirect_uri: redirect_uri.to_owned(),
            registered: false,
            token_endpoint_auth_method: None,
        });
    }
    if let Some(url) = &flags.metadata_url {
        if server.client_id_metadata_document_supported {
            info!(
                "{} takes Client ID Metadata Documents: the client id is {url}",
                server.issuer
            );
            return Ok(ClientRecord {
                client_id: url.clone(),
                client_secret: None,
                redirect_uri: redirect_uri.to_owned(),
                registered: false,
                token_endpoint_auth_method: Some("none".into()),
            });
        }
        info!(
            "{} does not advertise client_id_metadata_document_supported: not using {url}",
            server.issuer
        );
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
    register(fetch, endpoint, redirect_uri).await
}

/// The registration's `application_type` (OpenID Connect Registration, which SEP-837 asks
/// MCP clients to send): `native` for a loopback redirect (the login's own callback, and the
/// device login, which has none), `web` for any other.
fn application_type(redirect_uri: &str) -> &'static str {
    let loopback = Url::parse(redirect_uri)
        .ok()
        .is_some_and(|u| match u.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        });
    if loopback {
        "native"
    } else {
        "web"
    }
}

async fn register(
    fetch: &Fetch,
    endpoint: &str,
    redirect_uri: &str,
) -> Result<ClientRecord, String> {
    let u = Url::parse(endpoint).map_err(|e| format!("registration endpoint: {e}"))?;
    check_url(&u)?;
    // No `scope` (RFC 7591 §2: optional): servers that honour it restrict the client to it
    // for good, and the registration is cached, so a later step-up to a wider scope would be
    // refused (`invalid_scope`). The scope is asked for in each authorization request.
    let doc = if redirect_uri.is_empty() {
        json!({
            "client_name": "mcp-bridge",
            "application_type": "native",
            "grant_types": [DEVICE_GRANT, "refresh_token"],
            "response_types": [],
            "token_endpoint_auth_method": "none",
        })
    } else {
        json!({
            "client_name": "mcp-bridge",
            "application_type": application_type(redirect_uri),
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
    };
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
    let secret = v
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| Secret(s.to_owned()));
    // RFC 7591 §3.2.1: the server may have chosen another method than the one asked for.
    let method = v
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match (&secret, method.as_deref()) {
        (None, _) | (_, Some("none")) => {
            info!("registered with {endpoint} as a public client")
        }
        (Some(_), m) => info!(
            "registered with {endpoint} as a confidential client ({})",
            m.unwrap_or("client_secret_basic")
        ),
    }
    Ok(ClientRecord {
        client_id: id.to_owned(),
        client_secret: secret,
        redirect_uri: redirect_uri.to_owned(),
        registered: true,
        token_endpoint_auth_method: method,
    })
}

#[cfg(test)]
mod tests {
    use super::application_type;

    #[test]
    fn loopback_redirects_are_native_others_web() {
        for native in [
            "http://127.0.0.1:33418/callback",
            "http://localhost:9/cb",
            "http://[::1]:8080/cb",
            "http://127.1.2.3/cb",
        ] {
            assert_eq!(application_type(native), "native", "{native}");
        }
        for web in [
            "https://app.example.com/cb",
            "http://10.0.0.1/cb",
            "not a url",
        ] {
            assert_eq!(application_type(web), "web", "{web}");
        }
    }
}
