//! The logins with no browser and no person that present a JWT: workload identity (SEP-1933,
//! `--oauth-jwt-bearer-file`: the RFC 7523 JWT-bearer grant with the platform's JWT, read
//! again for every token) and enterprise-managed authorization (SEP-990, `--oauth-idp-*`: the
//! user's ID token exchanged at the enterprise IdP for an ID-JAG, RFC 8693, then the
//! JWT-bearer grant with it). The test authorization server of `oauth` gets the grant at
//! `/token` and plays the IdP at `/idp` (metadata and token exchange); `serve --auth jwt`
//! checks the tokens it issues.

use super::*;
use mcp_bridge::oauth::dpop::Key;
use mcp_bridge::oauth::store::Secret;

pub(super) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

fn refuse(st: &AsState, why: String) -> (u16, Vec<(&'static str, String)>, String) {
    st.errors.lock().unwrap().push(why.clone());
    reply(
        400,
        json!({"error": "invalid_request", "error_description": why}),
    )
}

/// The JWT-bearer grant: a token (no refresh token) for an assertion it knows, with the
/// client's Basic credentials when it sent some (SEP-990's confidential client).
pub(super) fn jwt_bearer(
    st: &AsState,
    key: &TestKey,
    authz: &str,
    f: &HashMap<String, String>,
) -> (u16, Vec<(&'static str, String)>, String) {
    let assertion = f.get("assertion").cloned().unwrap_or_default();
    st.assertions.lock().unwrap().push(assertion.clone());
    if !authz.is_empty() {
        if let Err(why) = client_auth(st, authz, f) {
            return refuse(st, why);
        }
    }
    if let Some(e) = st.assertion_error.lock().unwrap().clone() {
        return reply(
            400,
            json!({"error": e, "error_description": "refused by the test"}),
        );
    }
    if !st.assertions_ok.lock().unwrap().contains(&assertion) {
        return refuse(st, format!("unknown assertion {assertion:?}"));
    }
    let scope = f.get("scope").cloned().unwrap_or_default();
    reply(200, issue(st, key, &scope, true))
}

/// The IdP's token exchange: the ID token it knows, for an ID-JAG the authorization server
/// then takes.
pub(super) fn token_exchange(
    st: &AsState,
    authz: &str,
    f: &HashMap<String, String>,
) -> (u16, Vec<(&'static str, String)>, String) {
    st.exchanges.lock().unwrap().push(f.clone());
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let want = [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:id-jag",
        ),
        (
            "subject_token_type",
            "urn:ietf:params:oauth:token-type:id_token",
        ),
        ("client_id", "idp-client"),
    ];
    for (k, v) in want {
        if get(k) != v {
            return refuse(st, format!("token exchange: {k} = {:?}", get(k)));
        }
    }
    if !authz.is_empty() {
        return refuse(st, "the IdP client is public here".into());
    }
    if get("subject_token") != *st.id_token.lock().unwrap() {
        return reply(400, json!({"error": "invalid_grant"}));
    }
    if get("audience") != st.base || get("resource") != *st.resource.lock().unwrap() {
        return refuse(
            st,
            format!("ID-JAG for {:?} / {:?}", get("audience"), get("resource")),
        );
    }
    let jag = format!(
        "{}.{}.sig",
        b64(b"{\"typ\":\"oauth-id-jag+jwt\"}"),
        random("jag")
    );
    st.assertions_ok.lock().unwrap().push(jag.clone());
    st.secrets.lock().unwrap().push(jag.clone());
    reply(
        200,
        json!({"access_token": jag, "token_type": "N_A",
               "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"}),
    )
}

/// A JWT-shaped workload credential (its content is the test server's business).
fn workload_jwt(st: &AsState, name: &str) -> String {
    let jwt = format!("{}.{}.sig", b64(b"{\"alg\":\"ES256\"}"), random(name));
    st.assertions_ok.lock().unwrap().push(jwt.clone());
    st.secrets.lock().unwrap().push(jwt.clone());
    jwt
}

/// The workload's JWT is read from its file for every token: a rotated file is presented at
/// the next token, no browser is ever started, nothing is registered, and the JWT reaches
/// neither stdout nor the log. A refused JWT is one `login_failed` naming the refusal, and is
/// not presented again by later calls; a new one in the file is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_logs_in_with_its_jwt_read_again_for_every_token() {
    let w = World::start().await;
    let st = &w.auth.state;
    let first = workload_jwt(st, "wl1");
    let file = w.file("workload.jwt", &format!("{first}\n"));
    let flags = ["--oauth-jwt-bearer-file", file.as_str()];
    let mut h = w.host_with(&flags);
    let r = echo(&mut h, 1, "workload");
    assert_eq!(text(&r), "workload", "{r}\n{}", h.log.dump());
    assert_eq!(*st.assertions.lock().unwrap(), vec![first.clone()]);
    assert_eq!(w.auth.count(&st.authorizations), 0);
    assert_eq!(w.auth.count(&st.registrations), 0);
    assert_quiet(&w, &h, &[&r]);
    drop(h);

    let second = workload_jwt(st, "wl2");
    std::fs::write(&file, &second).unwrap();
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut h = w.host_with(&flags);
    let r = echo(&mut h, 2, "rotated");
    assert_eq!(text(&r), "rotated", "{r}\n{}", h.log.dump());
    assert_eq!(*st.assertions.lock().unwrap(), vec![first, second.clone()]);
    assert!(!std::fs::read_to_string(w.login_file())
        .unwrap()
        .contains(&second));
    assert_quiet(&w, &h, &[&r]);
    drop(h);

    std::fs::remove_dir_all(w.oauth_dir()).unwrap();
    *st.assertion_error.lock().unwrap() = Some("invalid_grant".into());
    let mut h = w.host_with(&flags);
    let r = echo(&mut h, 3, "refused");
    assert_eq!(r["error"]["data"]["reason"], "login_failed", "{r}");
    assert!(r.to_string().contains("invalid_grant"), "{r}");
    let presented = st.assertions.lock().unwrap().len();
    let r = echo(&mut h, 4, "again");
    assert_eq!(r["error"]["data"]["reason"], "login_failed", "{r}");
    assert_eq!(
        st.assertions.lock().unwrap().len(),
        presented,
        "a refused JWT was presented again"
    );
    *st.assertion_error.lock().unwrap() = None;
    let third = workload_jwt(st, "wl3");
    std::fs::write(&file, &third).unwrap();
    let r = echo(&mut h, 5, "new jwt");
    assert_eq!(text(&r), "new jwt", "{r}\n{}", h.log.dump());
    assert_eq!(st.assertions.lock().unwrap().last(), Some(&third));
    h.assert_clean_stdout();
    assert_no_server_errors(&w);
}

/// SEP-990: the ID token goes to the IdP's token endpoint (given, or from the IdP's metadata)
/// with the token exchange's parameters (`audience` the authorization server, `resource` the
/// MCP server); the ID-JAG it answers is the JWT-bearer grant's assertion, sent with the
/// confidential client's Basic credentials; the call works and no ID token, ID-JAG or access
/// token reaches stdout or the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enterprise_login_exchanges_the_id_token_for_an_id_jag() {
    let w = World::start().await;
    let st = &w.auth.state;
    let id_token = format!("{}.{}.sig", b64(b"{\"alg\":\"RS256\"}"), random("idt"));
    *st.id_token.lock().unwrap() = id_token.clone();
    st.secrets.lock().unwrap().push(id_token.clone());
    let id_file = w.file("id_token", &id_token);
    let secret = w.client_secret("enterprise-client-secret");
    let endpoint = format!("{}/idp/token", st.base);
    let issuer = format!("{}/idp", st.base);
    for (i, idp) in [
        ["--oauth-idp-token-endpoint", endpoint.as_str()],
        ["--oauth-idp-issuer", issuer.as_str()],
    ]
    .iter()
    .enumerate()
    {
        let _ = std::fs::remove_dir_all(w.oauth_dir());
        let mut flags = vec![
            "--oauth-idp-client-id",
            "idp-client",
            "--oauth-id-token-file",
            id_file.as_str(),
            "--oauth-client-id",
            "m2m",
            "--oauth-client-secret-file",
            secret.as_str(),
        ];
        flags.extend_from_slice(idp);
        let mut h = w.host_with(&flags);
        let r = echo(&mut h, 1, "enterprise");
        assert_eq!(text(&r), "enterprise", "{idp:?}: {r}\n{}", h.log.dump());
        assert_eq!(st.exchanges.lock().unwrap().len(), i + 1, "{idp:?}");
        let jag = st.assertions_ok.lock().unwrap().last().cloned().unwrap();
        assert_eq!(st.assertions.lock().unwrap().last(), Some(&jag), "{idp:?}");
        assert_eq!(w.auth.count(&st.authorizations), 0);
        assert_quiet(&w, &h, &[&r]);
    }
    assert_no_server_errors(&w);
}

