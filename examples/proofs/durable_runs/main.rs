//! The proof that agent runs outlive their process: N chats, each reaching
//! a write that waits for a person's approval, served by worker processes
//! (this binary, `--worker`) behind the AI SDK chat endpoint, their runs
//! checkpointed in one store; one worker is killed with SIGKILL, and every
//! approval is answered through the other (or through the same one,
//! restarted).
//!
//! Three rounds:
//!
//! * **Redis, two replicas.** Workers A and B share one `redis-server`
//!   (the parent's own). The N chats are asked of A; each ends its
//!   response waiting for approval, the run suspended in Redis. Half the
//!   approvals go to A, whose write (slow on purpose) starts; A is killed
//!   mid-write. The other half go to B and finish there. The first half's
//!   answers, sent again to B, are refused (`409`: A's lease holds) until
//!   the lease passes; then B takes each run over, and the model reads that
//!   the write "may have run" — it is not run again.
//! * **SQLite, a restart.** One worker over a SQLite file; the same N
//!   chats; killed mid-write for half of them, started again on the same
//!   file with the same process id (so it takes its runs back at once),
//!   and every approval answered there.
//! * **The store itself goes away** (`outage.rs`): two workers on one
//!   `redis-server` that keeps an append-only file (`appendfsync always`);
//!   once 60 % of the approvals are sent, redis-server is killed with
//!   SIGKILL and started again from its file — after 2 s (within the bound
//!   a run rides out, 15 s by default: every run must finish as if nothing
//!   happened), then, in a round of its own, after 20 s (past it: every
//!   run finishes after the store returns or ends with a retryable error
//!   that the answer sent again completes, and no run is left `running`).
//!
//! The write counts its own runs in a ledger file (one line per run,
//! written and synced before it sleeps, so a kill cannot hide one). The
//! proof checks: every run finishes; no answered approval is lost; no
//! write ran twice. It prints the counts and how long resuming took.
//!
//! ```text
//! cargo run --release --example durable_runs --features http,redis,sqlite -- --runs 200
//! cargo run --release --example durable_runs --features http,redis,sqlite -- --runs 2000 --rounds outage
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

use toolstack_demo::redis_server::RedisProcess;

mod outage;
mod worker;

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const USAGE: &str = "\
Usage: durable_runs [--runs N] [--write-ms MS] [--lease-ms MS] [--rounds LIST] [--outages-ms LIST]
  (cargo run --release --features http,redis,sqlite --example durable_runs -- ...)

