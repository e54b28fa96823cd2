//! systemd integration against the real binary: the readiness protocol captured on a
//! `NOTIFY_SOCKET` of our own (READY, WATCHDOG, RELOADING, STOPPING), socket activation with a
//! listener passed as fd 3 (`LISTEN_FDS`/`LISTEN_PID`), and a shutdown that leaves no process
//! of any server behind.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::os::unix::net::UnixDatagram;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::*;

/// Every datagram received on the socket, collected by a thread.
#[derive(Clone, Default)]
struct Notes(Arc<Mutex<Vec<String>>>);

impl Notes {
    fn listen(sock: UnixDatagram) -> Notes {
        let notes = Notes::default();
        let n = notes.clone();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match sock.recv(&mut buf) {
                    Ok(len) => {
                        n.0.lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&buf[..len]).into_owned())
                    }
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut =>
                    {
                        if Arc::strong_count(&n.0) == 1 {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        notes
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self, line: &str) -> usize {
        self.all()
            .iter()
            .filter(|m| m.lines().any(|l| l == line))
            .count()
    }

    async fn wait_count(&self, line: &str, n: usize, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.count(line) >= n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_socket_ready_watchdog_reload_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "n.toml",
        &format!("{}{}", demo_server("a", &[]), demo_server("b", &[])),
    );
    let sock_path = dir.path().join("notify.sock");
    let notes = Notes::listen(UnixDatagram::bind(&sock_path).unwrap());
    let mut b = daemon_builder(&cfg, &["--port", "0"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .spawn()
        .await;
    assert!(
        notes
            .wait_count("READY=1", 1, Duration::from_secs(20))
            .await,
        "no READY=1: {:?}\nlog:\n{}",
        notes.all(),
        b.log.dump()
    );
    // READY means both children answered their probe: no waiting needed now.
    let c = client();
    for name in ["a", "b"] {
        let r = call_modern(
            &c,
            &server_url(&b, name),
            serde_json::json!(1),
            "echo",
            serde_json::json!({"text": name}),
        )
        .await;
        assert!(echoed(&r, name), "{name} not serving at READY: {r:?}");
    }
    let ready = notes
        .all()
        .into_iter()
        .find(|m| m.contains("READY=1"))
        .unwrap();
    assert!(ready.contains("STATUS=serving 2 servers"), "{ready}");
    // Pings at half the 200 ms period (100 ms): ten intervals, timed from one ping to the
    // tenth after it, take 0.7-1.5 s. Pinging at the full period (2 s for ten), or twice as
    // often (0.5 s), fails; the 20 ms polling of `wait_count` is inside the margin.
    let seen = notes.count("WATCHDOG=1");
    assert!(
        notes
            .wait_count("WATCHDOG=1", seen + 1, Duration::from_secs(5))
            .await,
        "no watchdog ping: {:?}",
        notes.all()
    );
    let from = Instant::now();
    assert!(
        notes
            .wait_count("WATCHDOG=1", seen + 11, Duration::from_secs(5))
            .await,
        "watchdog pings: {:?}",
        notes.all()
    );
    let ten = from.elapsed();
    assert!(
        (Duration::from_millis(700)..=Duration::from_millis(1500)).contains(&ten),
        "ten watchdog intervals took {ten:?}, want ~1 s (every half of WATCHDOG_USEC=200000)"
    );
    b.signal(Signal::SIGHUP);
    assert!(
        notes
            .wait_count("RELOADING=1", 1, Duration::from_secs(10))
            .await
    );
    assert!(
        notes
            .wait_count("READY=1", 2, Duration::from_secs(10))
            .await
    );
    assert!(
        notes.all().iter().any(|m| m.contains("MONOTONIC_USEC=")),
        "{:?}",
        notes.all()
    );
    b.signal(Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await.expect("exit");
    assert!(st.success(), "{st}");
    assert!(
        notes
            .wait_count("STOPPING=1", 1, Duration::from_secs(2))
            .await,
        "{:?}",
        notes.all()
    );
}

/// Plain `serve --demo` is the same daemon with one server: READY=1 once bound and probed,
/// STATUS=, the watchdog, RELOADING=1/READY=1 around a SIGHUP that keeps the child, and
/// STOPPING=1 — while still listening at /mcp as it always did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_serve_speaks_the_readiness_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let notes = Notes::listen(UnixDatagram::bind(&sock_path).unwrap());
    let mut b = Bridge::builder()
        .serve()
        .args(["--demo", "--port", "0"])
        .no_systemd_env()
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .spawn()
        .await;
    assert!(b.url.ends_with("/mcp"), "{}", b.url);
    assert!(
        notes
            .wait_count("READY=1", 1, Duration::from_secs(20))
            .await,
        "no READY=1: {:?}\nlog:\n{}",
        notes.all(),
        b.log.dump()
    );
    // READY means the child answered its probe: no waiting needed now.
    let c = client();
    let r = call_modern(
        &c,
        &b.url,
        serde_json::json!(1),
        "echo",
        serde_json::json!({"text": "plain"}),
    )
    .await;
    assert!(echoed(&r, "plain"), "not serving at READY: {r:?}");
    let ready = notes
        .all()
        .into_iter()
        .find(|m| m.contains("READY=1"))
        .unwrap();
    assert!(
        ready.contains(&format!("STATUS=serving 1 server on {}", b.addr)),
        "{ready}"
    );
    assert!(
        notes
            .wait_count("WATCHDOG=1", 3, Duration::from_secs(5))
            .await,
        "watchdog pings: {:?}",
        notes.all()
    );
    b.signal(Signal::SIGHUP);
    assert!(
        notes
            .wait_count("RELOADING=1", 1, Duration::from_secs(10))
            .await
    );
    assert!(
        notes
            .wait_count("READY=1", 2, Duration::from_secs(10))
            .await
    );
    // Nothing changed: the same child goes on serving.
    let r = call_modern(
        &c,
        &b.url,
        serde_json::json!(2),
        "echo",
        serde_json::json!({"text": "again"}),
    )
    .await;
    assert!(echoed(&r, "again"), "{r:?}");
    assert_eq!(child_pids(&b, "default").len(), 1, "{}", b.log.dump());
    b.signal(Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await.expect("exit");
    assert!(st.success(), "{st}");
    assert!(
        notes
            .wait_count("STOPPING=1", 1, Duration::from_secs(2))
            .await,
        "{:?}",
        notes.all()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_activation_adopts_the_passed_listener() {
    use command_fds::{CommandFdExt, FdMapping};

    let dir = tempfile::tempdir().unwrap();
    // An address this machine cannot bind: had the daemon tried, it would have exited 78.
    let cfg = write(
        dir.path(),
        "sa.toml",
        &format!(
            "[listen]\naddresses = [\"192.0.2.1:80\"]\n{}",
            demo_server("a", &[])
        ),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // `sh` learns its own pid ($$), which `exec` keeps: LISTEN_PID names the daemon.
    let b = Bridge::builder()
        .wrapper([
            "sh",
            "-c",
            "LISTEN_PID=$$; LISTEN_FDS=1; export LISTEN_PID LISTEN_FDS; exec \"$0\" \"$@\"",
        ])
        .config(&cfg)
        // The listener becomes fd 3 of the child (command-fds does the fork-time dup2).
        .configure(move |cmd| {
            cmd.fd_mappings(vec![FdMapping {
                parent_fd: std::os::fd::OwnedFd::from(listener),
                child_fd: 3,
            }])
            .expect("map the listener to fd 3");
        })
        .spawn()
        .await;
    assert_eq!(b.addr.port(), port, "log:\n{}", b.log.dump());
    b.log
        .expect("passed by the service manager", Duration::from_secs(1))
        .await;
    let c = client();
    let r = echo_until_ok(
        &c,
        &server_url(&b, "a"),
        "activated",
        Duration::from_secs(20),
    )
    .await;
    assert!(echoed(&r, "activated"), "{r:?}\nlog:\n{}", b.log.dump());
    // The only server is the default.
    let r = echo_until_ok(&c, &b.endpoint("/mcp"), "default", Duration::from_secs(5)).await;
    assert!(echoed(&r, "default"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_process_of_any_server() {
    let dir = tempfile::tempdir().unwrap();
    // Each child forks a long sleep into its process group, then becomes the demo server.
    let server = |name: &str| {
        format!(
            "[servers.{name}]\ncommand = \"sh\"\nargs = [\"-c\", {:?}]\n",
            format!("sleep 1000 & exec {} demo-server", bin())
        )
    };
    let cfg = write(
        dir.path(),
        "s.toml",
        &format!("{}{}{}", server("x"), server("y"), server("z")),
    );
    let mut b = daemon(&cfg).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let kids = children_of(b.pid());
    assert_eq!(kids.len(), 3, "children {kids:?}\nlog:\n{}", b.log.dump());
    let mut all = kids.clone();
    for k in &kids {
        let grandkids = children_of(*k);
        assert!(
            grandkids.iter().any(|g| comm(*g) == "sleep"),
            "no sleep under {k}"
        );
        all.extend(grandkids);
    }
    b.signal(Signal::SIGTERM);
    let st = b
        .wait_exit(Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("still running; log:\n{}", b.log.dump()));
    assert!(st.success(), "{st}");
    for p in all {
        assert!(
            wait_gone(p, Duration::from_secs(5)).await,
            "process {p} ({}) outlived the daemon; log:\n{}",
            comm(p),
            b.log.dump()
        );
    }
}
