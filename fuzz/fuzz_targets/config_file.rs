//! The configuration file (`config::parse_toml`, then `config::resolve` into a `Plan`) and the
//! `mcpServers` JSON document (`config::parse_servers_json`), as an operator writes them.
//!
//! Input: the file text.
//!
//! Invariants: an error names the file (and, when it has a position, a line and a column
//! within the text); a resolved plan holds every server the file names, each at its path,
//! and its default server is one of them; parsing is deterministic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mcp_bridge::config::{parse_servers_json, parse_toml, resolve, server_path, UpstreamFile};

const PATH: &str = "fuzz.toml";

fn check_error(e: &str, text: &str) {
    assert!(e.starts_with(PATH), "error does not name the file: {e}");
    let Some(rest) = e.strip_prefix("fuzz.toml:") else {
        return;
    };
    let mut it = rest.splitn(3, ':');
    if let (Some(l), Some(c)) = (it.next(), it.next()) {
        if let (Ok(l), Ok(c)) = (l.parse::<usize>(), c.parse::<usize>()) {
            assert!(
                l >= 1 && l <= text.split('\n').count(),
                "line {l} outside the text"
            );
            assert!(c >= 1, "column 0");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_toml(Path::new(PATH), text) {
        Err(e) => {
            check_error(&e, text);
            assert_eq!(parse_toml(Path::new(PATH), text).err(), Some(e));
        }
        // Paths of files to read are not input to parse: keep the target off the filesystem.
        Ok(_) if text.contains("_file") || text.contains("_env") => {}
        Ok(file) => {
            let names: Vec<String> = file.servers.keys().cloned().collect();
            if let Ok(plan) = resolve(file, "fuzz") {
                for n in &names {
                    let s = plan.server(n).expect("every named server is planned");
                    assert_eq!(&s.name, n);
                    assert_eq!(s.path, server_path(n));
                }
                if let Some(d) = &plan.default_server {
                    assert!(
                        plan.server(d).is_some(),
                        "default server {d} is not planned"
                    );
                }
            }
        }
    }
    match parse_servers_json(Path::new("fuzz.json"), text) {
        Ok((servers, _notes)) => {
            for s in servers.values() {
                assert!(
                    matches!(s.upstream, UpstreamFile::Command(_)),
                    "a server without a command was kept"
                );
            }
        }
        Err(e) => assert!(
            e.starts_with("fuzz.json"),
            "error does not name the file: {e}"
        ),
    }
});
