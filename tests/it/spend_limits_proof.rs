//! The spend-limits proof, bounded: `examples/proofs/spend_limits` runs 40
//! agent runs at once on 2 worker processes that share one global and one
//! per-caller cost limit in a real `redis-server`, against a test model
//! whose answers stream random lengths and whose usage differs from the
//! layer's estimate; then again, with a worker killed with SIGKILL
//! mid-answer. The proof judges itself (real spend, from the model's
//! ledgers, within the limits plus the estimates' error; no reservation
//! left, after the runs and after the reservation ttl; every run that did
//! not finish stopped by a named spend limit) and exits non-zero when a
//! check fails. The full run (1,000 runs, 4 workers, release) is the
//! figure in the CHANGELOG's proof.
//!
//! Needs `redis-server` (`.ci/run` installs it); without it the test says
//! SKIPPED loudly, and fails when `TOOLSTACK_REQUIRE_REDIS` is set.

use crate::process;
use crate::proof;

use std::io::Write;
use std::time::Duration;

#[test]
fn spend_limits_hold_across_processes_and_a_kill_leaves_no_reservation() {
    if !proof::redis_server_on_path("the spend-limits proof") {
        return;
    }
    let proof = proof::example("spend_limits");
    let out = process::output_within(
        std::process::Command::new(proof).args([
            "--runs",
            "40",
            "--workers",
            "2",
            // Limits that 40 runs cross (each run spends about 5 cents):
            // the global one, and the heavy callers' own.
            "--global-dollars",
            "0.6",
            "--caller-dollars",
            "0.15",
            "--ttl-ms",
            "1500",
            // Slow enough that the kill meets answers mid-stream.
            "--delta-ms",
            "5",
            "--kill-after-lines",
            "30",
        ]),
        Duration::from_secs(300),
        "the spend-limits proof",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The judgement is the proof's own; these pin that it judged what it
    // must, in both rounds.
    for round in ["limits", "kill"] {
        assert!(text.contains(&format!("\n{round}: ok")), "{text}");
    }
    assert!(text.contains("  global: real spend "), "{text}");
    assert!(text.contains(" 0 ended otherwise"), "{text}");
    assert!(text.contains("worker 0 killed with SIGKILL"), "{text}");
    assert!(
        text.contains("after the runs and a call on every counter: 0 reservations left"),
        "{text}"
    );
    assert!(text.contains("\nPASSED"), "{text}");
}
