//! `connect`'s OAuth login end to end: a host drives `connect` against `serve --auth jwt`
//! (which publishes its Protected Resource Metadata), whose tokens come from a tiny
//! authorization server written here (metadata, dynamic registration, an `/authorize` that
//! redirects straight back with a code, a `/token` that checks the PKCE verifier and the
//! `resource`, and refresh). `$BROWSER` is a script that follows the redirect with curl.
//! Checked: the call gets its answer; the login is kept private (0700 folder, 0600 file) and
//! out of the log; a second run uses the stored login; an expired or rejected token is
//! refreshed; a refused refresh starts a new login; a login that cannot finish is one clear
//! error for the call that needed it.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use sha2::Digest;

use support::*;

const T: Duration = Duration::from_secs(60);

/// What the authorization server saw and issued.
#[derive(Default)]
struct AsState {
    base: String,
    /// The MCP server's canonical URL: the `resource` and the tokens' audience.
    resource: Mutex<String>,
    authorizations: AtomicUsize,
    refreshes: AtomicUsize,
    registrations: AtomicUsize,
    /// Refuse refresh tokens (`invalid_grant`).
    refuse_refresh: AtomicBool,
    /// code -> (PKCE challenge, redirect_uri)
    codes: Mutex<HashMap<String, (String, String)>>,
    refresh_tokens: Mutex<Vec<String>>,
    /// Every access and refresh token handed out (none may reach a log).
    issued: Mutex<Vec<String>>,
    /// What went wrong at the server (the test asserts it stays empty).
    errors: Mutex<Vec<String>>,
}

struct AuthServer {
    state: Arc<AsState>,
}

fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

fn reply(status: u16, body: Value) -> (u16, Vec<(&'static str, String)>, String) {
    (
        status,
        vec![("content-type", "application/json".into())],
        body.to_string(),
    )
}

impl AuthServer {
    async fn start(key: TestKey) -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(AsState {
            base,
            ..AsState::default()
        });
        let key = Arc::new(key);
        let (st, k) = (state.clone(), key.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let (st, k) = (st.clone(), k.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (st, k) = (st.clone(), k.clone());
                            async move {
                                use http_body_util::BodyExt;
                                let path = req.uri().path().to_owned();
                                let query = req.uri().query().unwrap_or("").to_owned();
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let (status, headers, text) =
                                    answer(&st, &k, &path, query.as_bytes(), &body);
                                let mut r = hyper::Response::new(http_body_util::Full::new(
                                    bytes::Bytes::from(text),
                                ));
                                *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                                for (name, v) in headers {
                                    r.headers_mut().insert(name, v.parse().unwrap());
                                }
                                Ok::<_, std::convert::Infallible>(r)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                        .await;
                });
            }
        });
        AuthServer { state }
    }

    fn count(&self, c: &AtomicUsize) -> usize {
        c.load(Ordering::SeqCst)
    }
}

fn issue(st: &AsState, key: &TestKey) -> Value {
    let t = now();
    let access = key.token(&json!({
        "iss": st.base, "sub": "user-1", "aud": *st.resource.lock().unwrap(),
        "iat": t, "nbf": t - 5, "exp": t + 600, "scope": "mcp:tools",
    }));
    let mut rnd = [0u8; 16];
    getrandom::fill(&mut rnd).unwrap();
    let refresh = format!("rt-{}", b64(&rnd));
    st.refresh_tokens.lock().unwrap().push(refresh.clone());
    st.issued
        .lock()
        .unwrap()
        .extend([access.clone(), refresh.clone()]);
    json!({"access_token": access, "token_type": "Bearer", "expires_in": 3600,
           "refresh_token": refresh, "scope": "mcp:tools"})
}

