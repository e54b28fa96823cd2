//! What the end-to-end benches share about the bridge they start: waiting for `/readyz`.
//! Each bench still spawns its own bridge (their arguments and children differ).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

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
