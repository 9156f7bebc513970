//! The scale-out proof for the balanced toolbox: 3 MCP replica processes
//! (`examples/harnesses/mcp_replica`) behind `mcp::balance`, N calls of the
//! non-idempotent `record` tool at C at a time; at 50 % one replica is
//! killed with SIGKILL, and restarted a second later. Prints calls/s before,
//! during and after, where the calls went, and the outcome counts, and
//! checks from the replicas' own records that no call ran twice.
//!
//! ```text
//! cargo build --release --features mcp --example mcp_replica --example scale_out
//! target/release/examples/scale_out --calls 100000 --concurrency 256
//! ```
//!
//! (The replica binary is looked for next to this one.)

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tower::ServiceExt;

use toolstack::mcp::balance::{ReplicaState, Replicas};
use toolstack::{ErrorKind, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::retry::{RetryLayer, RetryPolicy};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(id: &str, port: u16, record: &Path) -> (Server, String) {
    let exe = std::env::current_exe().expect("the example's path");
    let bin = exe.with_file_name(format!("mcp_replica{}", std::env::consts::EXE_SUFFIX));
    let mut child = Command::new(&bin)
        .args(["--port", &port.to_string()])
        .env("REPLICA_ID", id)
        .env("RECORD_FILE", record)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e} (build it: --example mcp_replica)",
                bin.display()
            )
        });
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("its address");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("`listening on URL`")
        .to_owned();
    (Server(child), url)
}

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const USAGE: &str = "\
Usage: scale_out [--calls N] [--concurrency C]
  (cargo build --release --features mcp --example mcp_replica --example scale_out)

