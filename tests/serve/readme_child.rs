//! README "serve" flags for the child process that no other test reached: the child's
//! environment is a safe baseline unless `--pass-environment` (a secret in the bridge's own
//! environment must not reach a child), `-e KEY=VALUE` adds to it, `--cwd DIR` is its working
//! directory. The child is `/bin/sh`, which writes what it got to files and then becomes the
//! demo server, so `/readyz` 200 means the files are complete.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use support::*;

const T: Duration = Duration::from_secs(20);

/// `serve -- /bin/sh -c …` with `extra` flags and `SECRET_IN_BRIDGE` in the bridge's own
/// environment; returns the child's environment and working directory once it is ready.
async fn child_sees(out: &Path, extra: &[&str]) -> (BTreeMap<String, String>, String) {
    let script = r#"env > "$0/env"; pwd > "$0/cwd"; exec "$1" demo-server"#;
    let b = Bridge::builder()
        .serve()
        .args(["--port", "0"])
        .args(extra)
        .args(["--", "/bin/sh", "-c", script])
        .arg(out.as_os_str())
        .arg(bin())
        .env("SECRET_IN_BRIDGE", "s3cret-value")
        .spawn()
        .await;
    b.wait_ready(T).await;
    let env = std::fs::read_to_string(out.join("env")).unwrap();
    let env = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let cwd = std::fs::read_to_string(out.join("cwd")).unwrap();
    (env, cwd.trim_end().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_child_gets_a_baseline_environment_extra_variables_and_its_cwd() {
    let out = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let work_dir = work.path().canonicalize().unwrap();
    let (env, cwd) = child_sees(
        out.path(),
        &[
            "-e",
            "EXTRA_FOR_CHILD=one",
            "--cwd",
            work_dir.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        !env.contains_key("SECRET_IN_BRIDGE"),
        "the bridge's own environment reached the child: {:?}",
        env.keys().collect::<Vec<_>>()
    );
    assert_eq!(env.get("EXTRA_FOR_CHILD").map(String::as_str), Some("one"));
    // The baseline: PATH is passed on when the bridge has it (cargo test always does).
    assert_eq!(
        env.get("PATH").map(String::as_str),
        std::env::var("PATH").ok().as_deref(),
        "{env:?}"
    );
    assert_eq!(Path::new(&cwd), work_dir.as_path());
}

#[tokio::test(flavor = "multi_thread")]
async fn pass_environment_gives_the_child_the_bridges_environment() {
    let out = tempfile::tempdir().unwrap();
    let (env, _) = child_sees(out.path(), &["--pass-environment"]).await;
    assert_eq!(
        env.get("SECRET_IN_BRIDGE").map(String::as_str),
        Some("s3cret-value"),
        "{env:?}"
    );
}