fn answer(
    st: &AsState,
    key: &TestKey,
    path: &str,
    query: &[u8],
    body: &[u8],
) -> (u16, Vec<(&'static str, String)>, String) {
    let fail = |why: String| {
        st.errors.lock().unwrap().push(why.clone());
        reply(
            400,
            json!({"error": "invalid_request", "error_description": why}),
        )
    };
    match path {
        "/.well-known/oauth-authorization-server" => reply(
            200,
            json!({
                "issuer": st.base,
                "authorization_endpoint": format!("{}/authorize", st.base),
                "token_endpoint": format!("{}/token", st.base),
                "registration_endpoint": format!("{}/register", st.base),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
            }),
        ),
        "/register" => {
            let doc: Value = serde_json::from_slice(body).unwrap_or_default();
            if doc["token_endpoint_auth_method"] != "none" || !doc["redirect_uris"].is_array() {
                return fail(format!("bad registration {doc}"));
            }
            let n = st.registrations.fetch_add(1, Ordering::SeqCst) + 1;
            reply(
                201,
                json!({"client_id": format!("client-{n}"), "redirect_uris": doc["redirect_uris"],
                       "token_endpoint_auth_method": "none"}),
            )
        }
        "/authorize" => {
            let q = form(query);
            let get = |k: &str| q.get(k).cloned().unwrap_or_default();
            if get("response_type") != "code" || get("code_challenge_method") != "S256" {
                return fail(format!("bad authorization request {q:?}"));
            }
            let resource = st.resource.lock().unwrap().clone();
            if get("resource") != resource {
                return fail(format!("resource {:?} != {resource:?}", get("resource")));
            }
            if get("extra") != "yes" {
                return fail("the --oauth-param did not arrive".into());
            }
            st.authorizations.fetch_add(1, Ordering::SeqCst);
            let code = format!("code-{}", st.authorizations.load(Ordering::SeqCst));
            st.codes
                .lock()
                .unwrap()
                .insert(code.clone(), (get("code_challenge"), get("redirect_uri")));
            let mut loc = url::Url::parse(&get("redirect_uri")).unwrap();
            loc.query_pairs_mut()
                .append_pair("code", &code)
                .append_pair("state", &get("state"));
            (302, vec![("location", loc.to_string())], String::new())
        }
        "/token" => {
            let f = form(body);
            let get = |k: &str| f.get(k).cloned().unwrap_or_default();
            if get("resource") != *st.resource.lock().unwrap() {
                return fail(format!("token resource {:?}", get("resource")));
            }
            match get("grant_type").as_str() {
                "authorization_code" => {
                    let Some((challenge, redirect)) = st.codes.lock().unwrap().remove(&get("code"))
                    else {
                        return reply(400, json!({"error": "invalid_grant"}));
                    };
                    let digest = sha2::Sha256::digest(get("code_verifier").as_bytes());
                    let want = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
                    if want != challenge || redirect != get("redirect_uri") {
                        return fail("PKCE verifier or redirect_uri mismatch".into());
                    }
                    reply(200, issue(st, key))
                }
                "refresh_token" => {
                    let known = st
                        .refresh_tokens
                        .lock()
                        .unwrap()
                        .contains(&get("refresh_token"));
                    if !known || st.refuse_refresh.load(Ordering::SeqCst) {
                        return reply(400, json!({"error": "invalid_grant"}));
                    }
                    st.refreshes.fetch_add(1, Ordering::SeqCst);
                    reply(200, issue(st, key))
                }
                other => fail(format!("grant_type {other:?}")),
            }
        }
        _ => (404, vec![], String::new()),
    }
}

/// A `$BROWSER` that follows the authorization redirect to the callback.
fn browser(dir: &Path) -> PathBuf {
    let p = dir.join("browser.sh");
    std::fs::write(
        &p,
        "#!/bin/sh\nexec curl -sfL --max-time 30 \"$1\" >/dev/null\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

struct World {
    auth: AuthServer,
    serve: Bridge,
    _jwks: JwksServer,
    dir: tempfile::TempDir,
}

impl World {
    async fn start() -> World {
        let key = TestKey::es256("as-key");
        let jwks_server = JwksServer::start(jwks(&[&key])).await;
        let auth = AuthServer::start(key).await;
        let serve = Bridge::builder()
            .log_level("debug")
            .serve()
            .args([
                "--demo",
                "--port",
                "0",
                "--auth",
                "jwt",
                "--jwks-url",
                &jwks_server.url,
                "--issuer",
                &auth.state.base,
            ])
            .spawn()
            .await;
        // The resource is known once `serve` listens; nothing asks for a token before this.
        *auth.state.resource.lock().unwrap() = serve.url.clone();
        World {
            auth,
            serve,
            _jwks: jwks_server,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn oauth_dir(&self) -> PathBuf {
        self.dir.path().join("logins")
    }

    fn host(&self) -> Host {
        let b = browser(self.dir.path());
        let d = self.oauth_dir();
        Host::start_env(
            &self.serve.url,
            &[
                "--oauth-dir",
                d.to_str().unwrap(),
                "--oauth-param",
                "extra=yes",
            ],
            &[("BROWSER", b.to_str().unwrap())],
        )
    }

    /// The one login file (beside it: its lock file).
    fn login_file(&self) -> PathBuf {
        let files: Vec<_> = std::fs::read_dir(self.oauth_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files[0].clone()
    }

    fn edit_login(&self, f: impl FnOnce(&mut Value)) {
        let p = self.login_file();
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&p, v.to_string()).unwrap();
    }
}

fn echo(h: &mut Host, id: i64, text: &str) -> Value {
    h.request(
        json!(id),
        "tools/call",
        modern_call_params("echo", json!({"text": text})),
    );
    h.response(&json!(id), T)
}

fn assert_no_secret(w: &World, h: &Host) {
    let log = h.log.dump();
    for t in w.auth.state.issued.lock().unwrap().iter() {
        assert!(
            !log.contains(t.as_str()),
            "a token in connect's log:\n{log}"
        );
    }
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_store_reuse_refresh_and_relogin() {
    let w = World::start().await;

    // 1. The first call logs in (metadata from serve's 401, registration, browser, code).
    let mut h = w.host();
    let r = echo(&mut h, 1, "first");
    assert_eq!(text(&r), "first", "{r}\n{}", h.log.dump());
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_eq!(w.auth.count(&w.auth.state.registrations), 1);
    let r = echo(&mut h, 2, "again");
    assert_eq!(text(&r), "again", "{r}");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_no_secret(&w, &h);
    drop(h);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.oauth_dir()), 0o700);
    assert_eq!(mode(&w.login_file()), 0o600);
    let stored = std::fs::read_to_string(w.login_file()).unwrap();
    let v: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(v["version"], 1);
    assert!(v["token"]["expires_at"].as_u64().unwrap() > now() as u64);

    // 2. A second run uses the stored login: no authorization, no refresh.
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 3, "stored")), "stored");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 0);
    drop(h);

    // 3. A token past its expiry is refreshed before it is sent.
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 4, "refreshed")), "refreshed");
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 1);
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);

    // 4. A token the server rejects (401) is refreshed and the call retried, in the same run.
    drop(h);
    w.edit_login(|v| v["token"]["access_token"] = json!("not.a.jwt"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 5, "retried")), "retried");
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 2);
    drop(h);

    // 5. A refused refresh (invalid_grant) drops the token and logs in again.
    w.auth.state.refuse_refresh.store(true, Ordering::SeqCst);
    w.edit_login(|v| v["token"]["access_token"] = json!("not.a.jwt"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 6, "relogin")), "relogin");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 2);
    assert_eq!(
        w.auth.count(&w.auth.state.registrations),
        1,
        "the registration is reused"
    );
    assert_no_secret(&w, &h);
    assert!(
        w.auth.state.errors.lock().unwrap().is_empty(),
        "{:?}",
        w.auth.state.errors.lock().unwrap()
    );
}

