//! The durable-runs proof, bounded: `examples/proofs/durable_runs` serves 8 chats
//! from worker processes whose runs are checkpointed in Redis (two
//! replicas, one killed with SIGKILL mid-write) and then in SQLite (one
//! worker killed mid-write and restarted), answering every approval after
//! the kill; every run must finish, no answered approval be lost and no
//! write run twice. The full run is the figure in the README.
//!
//! Needs `redis-server` (`.ci/run` installs it); without it the test says
//! SKIPPED loudly, and fails when `TOOLSTACK_REQUIRE_REDIS` is set.

use crate::process;
use crate::proof;

use std::io::Write;
use std::time::Duration;

#[test]
fn runs_survive_the_kill_of_their_process_and_no_write_runs_twice() {
    if !proof::redis_server_on_path("the durable-runs proof") {
        return;
    }
    let proof = proof::example("durable_runs");
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
