//! What the end-to-end benches share about the bridge they start: its address from its log,
//! and waiting for `/readyz`.
//! Each bench still spawns its own bridge (their arguments and children differ).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The address the bridge logs (`listening on http://ADDR/…`) on `stderr`, within `within`;
/// a thread keeps draining the log afterwards (echoing warnings and errors) so that the bridge
/// never blocks on it.
pub fn address_from_log(stderr: std::process::ChildStderr, within: Duration) -> SocketAddr {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(stderr);
        let mut line = String::new();
        let mut sent = false;
        while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if !sent {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    if let Ok(a) = rest.split('/').next().unwrap_or("").parse() {
                        let _ = tx.send(a);
                        sent = true;
                    }
                }
            }
            if line.contains("WARN") || line.contains("ERROR") {
                eprint!("  bridge: {line}");
            }
            line.clear();
        }
    });
    rx.recv_timeout(within)
        .unwrap_or_else(|_| panic!("the bridge did not log its address within {within:?}"))
}

/// Poll `GET /readyz` on `addr` until it answers 200 (the child has been probed); panic after
/// `within`.
pub fn wait_ready(addr: SocketAddr, within: Duration) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            let req = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut resp = String::new();
            if s.write_all(req.as_bytes()).is_ok()
                && s.read_to_string(&mut resp).is_ok()
                && resp.starts_with("HTTP/1.1 200")
            {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "the bridge did not become ready within {} s",
        within.as_secs()
    );
}