N chats wait for approval on worker processes over Redis, then SQLite; a
worker is killed and every approval is answered through another. Then the
store itself goes away: redis-server is killed mid-answers and restarted
from its append-only file after each outage.
  --runs N            chats per round (20)
  --write-ms MS       how long the approved write takes (1500)
  --lease-ms MS       a running run's lease in the kill rounds (2000)
  --rounds LIST       which rounds, comma-separated: redis,sqlite,outage (all)
  --outages-ms LIST   the store outages of the outage rounds (2000,20000)
  -h, --help          this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--worker") {
        let name = args.get(at + 1).ok_or("--worker NAME")?.clone();
        return worker::worker(&name, &args).await;
    }
    let runs: usize = flag(&args, "--runs", 20);
    let write_ms: u64 = flag(&args, "--write-ms", 1_500);
    let lease_ms: u64 = flag(&args, "--lease-ms", 2_000);
    let dir = std::env::temp_dir().join(format!("toolstack-durable-proof-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let proof = Proof {
        exe: std::env::current_exe()?,
        runs,
        write_ms,
        lease_ms,
        dir: dir.clone(),
        http: reqwest::Client::new(),
    };
    println!(
        "durable runs: {runs} chats per round, writes of {write_ms} ms, a lease of {lease_ms} ms"
    );
    let rounds: String = flag(&args, "--rounds", "redis,sqlite,outage".to_owned());
    let outages: String = flag(&args, "--outages-ms", "2000,20000".to_owned());
    let mut failed = false;
    let mut say =
        |round: &str, outcome: Result<(String, bool), Box<dyn std::error::Error>>| match outcome {
            Ok((report, passed)) => {
                println!("{round}: {report}");
                failed |= !passed;
            }
            Err(err) => {
                println!("{round}: FAILED: {err}");
                failed = true;
            }
        };
    for round in rounds.split(',') {
        match round {
            "redis" => say(round, proof.redis_round().await.map(Report::said)),
            "sqlite" => say(round, proof.sqlite_round().await.map(Report::said)),
            "outage" => {
                for ms in outages.split(',') {
                    let ms: u64 = ms.parse().map_err(|_| format!("--outages-ms: {ms:?}"))?;
                    let outage = Duration::from_millis(ms);
                    let name = format!("store down {:.0} s", outage.as_secs_f64());
                    say(&name, proof.outage_round(outage).await.map(|r| r.said()));
                }
            }
            other => return Err(format!("--rounds: no round {other:?}").into()),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        println!("FAILED");
        std::process::exit(1);
    }
    println!("PASSED");
    Ok(())
}

// ---- the parent -----------------------------------------------------------

struct Proof {
    exe: PathBuf,
    runs: usize,
    write_ms: u64,
    lease_ms: u64,
    dir: PathBuf,
    http: reqwest::Client,
}

/// A worker process, killed with SIGKILL on drop.
struct Worker {
    child: Child,
    url: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One chat's approval request, as the first response ended.
#[derive(Clone)]
struct Waiting {
    row: String,
    approval_id: String,
    tool_call_id: String,
}

#[derive(Debug, Default)]
struct Report {
    runs: usize,
    finished: usize,
    lost: usize,
    twice: usize,
    interrupted: usize,
    refused_while_held: usize,
    resume_us: Vec<u64>,
    takeover_ms: u64,
}

impl Report {
    fn passed(&self) -> bool {
        self.finished == self.runs && self.lost == 0 && self.twice == 0
    }

    fn said(self) -> (String, bool) {
        (self.to_string(), self.passed())
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} runs finished, {} answered approvals lost, {} writes run twice, {} writes cut off by the kill read as interrupted ({} answers refused while the dead process's lease held); resuming a waiting run (its answer to the response's head) took p50 {:.1} ms, p99 {:.1} ms; the runs cut off by the kill were all finished {} ms after it — {}",
            self.finished,
            self.runs,
            self.lost,
            self.twice,
            self.interrupted,
            self.refused_while_held,
            percentile(&self.resume_us, 0.5) as f64 / 1000.0,
            percentile(&self.resume_us, 0.99) as f64 / 1000.0,
            self.takeover_ms,
            if self.passed() { "ok" } else { "FAILED" },
        )
    }
}

/// What one response said: its status, its chunks.
struct Answered {
    status: u16,
    /// A refusal's `kind`, when the body is one.
    kind: Option<String>,
    /// Its `Retry-After`, in seconds, when it has one.
    retry_after: Option<u64>,
    chunks: Vec<Value>,
    /// From the request to the response's head: for an answer, the time
    /// to load the run and take it (the endpoint resumes before it
    /// answers).
    head: Duration,
}

impl Answered {
    /// The response ended its run normally (`finishReason: "stop"`).
    fn stopped(&self) -> bool {
        let finish = self.chunks.iter().rev().find(|c| c["type"] == "finish");
        finish.is_some_and(|c| c["finishReason"] == "stop")
    }

    /// The write's result, as its output or error chunk says it.
    fn tool_result(&self) -> Option<String> {
        self.chunks.iter().find_map(|c| match c["type"].as_str() {
            Some("tool-output-available") if c.get("preliminary").is_none() => {
                c["output"].as_str().map(str::to_owned)
            }
            Some("tool-output-error") => c["errorText"].as_str().map(str::to_owned),
            _ => None,
        })
    }
}

impl Proof {
    fn spawn(
        &self,
        name: &str,
        store: &[&str],
        ledger: &Path,
        lease_ms: u64,
    ) -> Result<Worker, Box<dyn std::error::Error>> {
        let mut child = Command::new(&self.exe)
            .args(["--worker", name])
            .args(store)
            .arg("--ledger")
            .arg(ledger)
            .args(["--write-ms", &self.write_ms.to_string()])
            .args(["--lease-ms", &lease_ms.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("worker {name} said {line:?}"))?;
        Ok(Worker {
            url: format!("http://127.0.0.1:{port}/api/chat"),
            child,
        })
    }

    async fn post(&self, url: &str, body: Value) -> Result<Answered, reqwest::Error> {
        let asked = Instant::now();
        let response = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let head = asked.elapsed();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let text = response.text().await?;
        // A refusal's kind: `held` is worth sending again, `ended` is final.
        let kind = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|body| body["kind"].as_str().map(str::to_owned));
        let chunks = text
            .split("\n\n")
            .filter_map(|event| event.strip_prefix("data: "))
            .filter(|data| *data != "[DONE]")
            .filter_map(|data| serde_json::from_str(data).ok())
            .collect();
        Ok(Answered {
            status,
            kind,
            retry_after,
            chunks,
            head,
        })
    }

