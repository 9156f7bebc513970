//! A child process run to its end under a watchdog, for the tests that
//! drive Node and Chromium.

#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `command` to its end, its output captured, for at most
/// `patience`: past that it is stopped (SIGTERM, then SIGKILL) and the test
/// fails, saying what it waited for and what the command wrote to stderr.
pub fn output_within(command: &mut Command, patience: Duration, what: &str) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("{what}: could not start: {err}"));
    let pid = child.id();
    let (done, output) = mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    if let Ok(finished) = output.recv_timeout(patience) {
        return finished.unwrap();
    }
    let signal = |name: &str| {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{name} {pid}"))
            .status();
    };
    signal("TERM");
    let stopped = output.recv_timeout(Duration::from_secs(10)).or_else(|_| {
        signal("KILL");
        output.recv_timeout(Duration::from_secs(10))
    });
    let stderr = stopped
        .ok()
        .and_then(Result::ok)
        .map(|output| String::from_utf8_lossy(&output.stderr).into_owned())
        .unwrap_or_default();
    panic!("timed out after {patience:?} waiting for {what}; stopped it. Its stderr:\n{stderr}");
}