3 MCP replica processes behind mcp::balance; one is killed at 50 % and
restarted; no call may run twice.
  --calls N          calls in all (100000)
  --concurrency C    calls at once (256)
  -h, --help         this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    let calls = flag(&args, "--calls", 100_000);
    let concurrency = flag(&args, "--concurrency", 256);
    let dir = std::env::temp_dir().join(format!("toolstack-scale-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let files: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("r{i}.log"))).collect();
    let mut servers: Vec<Option<Server>> = Vec::new();
    let mut urls = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let (server, url) = start(&format!("r{i}"), 0, file);
        servers.push(Some(server));
        urls.push(url);
    }
    let (tools, replicas) = Replicas::builder()
        .backoff(Duration::from_millis(200), Duration::from_secs(2))
        .connect(urls.clone())
        .await?;
    let tools: Toolbox = tools.layer(RetryLayer::new(
        RetryPolicy::new()
            .max_attempts(4)
            .backoff(Duration::from_millis(5), Duration::from_millis(100)),
    ));
    println!(
        "{calls} calls of `record` (not idempotent), {concurrency} at a time, over 3 replicas"
    );

    // Per 100 ms: completions, and per replica.
    let started = Instant::now();
    let timeline: Arc<Mutex<Vec<[usize; 4]>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let kill_at = calls / 2;
    let mut killed_at: Option<Duration> = None;
    let mut restarted_at: Option<Duration> = None;
    let mut outcomes: HashMap<&'static str, usize> = HashMap::new();
    let mut oks: Vec<(String, String)> = Vec::with_capacity(calls);
    let mut stream = futures_util::stream::iter((0..calls).map(|n| {
        let tools = tools.clone();
        async move {
            let key = format!("k{n}");
            let request = ToolRequest::new("record", format!(r#"{{"key":"{key}"}}"#));
            let outcome = match tools.oneshot(request).await {
                Err(err) => Err(err),
                Ok(stream) => {
                    let result = ToolResult::collect(stream).await;
                    match result.error.clone() {
                        Some(err) => Err(err),
                        None => Ok(result.structured_content().unwrap_or_default()["replica"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned()),
                    }
                }
            };
            (key, outcome)
        }
    }))
    .buffer_unordered(concurrency);
    while let Some((key, outcome)) = stream.next().await {
        let at = started.elapsed();
        let slot = (at.as_millis() / 100) as usize;
        {
            let mut timeline = timeline.lock().unwrap();
            while timeline.len() <= slot {
                timeline.push([0; 4]);
            }
            timeline[slot][0] += 1;
            if let Ok(replica) = &outcome {
                let r: usize = replica.trim_start_matches('r').parse().unwrap_or(0);
                timeline[slot][1 + r.min(2)] += 1;
            }
        }
        let kind = match &outcome {
            Ok(_) => "ok",
            Err(err) if err.kind() == ErrorKind::Unavailable => "broke (may have run; not retried)",
            Err(err) if err.kind() == ErrorKind::Overloaded => "unsent",
            Err(_) => "other error",
        };
        *outcomes.entry(kind).or_default() += 1;
        if let Ok(replica) = outcome {
            oks.push((key, replica));
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if n == kill_at {
            servers[1] = None; // SIGKILL
            killed_at = Some(at);
        }
        if let Some(k) = killed_at {
            if restarted_at.is_none() && at > k + Duration::from_secs(1) {
                let port = urls[1]
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .trim_end_matches("/mcp")
                    .parse()?;
                servers[1] = Some(start("r1", port, &files[1]).0);
                restarted_at = Some(at);
            }
        }
    }
    let total = started.elapsed();

    // No call ran twice; every ok ran once, where it said.
    let mut ran: HashMap<String, usize> = HashMap::new();
    let mut ran_on: HashMap<String, String> = HashMap::new();
    for (i, file) in files.iter().enumerate() {
        for key in std::fs::read_to_string(file)?.lines() {
            *ran.entry(key.to_owned()).or_default() += 1;
            ran_on.insert(key.to_owned(), format!("r{i}"));
        }
    }
    let twice = ran.values().filter(|&&n| n > 1).count();
    let mismatched = oks.iter().filter(|(k, r)| ran_on.get(k) != Some(r)).count();

    let timeline = timeline.lock().unwrap().clone();
    let rate = |from: Duration, to: Duration| {
        let (a, b) = (
            (from.as_millis() / 100) as usize,
            (to.as_millis() / 100) as usize,
        );
        let n: usize = timeline[a.min(timeline.len())..b.min(timeline.len())]
            .iter()
            .map(|s| s[0])
            .sum();
        n as f64 / (to - from).as_secs_f64().max(0.1)
    };
    let k = killed_at.unwrap_or(total);
    let r = restarted_at.unwrap_or(total);
    println!(
        "\nwall time {:.2} s, {:.0} calls/s overall",
        total.as_secs_f64(),
        calls as f64 / total.as_secs_f64()
    );
    println!("before the kill: {:.0} calls/s", rate(Duration::ZERO, k));
    println!("kill → restart (1 s): {:.0} calls/s", rate(k, r));
    println!("after the restart: {:.0} calls/s", rate(r, total));
    // The load on the survivors within a second of the kill.
    let after = &timeline[((k.as_millis() / 100) as usize + 2).min(timeline.len())
        ..((k.as_millis() / 100) as usize + 10).min(timeline.len())];
    let on_r1: usize = after.iter().map(|s| s[2]).sum();
    let spread: Vec<usize> = (1..4).map(|i| after.iter().map(|s| s[i]).sum()).collect();
    println!(
        "from 0.2 s to 1 s after the kill, calls answered per replica (r0, r1, r2): {spread:?}"
    );
    let tail = &timeline[(r.as_millis() / 100) as usize..];
    let back: usize = tail.iter().map(|s| s[2]).sum();
    println!(
        "after the restart, calls answered by r1: {back}; replica states: {:?}",
        replicas.states()
    );
    println!("\noutcomes:");
    let mut sorted: Vec<_> = outcomes.into_iter().collect();
    sorted.sort();
    for (kind, n) in sorted {
        println!("  {kind}: {n}");
    }
    println!("  calls that ran twice (from the replicas' records): {twice}");
    println!("  ok answers not matching the replica's record: {mismatched}");
    let all_in = replicas
        .states()
        .iter()
        .all(|(_, s)| *s == ReplicaState::In);
    let _ = std::fs::remove_dir_all(&dir);
    if twice > 0 || mismatched > 0 || on_r1 > 0 || !all_in {
        return Err("the scale-out proof failed (see above)".into());
    }
    Ok(())
}
