//! The durable-runs proof, bounded: `examples/proofs/durable_runs` serves 8 chats
//! from worker processes whose runs are checkpointed in Redis (two
//! replicas, one killed with SIGKILL mid-write) and then in SQLite (one
//! worker killed mid-write and restarted), answering every approval after
//! the kill; every run must finish, no answered approval be lost and no
//! write run twice; then the store itself is killed and restarted (after
//! 2 s and 20 s) mid-answers. The full run is the figure in
//! docs/durable-runs.md.
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
    let text = run_proof(
        &[
            "--runs",
            "8",
            "--rounds",
            "redis,sqlite",
            // Long writes: the kill surely comes while the first half's run,
            // however slow the machine.
            "--write-ms",
            "10000",
            "--lease-ms",
            "1500",
        ],
        "the durable-runs proof",
    );
    for round in ["redis", "sqlite"] {
        let line = round_line(&text, round);
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

/// The store itself goes away: `redis-server` (append-only file,
/// `appendfsync always`) is killed with SIGKILL once 60 % of 8 approvals
/// are sent, and restarted from its file after 2 s — within the bound a
/// run rides out, so every run finishes as if nothing happened — and, in
/// a round of its own, after 20 s — past it, so some answers end with a
/// retryable error (or a `503` with `Retry-After`) and are sent again.
/// Either way: every run finishes, no approved write is lost or run
/// twice, and no run is left `running`.
#[test]
fn runs_ride_out_their_stores_restart_and_none_is_stranded_past_the_bound() {
    if !proof::redis_server_on_path("the durable-runs proof's store outage") {
        return;
    }
    let text = run_proof(
        &[
            "--runs",
            "8",
            "--rounds",
            "outage",
            "--outages-ms",
            "2000,20000",
            // Writes long enough that the outage meets some mid-write.
            "--write-ms",
            "1000",
        ],
        "the durable-runs proof's store outage",
    );
    for round in ["store down 2 s", "store down 20 s"] {
        let line = round_line(&text, round);
        assert!(line.contains("8/8 runs finished"), "{line}");
        assert!(line.contains(" 0 answered approvals lost"), "{line}");
        assert!(line.contains(" 0 writes run twice"), "{line}");
        assert!(line.contains(" 0 runs left running"), "{line}");
        assert!(line.contains("(0 not saying the store"), "{line}");
        assert!(line.contains("(0 without Retry-After)"), "{line}");
    }
    let short = round_line(&text, "store down 2 s");
    assert!(short.contains("(8 as if nothing happened)"), "{short}");
    assert!(short.contains(" 0 error chunks"), "{short}");
}

/// Runs the proof with `args` (within 10 minutes), says what it printed on
/// stderr, and returns it once it passed.
fn run_proof(args: &[&str], what: &str) -> String {
    let proof = proof::example("durable_runs");
    let out = process::output_within(
        std::process::Command::new(proof).args(args),
        Duration::from_secs(600),
        what,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The report line of `round`.
fn round_line<'a>(text: &'a str, round: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{round}: ")))
        .unwrap_or_else(|| panic!("no {round} round in {text}"))
}