/// Copies of connect started together (hosts do this) log in once: one holds the login lock,
/// registers and opens the browser, the others wait and use its tokens; and a token that two
/// copies see expire is refreshed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_started_together_log_in_and_refresh_once() {
    let w = World::start().await;
    let mut hosts: Vec<Host> = (0..3).map(|_| w.host()).collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        h.request(
            json!(i),
            "tools/call",
            modern_call_params("echo", json!({"text": format!("copy {i}")})),
        );
    }
    for (i, h) in hosts.iter_mut().enumerate() {
        let r = h.response(&json!(i), T);
        assert_eq!(text(&r), format!("copy {i}"), "{r}\n{}", h.log.dump());
        assert_no_secret(&w, h);
    }
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1, "one login");
    assert_eq!(
        w.auth.count(&w.auth.state.registrations),
        1,
        "one registration"
    );
    drop(hosts);

    // The stored token expired: copies started together refresh it once.
    w.edit_login(|v| v["token"]["expires_at"] = json!(now() - 10));
    let mut hosts: Vec<Host> = (0..3).map(|_| w.host()).collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        h.request(
            json!(i),
            "tools/call",
            modern_call_params("echo", json!({"text": "again"})),
        );
    }
    for (i, h) in hosts.iter_mut().enumerate() {
        assert_eq!(text(&h.response(&json!(i), T)), "again");
    }
    assert_eq!(w.auth.count(&w.auth.state.refreshes), 1, "one refresh");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
}

