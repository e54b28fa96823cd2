//! The HTTP face's authentication hook: Protected Resource Metadata (RFC 9728) at the root and
//! path-inserted well-known URLs, CORS preflight for allowed origins, and the bearer check on
//! every method of the MCP endpoint with RFC 6750 `WWW-Authenticate` answers. The caller's
//! `Authorization` header is removed from the request once checked, so nothing later can pass
//! it on. Nothing here logs a token or header value.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use tracing::{debug, info_span, Span};

use super::{Auth, Caller, Endpoint, Refusal, WELL_KNOWN};
use crate::http_util::{self, status_only, Body};
use crate::metrics::Metrics;

/// What the hook decided.
pub enum Front {
    /// Answer with this response; the request goes no further.
    Respond(Response<Body>),
    /// Go on to the route; the caller when authenticated.
    Pass(Option<Caller>),
}

/// Request headers a cross-origin MCP client may send.
const ALLOW_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
    "dpop",
];
const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const EXPOSE_HEADERS: &str = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate";

fn header_allowed(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    ALLOW_HEADERS.contains(&n.as_str()) || n.starts_with("mcp-param-")
}

/// A span naming the caller for the request's log lines.
pub fn span(caller: &Option<Caller>) -> Span {
    match caller {
        Some(c) => info_span!("caller", id = %c.name),
        None => Span::none(),
    }
}

/// Run before routing; `is_mcp` is true on the MCP endpoint path.
pub async fn front<B>(
    cfg: &dyn Endpoint,
    metrics: &Metrics,
    req: &mut Request<B>,
    is_mcp: bool,
) -> Front {
    let path = req.uri().path();
    if let Some(r) = metadata(cfg, req.method(), path) {
        return Front::Respond(r);
    }
    if !is_mcp {
        return Front::Pass(None);
    }
    if req.method() == Method::OPTIONS {
        if let Some(r) = preflight(cfg, req.headers()) {
            return Front::Respond(r);
        }
    }
    let Some(auth) = cfg.auth_slot().current() else {
        return Front::Pass(None);
    };
    let result = check(&auth, req).await;
    // Whatever happened, the credential goes no further than this function.
    req.headers_mut().remove(header::AUTHORIZATION);
    match result {
        Ok(c) => {
            metrics.auth_success(&c.label);
            Front::Pass(Some(c))
        }
        Err(r) => {
            metrics.auth_failure(r.reason);
            debug!(reason = r.reason, "request refused: {}", r.description);
            Front::Respond(refuse(&auth, &r))
        }
    }
}

