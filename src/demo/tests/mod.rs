//! End-to-end tests of the demo server: a [`Client`] drives [`serve`] over in-memory pipes
//! the way a bridge drives the child, line by line. Grouped by job like the server itself:
//! [`lifecycle`] (eras, discovery, the catalog, malformed input), [`tools`] (the tools and
//! logging), [`flows`] (client input in both eras, listens).

mod flows;
mod lifecycle;
mod tools;

use std::io;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{duplex, AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;

use super::{serve, DemoMode};
use mcp_bridge::protocol::Era;

const WAIT: Duration = Duration::from_secs(5);

/// A test client talking to `serve` over in-memory pipes.
struct Client {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    server: JoinHandle<io::Result<()>>,
}

impl Client {
    fn start(mode: DemoMode) -> Self {
        let (client_w, server_r) = duplex(1 << 16);
        let (server_w, client_r) = duplex(1 << 16);
        let server = tokio::spawn(serve(server_r, server_w, mode));
        Client {
            input: Some(client_w),
            output: BufReader::new(client_r).lines(),
            server,
        }
    }

    async fn send_bytes(&mut self, line: &[u8]) {
        let w = self.input.as_mut().expect("input still open");
        w.write_all(line).await.expect("write to server");
        w.write_all(b"\n").await.expect("write to server");
    }

    async fn send(&mut self, v: Value) {
        self.send_bytes(v.to_string().as_bytes()).await;
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.output.next_line())
            .await
            .expect("timed out waiting for the server")
            .expect("read from server")
            .expect("server closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"))
    }

    async fn call(&mut self, v: Value) -> Value {
        self.send(v).await;
        self.recv().await
    }

    async fn expect_silence(&mut self, dur: Duration) {
        if let Ok(line) = tokio::time::timeout(dur, self.output.next_line()).await {
            panic!("expected no output, got {line:?}");
        }
    }

    /// Close the server's input; returns what `serve` returned.
    async fn close(mut self) -> io::Result<()> {
        drop(self.input.take());
        while let Ok(Ok(Some(_))) = tokio::time::timeout(WAIT, self.output.next_line()).await {}
        tokio::time::timeout(WAIT, self.server)
            .await
            .expect("serve did not return after EOF")
            .expect("serve task panicked")
    }
}

fn modern_meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

fn call(id: Value, name: &str, args: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": name, "arguments": args } })
}

fn modern_call(id: Value, name: &str, args: Value, caps: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "_meta": modern_meta(caps), "name": name, "arguments": args } })
}

fn text_of(resp: &Value) -> &str {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {resp}"))
}

async fn initialize(c: &mut Client, caps: Value) -> Value {
    let r = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": caps,
            "clientInfo": { "name": "test", "version": "1" } } }),
        )
        .await;
    c.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    r
}