/// The RFC 7638 thumbprint of the `jwk` in a DPoP proof's header (None: not a proof).
pub(super) fn proof_key(proof: &str) -> Option<String> {
    let h = proof.split('.').next()?;
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(h)
            .ok()?,
    )
    .ok()?;
    let j = &header["jwk"];
    let canonical = json!({"crv": j["crv"], "kty": j["kty"], "x": j["x"], "y": j["y"]});
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, canonical.to_string().as_bytes());
    Some(b64(d.as_ref()))
}

/// DPoP end to end: serve (`--auth jwt`) lists ES256 in its resource metadata, the
/// authorization server too, so connect proves the token request with a key of the login's
/// and gets a token bound to it (`cnf.jkt`); every request to serve carries the token as
/// `Authorization: DPoP` with a fresh proof, which serve checks (signature, method, URL, token
/// hash, key = binding). The same bound token sent as Bearer, or with the DPoP scheme and no
/// proof, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dpop_bound_token_is_proved_on_every_request_and_checked_by_serve() {
    let w = World::start().await;
    let st = &w.auth.state;
    st.dpop_algs.store(true, Ordering::SeqCst);
    let jwt = workload_jwt(st, "wl");
    let file = w.file("workload.jwt", &jwt);
    let mut h = w.host_with(&["--oauth-jwt-bearer-file", file.as_str()]);
    for i in 1..=3 {
        let r = echo(&mut h, i, "bound");
        assert_eq!(text(&r), "bound", "{r}\n{}", h.log.dump());
    }
    assert_eq!(*st.dpop_seen.lock().unwrap(), vec!["/token".to_owned()]);
    let login = std::fs::read_to_string(w.login_file()).unwrap();
    assert!(login.contains("dpop_key"), "{login}");
    let token = st.issued.lock().unwrap().last().cloned().unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(1).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(claims["cnf"]["jkt"].is_string(), "{claims}");
    // Requests made here: the bound token with no proof (as Bearer and as DPoP), with a
    // proof by another key, with a proof by the login's own key (kept in its file), and that
    // proof again.
    let own = Key::from_pkcs8(&Secret(
        serde_json::from_str::<Value>(&login).unwrap()["dpop_key"]
            .as_str()
            .unwrap()
            .to_owned(),
    ))
    .unwrap();
    let proof = |k: &Key| k.proof("POST", &w.url, Some(&token), None).unwrap();
    let stranger = Key::generate().unwrap();
    let good = proof(&own);
    let cases = [
        ("Bearer", None, 401, "invalid_token"),
        ("DPoP", None, 401, "invalid_dpop_proof"),
        ("DPoP", Some(proof(&stranger)), 401, "another key"),
        ("DPoP", Some(good.clone()), 200, ""),
        ("DPoP", Some(good), 401, "used before"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    for (scheme, p, status, why) in cases {
        let mut req = reqwest::Client::new()
            .post(&w.url)
            .header("authorization", format!("{scheme} {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list")
            .body(body.to_string());
        if let Some(p) = &p {
            req = req.header("dpop", p);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), status, "{scheme} {p:?}");
        if status == 401 {
            let c = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
            assert!(c.contains(why), "{scheme}: {c}");
        }
    }
    assert_quiet(&w, &h, &[]);
    assert_no_server_errors(&w);
}

/// An authorization server that offers DPoP, in front of a resource that publishes no
/// metadata and challenges with Bearer only (a 2025-03-26 server: `serve` behind the
/// authorization server's origin): `--oauth-dpop auto` asks for a plain Bearer token (no
/// proof at the token endpoint) and the call works; a DPoP-bound token would be refused by
/// such a resource on every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dpop_is_used_only_where_the_resource_takes_it() {
    let w = World::start_legacy().await;
    let st = &w.auth.state;
    st.lax_extra.store(true, Ordering::SeqCst);
    *st.challenge.lock().unwrap() = Some("Bearer".into());
    st.dpop_algs.store(true, Ordering::SeqCst);
    let jwt = workload_jwt(st, "wl");
    let file = w.file("workload.jwt", &jwt);
    let mut h = w.host_with(&["--oauth-jwt-bearer-file", file.as_str()]);
    let r = echo(&mut h, 1, "bearer");
    assert_eq!(text(&r), "bearer", "{r}\n{}", h.log.dump());
    assert_eq!(*st.assertions.lock().unwrap(), vec![jwt]);
    assert!(
        st.dpop_seen.lock().unwrap().is_empty(),
        "DPoP proofs sent for a Bearer-only resource: {:?}",
        st.dpop_seen.lock().unwrap()
    );
    let login = std::fs::read_to_string(w.login_file()).unwrap();
    assert!(!login.contains("dpop_key"), "{login}");
    assert_quiet(&w, &h, &[&r]);
    assert_no_server_errors(&w);
}