/// `serve --upstream` (a daemon) uses a login `auth login` kept, never a browser: with the
/// login its clients' calls reach the protected server; without it they get an error that
/// says how to log in. The same from a config file's `[servers.NAME.oauth]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_upstream_uses_a_kept_login_and_never_a_browser() {
    let w = World::start().await;
    let d = w.oauth_dir();
    let b = browser(w.dir.path());
    let (url, dir, br) = (w.serve.url.clone(), d.clone(), b.clone());
    let out = tokio::task::spawn_blocking(move || {
        Bridge::builder()
            .sub(["auth", "login", &url, "--oauth-param", "extra=yes"])
            .arg("--oauth-dir")
            .arg(dir.as_os_str())
            .env("BROWSER", br.as_os_str())
            .output()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let front = Bridge::builder()
        .serve()
        .args(["--port", "0", "--upstream", &w.serve.url, "--oauth-dir"])
        .arg(d.as_os_str())
        .env("BROWSER", "/bin/false")
        .spawn()
        .await;
    let c = client();
    let r = call_modern(&c, &front.url, json!(1), "echo", json!({"text": "via"})).await;
    assert_eq!(r.text(), "via", "{r:?}\n{}", front.log.dump());
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    for t in w.auth.state.issued.lock().unwrap().iter() {
        assert!(
            !front.log.dump().contains(t.as_str()),
            "a token in serve's log"
        );
    }
    drop(front);

    // Logged out: the daemon says how to log in instead of opening a browser.
    std::fs::remove_dir_all(&d).unwrap();
    let conf = write(
        w.dir.path(),
        "front.toml",
        &format!(
            "[servers.far]\nurl = {:?}\n[servers.far.oauth]\nenabled = true\ndir = {:?}\n",
            w.serve.url,
            d.to_str().unwrap()
        ),
    );
    let front = daemon(&conf).await;
    let r = call_modern(
        &c,
        &server_url(&front, "far"),
        json!(2),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    let msg = r.error()["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("auth login"), "{r:?}\n{}", front.log.dump());
    assert_eq!(
        w.auth.count(&w.auth.state.authorizations),
        1,
        "no login by the daemon"
    );
}

/// `mcp-bridge auth login` logs in outside the host (connect then uses the login); `auth
/// status` shows it (never its tokens); `auth logout` removes it, and the next run logs in
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_login_status_and_logout_work_outside_the_host() {
    let w = World::start().await;
    let d = w.oauth_dir();
    let b = browser(w.dir.path());
    let state = w.auth.state.clone();
    let auth = |words: &[&str]| {
        let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let (d, b) = (d.clone(), b.clone());
        let (words, state) = (format!("{words:?}"), state.clone());
        async move {
            // Off the runtime's workers: the authorization server runs on them.
            let out = tokio::task::spawn_blocking(move || {
                Bridge::builder()
                    .sub(["auth"])
                    .args(&args)
                    .arg("--oauth-dir")
                    .arg(d.as_os_str())
                    .env("BROWSER", b.as_os_str())
                    .output()
            })
            .await
            .unwrap();
            assert!(out.status.success(), "{words}: {out:?}");
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            for t in state.issued.lock().unwrap().iter() {
                assert!(!stdout.contains(t.as_str()), "a token on stdout:\n{stdout}");
                assert!(!stderr.contains(t.as_str()), "a token on stderr:\n{stderr}");
            }
            stdout
        }
    };
    assert!(auth(&["login", &w.serve.url, "--oauth-param", "extra=yes"])
        .await
        .starts_with("logged in to"));
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 1);
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 1, "in")), "in");
    assert_eq!(
        w.auth.count(&w.auth.state.authorizations),
        1,
        "the kept login"
    );
    drop(h);
    let status = auth(&["status"]).await;
    assert!(
        status.starts_with(&format!("{}\n", w.serve.url)),
        "{status}"
    );
    assert!(status.contains("can refresh"), "{status}");
    assert!(auth(&["status", "https://elsewhere.example/mcp"])
        .await
        .starts_with("no login kept"));
    assert!(auth(&["logout", &w.serve.url])
        .await
        .starts_with("1 login removed"));
    assert!(auth(&["status"]).await.starts_with("no logins kept"));
    let mut h = w.host();
    assert_eq!(text(&echo(&mut h, 2, "again")), "again");
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_that_cannot_finish_is_one_clear_error() {
    let w = World::start().await;
    let d = w.oauth_dir();
    // No browser: nobody follows the URL, so the bounded wait ends.
    let mut h = Host::start(
        &w.serve.url,
        &[
            "--oauth-dir",
            d.to_str().unwrap(),
            "--no-browser",
            "--oauth-timeout",
            "1s",
        ],
    );
    let r = echo(&mut h, 1, "x");
    assert_eq!(r["error"]["data"]["reason"], "login_failed", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("--oauth-timeout"), "{msg}");
    assert!(
        h.log.wait_find("/authorize?").is_some(),
        "the URL is printed on stderr:\n{}",
        h.log.dump()
    );
    assert_eq!(w.auth.count(&w.auth.state.authorizations), 0);
    h.assert_clean_stdout();
}