    fn user(row: &str) -> Value {
        json!({"id": format!("u-{row}"), "role": "user", "parts": [{"type": "text", "text": row}]})
    }

    /// Asks every chat of A; each must end waiting for approval.
    async fn ask_all(&self, url: &str) -> Result<Vec<Waiting>, Box<dyn std::error::Error>> {
        let rows: Vec<String> = (0..self.runs).map(|i| format!("row-{i}")).collect();
        let answers = futures_util::stream::iter(rows.iter().cloned())
            .map(|row| async move {
                let body = json!({"id": format!("chat-{row}"), "messages": [Self::user(&row)]});
                (row, self.post(url, body).await)
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        let mut waiting = Vec::new();
        for (row, answered) in answers {
            let answered = answered?;
            let request = answered
                .chunks
                .iter()
                .find(|c| c["type"] == "tool-approval-request")
                .ok_or_else(|| format!("{row}: no approval request in {:?}", answered.chunks))?;
            waiting.push(Waiting {
                row,
                approval_id: request["approvalId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                tool_call_id: request["toolCallId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
        waiting.sort_by(|a, b| a.row.cmp(&b.row));
        Ok(waiting)
    }

    fn approved(waiting: &Waiting) -> Value {
        json!({"id": format!("chat-{}", waiting.row), "messages": [
            Self::user(&waiting.row),
            {"id": format!("a-{}", waiting.row), "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-write", "toolCallId": waiting.tool_call_id, "state": "approval-responded",
                 "input": {"row": waiting.row}, "approval": {"id": waiting.approval_id, "approved": true}},
            ]},
        ]})
    }

    /// Answers `waiting` through `url`, again while the run is held
    /// elsewhere (`409`, `held`; an `ended` one is final), until it
    /// finishes; the result's text, and how
    /// many answers were refused.
    async fn answer(
        &self,
        url: &str,
        waiting: &Waiting,
    ) -> Result<(String, usize, Duration), String> {
        let mut refused = 0;
        let deadline = Instant::now() + Duration::from_millis(self.lease_ms * 10 + 30_000);
        loop {
            let answered = self
                .post(url, Self::approved(waiting))
                .await
                .map_err(|e| format!("{}: {e}", waiting.row))?;
            let held = answered.status == 409 && answered.kind.as_deref() == Some("held");
            if held && Instant::now() < deadline {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            return match (answered.stopped(), answered.tool_result()) {
                (true, Some(result)) => Ok((result, refused, answered.head)),
                _ => Err(format!(
                    "{}: status {}, {:?}",
                    waiting.row, answered.status, answered.chunks
                )),
            };
        }
    }

    /// Answers each of `waiting` through `url`, 64 at once.
    async fn answer_all(
        &self,
        url: &str,
        waiting: &[Waiting],
    ) -> Vec<Result<(String, usize, Duration), String>> {
        futures_util::stream::iter(waiting.iter())
            .map(|w| async move { self.answer(url, w).await })
            .buffer_unordered(64)
            .collect()
            .await
    }

    /// Answers the runs cut off by the kill (`cut`) and those still
    /// waiting (`rest`) through `url`, both at once; the first half's
    /// answers are refused while the dead process's lease holds.
    async fn answer_after_kill(
        &self,
        url: &str,
        cut: &[Waiting],
        rest: &[Waiting],
        killed: Instant,
    ) -> Report {
        let mut report = Report::default();
        let ((cut, took_over), rest) = futures_util::join!(
            async { (self.answer_all(url, cut).await, killed.elapsed()) },
            self.answer_all(url, rest)
        );
        report.takeover_ms = took_over.as_millis() as u64;
        for (outcome, was_cut) in cut
            .into_iter()
            .map(|o| (o, true))
            .chain(rest.into_iter().map(|o| (o, false)))
        {
            match outcome {
                Ok((result, refused, took)) => {
                    report.finished += 1;
                    report.refused_while_held += refused;
                    if was_cut && result.contains("may have run") {
                        report.interrupted += 1;
                    } else if !was_cut && result.starts_with("wrote ") {
                        report.resume_us.push(took.as_micros() as u64);
                    } else {
                        // An approved write that did not run, or a cut one
                        // that read as anything but interrupted.
                        report.lost += 1;
                        eprintln!("lost: the answer ended with {result:?}");
                    }
                }
                Err(why) => {
                    report.lost += 1;
                    eprintln!("lost: {why}");
                }
            }
        }
        report
    }

    /// Starts the writes of `waiting` through `worker` and returns once
    /// every one has reached the ledger (the worker is then to be killed).
    async fn start_writes(
        &self,
        worker: &Worker,
        waiting: &[Waiting],
        ledger: &Path,
    ) -> Result<(), String> {
        let url = worker.url.clone();
        let refusals = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        for w in waiting {
            let (http, body, url) = (self.http.clone(), Self::approved(w), url.clone());
            let (refusals, row) = (Arc::clone(&refusals), w.row.clone());
            // Cut off by the kill: its response never completes.
            tokio::spawn(async move {
                loop {
                    let response = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await;
                    let Ok(response) = response else { return };
                    let status = response.status();
                    // Read on (a client that leaves cancels the run) until
                    // the kill cuts the response off.
                    let text = response.text().await.unwrap_or_default();
                    if status.is_success() {
                        return;
                    }
                    // A store too slow for its timeout (a loaded machine):
                    // the client asks again, as a front end would.
                    refusals
                        .lock()
                        .unwrap()
                        .push(format!("{row}: {status} {text}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while count_lines(ledger).values().sum::<usize>() < waiting.len() {
            if Instant::now() > deadline {
                let refusals = refusals.lock().unwrap();
                return Err(format!(
                    "the writes did not all start within 60 s; {} answers refused, the last: {:?}",
                    refusals.len(),
                    refusals.last()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    fn check_ledger(&self, ledger: &Path, report: &mut Report) {
        let counts = count_lines(ledger);
        report.twice = counts.values().filter(|n| **n > 1).count();
        report.runs = self.runs;
        let unwritten = (0..self.runs)
            .filter(|i| !counts.contains_key(&format!("row-{i}")))
            .count();
        // Every approved write ran (at least once): an approval lost would
        // leave its row out.
        if unwritten > 0 {
            eprintln!("lost: {unwritten} approved rows never reached the ledger");
        }
        report.lost += unwritten;
    }

    async fn redis_round(&self) -> Result<Report, Box<dyn std::error::Error>> {
        let redis = RedisProcess::start("durable-runs")?;
        let url = redis.url();
        let ledger = self.dir.join("redis.ledger");
        let store = ["--store", "redis", "--url", url.as_str()];
        let a = self.spawn("a", &store, &ledger, self.lease_ms)?;
        let b = self.spawn("b", &store, &ledger, self.lease_ms)?;
        let waiting = self.ask_all(&a.url).await?;
        let (cut, rest) = waiting.split_at(waiting.len() / 2);
        self.start_writes(&a, cut, &ledger).await?;
        drop(a);
        let killed = Instant::now();
        let mut report = self.answer_after_kill(&b.url, cut, rest, killed).await;
        self.check_ledger(&ledger, &mut report);
        drop(b);
        drop(redis);
        Ok(report)
    }

    async fn sqlite_round(&self) -> Result<Report, Box<dyn std::error::Error>> {
        let ledger = self.dir.join("sqlite.ledger");
        let path = self.dir.join("runs.db");
        let path = path.to_string_lossy();
        let store = ["--store", "sqlite", "--path", &*path];
        let first = self.spawn("a", &store, &ledger, self.lease_ms)?;
        let waiting = self.ask_all(&first.url).await?;
        let (cut, rest) = waiting.split_at(waiting.len() / 2);
        self.start_writes(&first, cut, &ledger).await?;
        drop(first);
        let killed = Instant::now();
        // The same process id: it takes its own runs back at once.
        let again = self.spawn("a", &store, &ledger, self.lease_ms)?;
        let mut report = self.answer_after_kill(&again.url, cut, rest, killed).await;
        self.check_ledger(&ledger, &mut report);
        Ok(report)
    }
}

/// The `q` quantile of `values` (0 when there are none).
fn percentile(values: &[u64], q: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).copied().unwrap_or(0)
}

/// How many times each row is in the ledger.
fn count_lines(ledger: &Path) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    if let Ok(text) = std::fs::read_to_string(ledger) {
        for line in text.lines().filter(|l| !l.is_empty()) {
            *counts.entry(line.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}