/// Take the bearer token out of the request and check it.
async fn check<B>(auth: &Auth, req: &Request<B>) -> Result<Caller, Refusal> {
    if let Some(q) = req.uri().query() {
        let in_query = q.split('&').any(|kv| {
            let k = kv.split('=').next().unwrap_or("");
            k.eq_ignore_ascii_case("access_token")
        });
        if in_query {
            return Err(Refusal::new(
                "query_token",
                Some("invalid_request"),
                "Access tokens are accepted only in the Authorization header, never in the URL",
            ));
        }
    }
    let mut values = req.headers().get_all(header::AUTHORIZATION).iter();
    let (Some(v), None) = (values.next(), values.next()) else {
        if req.headers().contains_key(header::AUTHORIZATION) {
            return Err(Refusal::new(
                "malformed",
                Some("invalid_request"),
                "Send exactly one Authorization header",
            ));
        }
        return Err(Refusal::new("missing", None, "Authorization required"));
    };
    let s = v.to_str().map_err(|_| {
        Refusal::new(
            "malformed",
            Some("invalid_request"),
            "Malformed Authorization header",
        )
    })?;
    let (scheme, token) = s.trim().split_once(' ').unwrap_or((s, ""));
    let dpop = scheme.eq_ignore_ascii_case("dpop") && auth.takes_dpop();
    if !scheme.eq_ignore_ascii_case("bearer") && !dpop {
        return Err(Refusal::new(
            "scheme",
            Some("invalid_request"),
            "Use the Bearer authentication scheme",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(Refusal::new("missing", None, "Authorization required"));
    }
    if !dpop {
        return auth.verify(token, None).await;
    }
    let mut proofs = req.headers().get_all("dpop").iter();
    let (Some(p), None) = (proofs.next(), proofs.next()) else {
        return Err(Refusal::new(
            "dpop_proof",
            Some("invalid_dpop_proof"),
            "Send exactly one DPoP proof with a DPoP-bound token",
        ));
    };
    let proof = p.to_str().map_err(|_| {
        Refusal::new(
            "dpop_proof",
            Some("invalid_dpop_proof"),
            "Malformed DPoP header",
        )
    })?;
    auth.verify(token, Some((proof, req.method().as_str())))
        .await
}

fn quoted(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The `WWW-Authenticate` value for a refusal (RFC 6750 §3, MCP authorization); a refused
/// DPoP proof is challenged with the `DPoP` scheme and its algorithms (RFC 9449 §7.1).
pub fn challenge(auth: &Auth, r: &Refusal) -> String {
    let dpop = r.error == Some("invalid_dpop_proof");
    let mut parts: Vec<String> = Vec::new();
    if dpop {
        parts.push(format!("algs=\"{}\"", super::dpop::ALGS.join(" ")));
    }
    if let Some(e) = r.error {
        parts.push(format!("error=\"{e}\""));
        parts.push(format!("error_description=\"{}\"", quoted(r.description)));
    }
    if let Some(m) = &auth.metadata {
        parts.push(format!("resource_metadata=\"{}\"", quoted(&m.url)));
    }
    if !auth.scopes.is_empty() {
        parts.push(format!("scope=\"{}\"", quoted(&auth.scopes.join(" "))));
    }
    let scheme = if dpop { "DPoP" } else { "Bearer" };
    if parts.is_empty() {
        scheme.into()
    } else {
        format!("{scheme} {}", parts.join(", "))
    }
}

fn refuse(auth: &Auth, r: &Refusal) -> Response<Body> {
    let status = match r.error {
        Some("insufficient_scope") => StatusCode::FORBIDDEN,
        Some("invalid_request") if r.reason == "query_token" => StatusCode::BAD_REQUEST,
        _ => StatusCode::UNAUTHORIZED,
    };
    let body = serde_json::json!({
        "error": r.error.unwrap_or("unauthorized"),
        "error_description": r.description,
    });
    let mut resp = http_util::json(status, Bytes::from(body.to_string()));
    *resp.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(&challenge(auth, r)) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The metadata document at `/.well-known/oauth-protected-resource` and its path-inserted form.
fn metadata(cfg: &dyn Endpoint, method: &Method, path: &str) -> Option<Response<Body>> {
    let rest = path.strip_prefix(WELL_KNOWN)?;
    let auth = cfg.auth_slot().current()?;
    let m = auth.metadata.as_ref()?;
    if !(rest.is_empty() || rest == "/" || rest == cfg.mcp_path() || rest == m.resource_path) {
        return None;
    }
    Some(match *method {
        Method::GET | Method::HEAD => {
            let mut r = http_util::json(StatusCode::OK, m.body.clone());
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            );
            r
        }
        Method::OPTIONS => {
            let mut r = status_only(StatusCode::NO_CONTENT);
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            r
        }
        _ => {
            let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED);
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, OPTIONS"),
            );
            r
        }
    })
}

/// A CORS preflight for the MCP endpoint: answered only for allowed origins (others were
/// already refused by the Origin guard) and only for methods and headers MCP uses.
fn preflight(cfg: &dyn Endpoint, h: &HeaderMap) -> Option<Response<Body>> {
    let origin = h.get(header::ORIGIN)?;
    let want = h.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
    let o = origin.to_str().ok()?;
    if !cfg.origin_allowed(o) {
        return Some(status_only(StatusCode::FORBIDDEN));
    }
    let method_ok = matches!(want.as_bytes(), b"GET" | b"POST" | b"DELETE");
    let headers_ok = h
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .map(|v| {
            v.to_str()
                .map(|s| s.split(',').all(header_allowed))
                .unwrap_or(false)
        })
        .unwrap_or(true);
    if !method_ok || !headers_ok {
        return Some(status_only(StatusCode::FORBIDDEN));
    }
    let mut r = status_only(StatusCode::NO_CONTENT);
    let hm = r.headers_mut();
    hm.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    hm.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    if let Some(req_h) = h.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        hm.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, req_h.clone());
    }
    hm.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    hm.insert(header::VARY, HeaderValue::from_static("Origin"));
    Some(r)
}

/// Add CORS response headers for an allowed cross-origin request.
pub fn cors(cfg: &dyn Endpoint, origin: Option<&HeaderValue>, resp: &mut Response<Body>) {
    let Some(origin) = origin else { return };
    let Ok(o) = origin.to_str() else { return };
    if !cfg.origin_allowed(o)
        || resp
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
    {
        return;
    }
    let hm = resp.headers_mut();
    hm.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    hm.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    hm.append(header::VARY, HeaderValue::from_static("Origin"));
}
