//! What the tests that run a proof example share: whether `redis-server`
//! is there (or a loud SKIPPED), and where `cargo test` built the example.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// Whether `redis-server` is on `PATH`. When it is not, says SKIPPED for
/// `what` on stderr and returns `false` — unless `TOOLSTACK_REQUIRE_REDIS`
/// is set, and then it panics.
pub fn redis_server_on_path(what: &str) -> bool {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("redis-server").exists())
    });
    if !on_path {
        let why = "`redis-server` is not on PATH (Debian: apt-get install redis-server)";
        assert!(
            std::env::var_os("TOOLSTACK_REQUIRE_REDIS").is_none(),
            "TOOLSTACK_REQUIRE_REDIS is set but {why}"
        );
        // Straight to the process's stderr: the harness captures
        // `eprintln!` of tests that pass.
        let _ = writeln!(std::io::stderr(), "!! SKIPPED: {what} did NOT run: {why}");
    }
    on_path
}

/// The example `name`, which `cargo test` builds next to the test binaries.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} is missing", path.display());
    path
}
