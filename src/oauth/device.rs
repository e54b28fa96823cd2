//! The device authorization grant (RFC 8628), for a login without a browser on this machine:
//! ask for a device code, show the verification URL and user code on stderr (never stdout,
//! which belongs to the host), then poll with the `oauth2` crate, which honours `interval`,
//! `authorization_pending` and `slow_down` (+5 s); bounded by `--oauth-timeout` and the
//! code's own expiry. The client, its authentication and the token record are `login`'s
//! (which re-exports this); only the device-specific steps and their messages are here.

use std::time::Duration;

use oauth2::basic::BasicClient;
use oauth2::{
    ClientId, ClientSecret, DeviceAuthorizationUrl, DeviceCodeErrorResponseType, RequestTokenError,
    StandardDeviceAuthorizationResponse,
};
use tracing::info;

use super::discovery::AsMeta;
use super::http::Fetch;
use super::login::{client_auth, refusal, scopes, token_record, token_url, LoginSettings};
use super::store::{ClientRecord, TokenRecord};

/// The device authorization endpoint, or why there is none.
pub fn device_endpoint(meta: &AsMeta) -> Result<&str, String> {
    meta.device_authorization_endpoint
        .as_deref()
        .ok_or_else(|| {
            format!(
                "the authorization server {} offers no device login (its metadata has no \
             device_authorization_endpoint): log in without --oauth-device-code",
                meta.issuer
            )
        })
}

/// The device authorization grant: ask for a device code, show the user where to enter it
/// (stderr), poll the token endpoint until the user approves, refuses, or the code or
/// `settings.timeout` runs out.
pub async fn device(
    fetch: &Fetch,
    meta: &AsMeta,
    client: &ClientRecord,
    resource: Option<&str>,
    scope: Option<&str>,
    settings: &LoginSettings,
) -> Result<TokenRecord, String> {
    let endpoint = device_endpoint(meta)?;
    let mut c = BasicClient::new(ClientId::new(client.client_id.clone()))
        .set_device_authorization_url(
            DeviceAuthorizationUrl::new(endpoint.to_owned())
                .map_err(|e| format!("device authorization endpoint: {e}"))?,
        )
        .set_token_uri(token_url(meta)?);
    let (auth, secret) = client_auth(meta, client);
    c = c.set_auth_type(auth);
    if let Some(s) = secret {
        c = c.set_client_secret(ClientSecret::new(s.0.clone()));
    }
    let http = |req| {
        let f = fetch.clone();
        async move { f.oauth2(req).await }
    };
    let mut req = c.exchange_device_code().add_scopes(scopes(scope));
    if let Some(r) = resource {
        req = req.add_extra_param("resource", r.to_owned());
    }
    for (k, v) in &settings.params {
        req = req.add_extra_param(k.clone(), v.clone());
    }
    let details: StandardDeviceAuthorizationResponse = req
        .request_async(&http)
        .await
        .map_err(device_authorization_error)?;
    show_device_code(meta, &details);
    let limit = settings.timeout.min(details.expires_in());
    let mut poll = c.exchange_device_access_token(&details);
    if let Some(r) = resource {
        poll = poll.add_extra_param("resource", r.to_owned());
    }
    let work = poll.request_async(&http, tokio::time::sleep, Some(limit));
    // The crate stops polling at `limit`; this also bounds a poll that is in flight then.
    let grace = limit.saturating_add(Duration::from_secs(35));
    let t = match tokio::time::timeout(grace, work).await {
        Err(_) => None,
        Ok(Err(e)) => match device_poll_error(e, meta) {
            Some(message) => return Err(message),
            None => None, // the code expired
        },
        Ok(Ok(t)) => Some(t),
    };
    let Some(t) = t else {
        return Err(format!(
            "the device login was not completed within {} s (the code expired, or \
             --oauth-timeout)",
            limit.as_secs()
        ));
    };
    info!("logged in to {} (device login)", meta.issuer);
    Ok(token_record(&t, None))
}

/// Why the device authorization request got no device code, for messages.
fn device_authorization_error<E: std::error::Error>(
    e: RequestTokenError<E, oauth2::basic::BasicErrorResponse>,
) -> String {
    match e {
        RequestTokenError::ServerResponse(r) => {
            format!("the device authorization endpoint refused: {}", refusal(&r))
        }
        RequestTokenError::Request(e) => format!("device authorization request failed: {e}"),
        RequestTokenError::Parse(e, _) => {
            format!("the device authorization answer is not valid: {e}")
        }
        RequestTokenError::Other(s) => s,
    }
}

/// Show the user (stderr) where to enter the device code, and log the wait.
fn show_device_code(meta: &AsMeta, details: &StandardDeviceAuthorizationResponse) {
    let uri = details.verification_uri().as_str();
    let code = details.user_code().secret();
    match details.verification_uri_complete() {
        Some(full) => eprintln!(
            "mcp-bridge: to log in to {}, open\n\n  {}\n\nor go to {uri} and enter the code {code}\n",
            meta.issuer,
            full.secret()
        ),
        None => eprintln!(
            "mcp-bridge: to log in to {}, go to\n\n  {uri}\n\nand enter the code {code}\n",
            meta.issuer
        ),
    }
    info!(
        "waiting for the device login at {} (code valid {} s, polling every {} s)",
        meta.issuer,
        details.expires_in().as_secs(),
        details.interval().as_secs()
    );
}

/// Why polling for the device login's token failed, for messages; `None` when the code
/// expired (the caller reports that as a login not completed in time).
fn device_poll_error<E: std::error::Error>(
    e: RequestTokenError<E, oauth2::DeviceCodeErrorResponse>,
    meta: &AsMeta,
) -> Option<String> {
    Some(match e {
        RequestTokenError::ServerResponse(r)
            if *r.error() == DeviceCodeErrorResponseType::ExpiredToken =>
        {
            return None
        }
        RequestTokenError::ServerResponse(r)
            if *r.error() == DeviceCodeErrorResponseType::AccessDenied =>
        {
            format!(
                "the device login was refused at {} (access_denied)",
                meta.issuer
            )
        }
        RequestTokenError::ServerResponse(r) => {
            format!("the token endpoint refused: {}", refusal(&r))
        }
        RequestTokenError::Request(e) => format!("token request failed: {e}"),
        RequestTokenError::Parse(e, _) => {
            format!("the token endpoint's answer is not a token: {e}")
        }
        RequestTokenError::Other(s) => s,
    })
}
