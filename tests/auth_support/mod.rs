//! Shared pieces of the `auth_*` tests: start the real binary with any log level and
//! environment, mint real JWTs with keys made at test time (aws-lc-rs), and serve a JWKS over
//! HTTP from the test. Every wait is bounded.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-bridge")
}

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn log_text(log: &Log) -> String {
    log.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
}

/// A running `mcp-bridge serve`.
pub struct Bridge {
    pub child: Child,
    pub addr: SocketAddr,
    /// The MCP endpoint URL as logged (`http(s)://ADDR/mcp`).
    pub url: String,
    pub log: Log,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(level: &str, args: &[&str], envs: &[(&str, &str)]) -> (Child, Log) {
    let mut cmd = Command::new(bin());
    cmd.arg("--log-level")
        .arg(level)
        .arg("serve")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("MCP_BRIDGE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn mcp-bridge");
    let log: Log = Arc::default();
    let stderr = child.stderr.take().expect("stderr");
    let l2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            l2.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    (child, log)
}

impl Bridge {
    /// Start and wait for the `listening on` line.
    pub async fn start(level: &str, args: &[&str], envs: &[(&str, &str)]) -> Bridge {
        let (mut child, log) = spawn(level, args, envs);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let found = log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find_map(|l| l.split("listening on ").nth(1).map(str::to_owned));
            if let Some(url) = found {
                let url = url.trim().to_owned();
                let rest = url.split("://").nth(1).expect("scheme");
                let addr = rest.split('/').next().expect("addr").parse().expect("addr");
                return Bridge {
                    child,
                    addr,
                    url,
                    log,
                };
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("mcp-bridge exited early ({st}); log:\n{}", log_text(&log));
            }
            assert!(
                Instant::now() < until,
                "no address; log:\n{}",
                log_text(&log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn origin(&self) -> String {
        let scheme = self.url.split("://").next().unwrap_or("http");
        format!("{scheme}://{}", self.addr)
    }

    pub fn log(&self) -> String {
        log_text(&self.log)
    }

    /// Wait (bounded) for a log line containing `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.log().contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }
}

/// Run `serve` expecting it to refuse to start: (exit code, stderr).
pub fn run_refused(args: &[&str]) -> (Option<i32>, String) {
    let (mut child, log) = spawn("info", args, &[]);
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            std::thread::sleep(Duration::from_millis(100));
            return (st.code(), log_text(&log));
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not exit; log:\n{}", log_text(&log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A 2025 `initialize` body (any authenticated request to the endpoint).
pub fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "auth-test", "version": "1"}}})
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// POST initialize with an optional bearer token.
pub async fn post_init(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut rb = http()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize_body());
    if let Some(t) = token {
        rb = rb.header("authorization", format!("Bearer {t}"));
    }
    rb.send().await.expect("POST")
}

pub fn www_auth(r: &reqwest::Response) -> String {
    r.headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// JWTs
// ---------------------------------------------------------------------------------------------

pub fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A signing key made at test time, with its public JWK.
pub enum Signer {
    Es256(EcdsaKeyPair),
    Rs256(aws_lc_rs::rsa::KeyPair),
    EdDsa(Ed25519KeyPair),
}

pub struct TestKey {
    pub kid: String,
    pub signer: Signer,
}

impl TestKey {
    pub fn es256(kid: &str) -> TestKey {
        let k = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("p256");
        TestKey {
            kid: kid.into(),
            signer: Signer::Es256(k),
        }
    }
    pub fn rs256(kid: &str) -> TestKey {
        let k = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("rsa");
        TestKey {
            kid: kid.into(),
            signer: Signer::Rs256(k),
        }
    }
    pub fn eddsa(kid: &str) -> TestKey {
        let k = Ed25519KeyPair::generate().expect("ed25519");
        TestKey {
            kid: kid.into(),
            signer: Signer::EdDsa(k),
        }
    }

    pub fn alg(&self) -> &'static str {
        match self.signer {
            Signer::Es256(_) => "ES256",
            Signer::Rs256(_) => "RS256",
            Signer::EdDsa(_) => "EdDSA",
        }
    }

    /// The public JWK.
    pub fn jwk(&self) -> Value {
        match &self.signer {
            Signer::Es256(k) => {
                let p = k.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
                       "x": b64(&p[1..33]), "y": b64(&p[33..65])})
            }
            Signer::Rs256(k) => {
                let p = k.public_key();
                json!({"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                       "n": b64(p.modulus().big_endian_without_leading_zero()),
                       "e": b64(p.exponent().big_endian_without_leading_zero())})
            }
            Signer::EdDsa(k) => {
                json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "use": "sig", "alg": "EdDSA",
                       "x": b64(k.public_key().as_ref())})
            }
        }
    }

    /// The public key bytes (for the HMAC-with-public-key confusion attack).
    pub fn public_bytes(&self) -> Vec<u8> {
        match &self.signer {
            Signer::Es256(k) => k.public_key().as_ref().to_vec(),
            Signer::Rs256(k) => k.public_key().as_ref().to_vec(),
            Signer::EdDsa(k) => k.public_key().as_ref().to_vec(),
        }
    }

    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match &self.signer {
            Signer::Es256(k) => k.sign(&rng, msg).expect("sign").as_ref().to_vec(),
            Signer::Rs256(k) => {
                let mut sig = vec![0u8; k.public_modulus_len()];
                k.sign(&signature::RSA_PKCS1_SHA256, &rng, msg, &mut sig)
                    .expect("sign");
                sig
            }
            Signer::EdDsa(k) => k.sign(msg).as_ref().to_vec(),
        }
    }

    /// A signed JWT with this key's `alg` and `kid`.
    pub fn token(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "typ": "at+jwt", "kid": self.kid});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = self.sign(input.as_bytes());
        format!("{input}.{}", b64(&sig))
    }
}

/// An unsigned JWT with any header (for `alg: none` and HMAC confusion tests).
pub fn token_with_header(header: &Value, claims: &Value, sig: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(sig)
    )
}

pub fn hs256(secret: &[u8], input: &str) -> Vec<u8> {
    let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret);
    aws_lc_rs::hmac::sign(&k, input.as_bytes())
        .as_ref()
        .to_vec()
}

pub fn jwks(keys: &[&TestKey]) -> String {
    json!({"keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()}).to_string()
}

// ---------------------------------------------------------------------------------------------
// A JWKS over HTTP, served by the test
// ---------------------------------------------------------------------------------------------

/// A tiny HTTP/1.1 server answering every GET with the current document.
pub struct JwksServer {
    pub url: String,
    pub doc: Arc<Mutex<String>>,
    pub hits: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl JwksServer {
    pub async fn start(doc: String) -> JwksServer {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/jwks.json", l.local_addr().expect("addr"));
        let doc = Arc::new(Mutex::new(doc));
        let hits = Arc::new(Mutex::new(0usize));
        let (d2, h2) = (doc.clone(), hits.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (d, h) = (d2.clone(), h2.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await
                        {
                            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                            _ => return,
                        }
                    }
                    *h.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                    let body = d.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        JwksServer {
            url,
            doc,
            hits,
            task,
        }
    }

    pub fn set(&self, doc: String) {
        *self.doc.lock().unwrap_or_else(|p| p.into_inner()) = doc;
    }

    pub fn hits(&self) -> usize {
        *self.hits.lock().unwrap_or_else(|p| p.into_inner())
    }
}
