//! The durable-runs proof, bounded: `examples/durable_runs` serves 8 chats
//! from worker processes whose runs are checkpointed in Redis (two
//! replicas, one killed with SIGKILL mid-write) and then in SQLite (one
//! worker killed mid-write and restarted), answering every approval after
//! the kill; every run must finish, no answered approval be lost and no
//! write run twice. The full run is the figure in the README.
//!
//! Needs `redis-server` (`.ci/run` installs it); without it the test says
//! SKIPPED loudly, and fails when `TOOLSTACK_REQUIRE_REDIS` is set.

#[path = "support/process.rs"]
mod process;

use std::io::Write;
use std::time::Duration;

#[test]
fn runs_survive_the_kill_of_their_process_and_no_write_runs_twice() {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join("redis-server").exists())
    });
    if !on_path {
        let why = "`redis-server` is not on PATH (Debian: apt-get install redis-server)";
        assert!(
            std::env::var_os("TOOLSTACK_REQUIRE_REDIS").is_none(),
            "TOOLSTACK_REQUIRE_REDIS is set but {why}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "!! SKIPPED: the durable-runs proof did NOT run: {why}"
        );
        return;
    }
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let proof = dir.join(format!("durable_runs{}", std::env::consts::EXE_SUFFIX));
    assert!(proof.exists(), "{} is missing", proof.display());
    let out = process::output_within(
        std::process::Command::new(proof).args([
            "--runs",
            "8",
            // Long writes: the kill surely comes while the first half's run,
            // however slow the machine.
            "--write-ms",
            "10000",
            "--lease-ms",
            "1500",
        ]),
        Duration::from_secs(600),
        "the durable-runs proof",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for round in ["redis", "sqlite"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{round}: ")))
            .unwrap_or_else(|| panic!("no {round} round in {text}"));
        assert!(line.contains("8/8 runs finished"), "{line}");
        assert!(line.contains(" 0 answered approvals lost"), "{line}");
        assert!(line.contains(" 0 writes run twice"), "{line}");
        // Half the writes were cut off by the kill: the model read that.
        assert!(
            line.contains(" 4 writes cut off by the kill read as interrupted"),
            "{line}"
        );
    }
}
