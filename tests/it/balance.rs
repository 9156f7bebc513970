//! The balanced toolbox (`mcp::balance`) over real MCP server
//! processes (`examples/harnesses/mcp_replica`) on 127.0.0.1: calls spread, a replica
//! killed with SIGKILL mid-run is ejected, every call ends with exactly one
//! outcome and no non-idempotent call runs twice, the replica restarted is
//! probed back in; replicas that serve other tools are refused.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use tower::ServiceExt;

use toolstack::mcp::balance::{ReplicaState, Replicas};
use toolstack::{ErrorKind, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::retry::{RetryLayer, RetryPolicy};

/// A replica process, killed when dropped.
struct Server {
    child: Child,
    url: String,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let bin = dir.join(format!("mcp_replica{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing (cargo build --features mcp --example mcp_replica)",
        bin.display()
    );
    bin
}

fn start(id: &str, port: u16, record: &std::path::Path, extra: bool) -> Server {
    let mut command = Command::new(binary());
    command
        .args(["--port", &port.to_string()])
        .env("REPLICA_ID", id)
        .env("RECORD_FILE", record)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if extra {
        command.env("EXTRA_TOOL", "1");
    }
    let mut child = command.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the replica said {line:?}"))
        .to_owned();
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    Server { child, url, port }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolstack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One call of `record`: the replica that ran it, or the error.
async fn record(tools: &Toolbox, key: &str) -> Result<String, toolstack::ToolError> {
    let request =
        ToolRequest::new("record", format!(r#"{{"key":"{key}"}}"#)).with_id(key.to_owned());
    let stream = tools.clone().oneshot(request).await?;
    let result = ToolResult::collect(stream).await;
    if let Some(err) = result.error.clone() {
        return Err(err);
    }
    let value = result.structured_content().unwrap();
    assert_eq!(value["key"], key);
    Ok(value["replica"].as_str().unwrap().to_owned())
}

/// Polls `done` until it holds, for at most a minute: far longer than
/// anything here takes on a loaded machine, so that only a replica that
/// never comes back fails the wait.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let patience = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + patience;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {patience:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_is_ejected_no_call_is_lost_or_run_twice_and_it_comes_back() {
    let dir = scratch("balance");
    let files: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("r{i}.log"))).collect();
    let mut servers: Vec<Option<Server>> = (0..3)
        .map(|i| Some(start(&format!("r{i}"), 0, &files[i], false)))
        .collect();
    let ports: Vec<u16> = servers.iter().map(|s| s.as_ref().unwrap().port).collect();
    let urls: Vec<String> = servers
        .iter()
        .map(|s| s.as_ref().unwrap().url.clone())
        .collect();

    let (tools, replicas) = Replicas::builder()
        .backoff(Duration::from_millis(100), Duration::from_millis(400))
        .ready_timeout(Duration::from_secs(2))
        .connect(urls.clone())
        .await
        .unwrap();
    // The existing retry layer, inside the toolbox: an unsent call is tried
    // again on another replica; `record` is not idempotent, so a call that
    // may have run is not.
    let retry = RetryLayer::new(
        RetryPolicy::new()
            .max_attempts(4)
            .backoff(Duration::from_millis(5), Duration::from_millis(50)),
    );
    let tools = tools.layer(retry);
    assert_eq!(tools.infos().count(), 2, "the tools are listed once");

    // 600 calls, 32 at a time; at the 300th outcome replica r1 is killed.
    const CALLS: usize = 600;
    let mut outcomes: HashMap<String, Result<String, toolstack::ToolError>> = HashMap::new();
    let mut after_kill: Vec<String> = Vec::new();
    let mut calls = futures_util::stream::iter((0..CALLS).map(|n| {
        let tools = tools.clone();
        async move {
            let key = format!("k{n}");
            let outcome = record(&tools, &key).await;
            (key, outcome)
        }
    }))
    .buffer_unordered(32);
    let mut killed = false;
    while let Some((key, outcome)) = calls.next().await {
        if killed {
            if let Ok(replica) = &outcome {
                after_kill.push(replica.clone());
            }
        }
        assert!(
            outcomes.insert(key, outcome).is_none(),
            "one outcome per call"
        );
        if outcomes.len() == CALLS / 2 && !killed {
            drop(servers[1].take()); // SIGKILL
            killed = true;
        }
    }
    assert_eq!(outcomes.len(), CALLS, "every call ended");

    // What ran where, from the replicas' own records.
    let mut ran: HashMap<String, Vec<String>> = HashMap::new();
    for (i, file) in files.iter().enumerate() {
        for key in std::fs::read_to_string(file).unwrap_or_default().lines() {
            ran.entry(key.to_owned()).or_default().push(format!("r{i}"));
        }
    }
    for (key, places) in &ran {
        assert_eq!(places.len(), 1, "`{key}` ran more than once: {places:?}");
    }
    let (mut ok, mut unsent, mut may_have_run) = (0, 0, 0);
    for (key, outcome) in &outcomes {
        match outcome {
            Ok(replica) => {
                ok += 1;
                assert_eq!(ran.get(key), Some(&vec![replica.clone()]), "`{key}`");
            }
            Err(err) if err.kind() == ErrorKind::Unavailable => {
                may_have_run += 1;
                assert!(err.message().contains("may have run"), "{err}");
            }
            Err(err) if err.kind() == ErrorKind::Overloaded => {
                unsent += 1;
                assert!(!ran.contains_key(key), "an unsent call ran: {key}");
            }
            Err(err) => panic!("an untyped outcome for `{key}`: {err:?}"),
        }
    }
    eprintln!("outcomes: {ok} ok, {may_have_run} broke on the killed replica, {unsent} unsent");
    assert!(
        ok >= CALLS - 64,
        "at most the calls in flight on r1 may fail: {ok} ok"
    );
    // The load moved to the survivors: well after the kill, nothing went to r1.
    assert!(after_kill.len() > 100);
    assert!(after_kill[32..].iter().all(|r| r != "r1"), "{after_kill:?}");
    let spread: HashMap<&str, usize> = ran.values().fold(HashMap::new(), |mut m, p| {
        *m.entry(p[0].as_str()).or_default() += 1;
        m
    });
    eprintln!("calls run per replica: {spread:?}");
    assert!(
        spread.len() == 3 && spread.values().all(|&n| n > 30),
        "{spread:?}"
    );
    assert!(replicas
        .states()
        .contains(&(urls[1].clone(), ReplicaState::Ejected)));

    // Restarted on the same port, it is probed back in and takes calls.
    servers[1] = Some(start("r1", ports[1], &files[1], false));
    wait_until("r1 is back", || {
        replicas
            .states()
            .iter()
            .all(|(_, s)| *s == ReplicaState::In)
    })
    .await;
    let mut back = 0;
    for n in 0..90 {
        if record(&tools, &format!("again{n}")).await.unwrap() == "r1" {
            back += 1;
        }
    }
    assert!(back > 0, "the restarted replica took no call");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_serve_other_tools_are_refused_and_a_call_with_none_ready_is_not_sent() {
    let dir = scratch("mismatch");
    let a = start("a", 0, &dir.join("a.log"), false);
    let b = start("b", 0, &dir.join("b.log"), true);
    let err = Replicas::builder()
        .connect([a.url.clone(), b.url.clone()])
        .await
        .unwrap_err();
    assert!(
        err.message().contains(&b.url) && err.message().contains("`extra`"),
        "{err}"
    );

    let (tools, replicas) = Replicas::builder()
        .backoff(Duration::from_secs(60), Duration::from_secs(60))
        .ready_timeout(Duration::from_millis(300))
        .connect([a.url.clone()])
        .await
        .unwrap();
    let err = replicas.add(b.url.clone()).await.unwrap_err();
    assert!(err.message().contains("not added"), "{err}");
    assert_eq!(replicas.states().len(), 1);

    // The only replica dies: the call that finds it gone ejects it, and
    // the next waits for a ready replica, then fails unsent.
    drop(a);
    let first = record(&tools, "x1").await.unwrap_err();
    assert_eq!(first.kind(), ErrorKind::Overloaded, "{first}");
    assert!(first.message().contains("not sent"), "{first}");
    let second = record(&tools, "x2").await.unwrap_err();
    assert_eq!(second.kind(), ErrorKind::Overloaded, "{second}");
    assert!(
        second.message().contains("no replica was ready"),
        "{second}"
    );
    assert!(std::fs::read_to_string(dir.join("a.log"))
        .unwrap_or_default()
        .is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
