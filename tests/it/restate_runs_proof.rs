//! The proof of agent runs on Restate, bounded: `examples/proofs/restate_runs`
//! runs 40 chats through the AI SDK chat endpoint (`ChatEndpoint::restate`,
//! the runs' events in a `redis-server` of the proof's own) on two service
//! processes behind one deployment address, each waiting, suspended, for
//! the approval of a write that is not idempotent; every approval is
//! answered through the endpoint in random order, each answer's response
//! read to its end, while one service process, then `restate-server`
//! itself, is killed with SIGKILL and restarted. The proof judges itself
//! (every run finished; every client told by its answer's response what
//! its run's output says; every run told "wrote" in the ledger exactly
//! once, every run told "may have run" at most once; no approval lost, no
//! response timed out; every seat among the runs waiting given back) and
//! exits non-zero when a check fails. The full run (1,000 chats, release)
//! is the figure in the CHANGELOG.
//!
//! Needs `restate-server` and `redis-server`: without either the test says
//! SKIPPED loudly (and fails when `TOOLSTACK_REQUIRE_RESTATE`, or
//! `TOOLSTACK_REQUIRE_REDIS`, is set): see `restate_server.rs` and
//! `proof::redis_server_on_path`.

// The proof's example needs the endpoint and the Redis log too.
#![cfg(all(feature = "http", feature = "redis"))]

use crate::process;
use crate::proof;

use std::io::Write;
use std::time::Duration;

use toolstack_demo::restate_server::RestateProcess;

#[test]
fn runs_on_restate_survive_the_kill_of_a_service_and_of_the_server_and_no_write_runs_twice() {
    if let Err(missing) = RestateProcess::binary() {
        assert!(
            std::env::var_os("TOOLSTACK_REQUIRE_RESTATE").is_none(),
            "TOOLSTACK_REQUIRE_RESTATE is set but {missing}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "!! SKIPPED: the Restate runs proof did NOT run: {missing}"
        );
        return;
    }
    if !proof::redis_server_on_path("the Restate runs proof") {
        return;
    }
    let proof = proof::example("restate_runs");
    let out = process::output_within(
        std::process::Command::new(proof).args([
            "--chats",
            "40",
            // Few at once: the answers still go on at each kill, and the
            // two kills come seconds apart.
            "--answers-at-once",
            "4",
            "--responses-open",
            "16",
            "--deadline-s",
            "240",
        ]),
        Duration::from_secs(300),
        "the Restate runs proof",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = writeln!(std::io::stderr(), "{text}");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The judgement is the proof's own; these pin that it judged what it
    // must, after both kills.
    let runs = text
        .lines()
        .find(|l| l.starts_with("runs: "))
        .unwrap_or_else(|| panic!("no runs line in {text}"));
    assert!(runs.contains("runs: 40/40 finished"), "{runs}");
    assert!(runs.contains(" 0 runs written twice"), "{runs}");
    assert!(runs.contains(" 0 approvals lost — ok"), "{runs}");
    assert!(
        runs.contains(" 0 clients told what their run's output does not say;"),
        "{runs}"
    );
    assert!(
        text.contains("\nasked: all 40 chats wait for their approval (each first response ends with the tool-approval-request"),
        "{text}"
    );
    let answers = text
        .lines()
        .find(|l| l.starts_with("answers through the AI SDK endpoint: "))
        .unwrap_or_else(|| panic!("no answers line in {text}"));
    assert!(answers.contains(": 40 approvals;"), "{answers}");
    assert!(answers.contains(" 0 responses timed out;"), "{answers}");
    assert!(
        text.contains("\nsuspended: all 40 runs' invocations"),
        "{text}"
    );
    assert!(
        text.contains("\nseats: 0 runs counted waiting at the end — ok"),
        "{text}"
    );
    assert!(text.contains("\nservice kill (service "), "{text}");
    assert!(text.contains("\nrestate kill (restate-server"), "{text}");
    assert!(text.contains("\nPASSED"), "{text}");
}
