//! The proof that agent runs outlive their process: N chats, each reaching
//! a write that waits for a person's approval, served by worker processes
//! (this binary, `--worker`) behind the AI SDK chat endpoint, their runs
//! checkpointed in one store; one worker is killed with SIGKILL, and every
//! approval is answered through the other (or through the same one,
//! restarted).
//!
//! Two rounds:
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
//!
//! The write counts its own runs in a ledger file (one line per run,
//! written and synced before it sleeps, so a kill cannot hide one). The
//! proof checks: every run finishes; no answered approval is lost; no
//! write ran twice. It prints the counts and how long resuming took.
//!
//! ```text
//! cargo run --release --example durable_runs --features http,redis,sqlite -- --runs 200
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

use toolstack::agent::store::RunStore;
use toolstack::agent::Agent;
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::http::ai_sdk::ChatEndpoint;
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_demo::redis_server::RedisProcess;
use toolstack_layers::approval::ApprovalLayer;

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const USAGE: &str = "\
Usage: durable_runs [--runs N] [--write-ms MS] [--lease-ms MS]
  (cargo run --release --features http,redis,sqlite --example durable_runs -- ...)

N chats wait for approval on worker processes over Redis, then SQLite; a
worker is killed and every approval is answered through another.
  --runs N         chats per round (20)
  --write-ms MS    how long the approved write takes (1500)
  --lease-ms MS    a running run's lease (2000)
  -h, --help       this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--worker") {
        let name = args.get(at + 1).ok_or("--worker NAME")?.clone();
        return worker(&name, &args).await;
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
    let redis = proof.redis_round().await;
    let sqlite = proof.sqlite_round().await;
    let _ = std::fs::remove_dir_all(&dir);
    let mut failed = false;
    for (round, outcome) in [("redis", redis), ("sqlite", sqlite)] {
        match outcome {
            Ok(report) => {
                println!("{round}: {report}");
                failed |= !report.passed();
            }
            Err(err) => {
                println!("{round}: FAILED: {err}");
                failed = true;
            }
        }
    }
    if failed {
        println!("FAILED");
        std::process::exit(1);
    }
    println!("PASSED");
    Ok(())
}

// ---- the worker -----------------------------------------------------------

/// The model of every chat: asked once, it writes the chat's row; asked
/// after the write's result, it says what became of it.
#[derive(Clone)]
struct RowWriter;

impl tower::Service<ChatRequest> for RowWriter {
    type Response = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;
    type Error = ToolError;
    type Future = futures_util::future::Ready<Result<Self::Response, ToolError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ToolError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let row = request
            .messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let turn = match request.messages.last() {
            Some(Message::Tool { content, .. }) => Turn::new().text(format!("{row}: {content}")),
            _ => Turn::new().tool_call("write", json!({ "row": row }).to_string()),
        };
        let answer = ScriptedModel::new([turn]).call(request).into_inner();
        // One call id per chat, so the ledger can tell the runs apart.
        futures_util::future::ready(answer.map(move |deltas| {
            deltas
                .map(move |delta| match delta {
                    Ok(ModelDelta::ToolCall(mut call)) => {
                        if call.id.is_some() {
                            call.id = Some(format!("call-{row}"));
                        }
                        Ok(ModelDelta::ToolCall(call))
                    }
                    other => other,
                })
                .boxed()
        }))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Row {
    row: String,
}

/// `write`: appends its row to the ledger (synced), then takes its time.
fn toolbox(ledger: PathBuf, write_ms: u64) -> Toolbox {
    let write = tool::from_fn("write", move |Row { row }: Row| {
        let ledger = ledger.clone();
        async move {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&ledger)
                .map_err(|e| ToolError::failed(format!("the ledger: {e}")))?;
            // One write per line: appends from many calls and processes
            // never interleave within it.
            file.write_all(format!("{row}\n").as_bytes())
                .map_err(|e| ToolError::failed(e.to_string()))?;
            file.sync_all()
                .map_err(|e| ToolError::failed(e.to_string()))?;
            tokio::time::sleep(Duration::from_millis(write_ms)).await;
            Ok::<_, ToolError>(format!("wrote {row}"))
        }
    })
    .with_annotations(ToolAnnotations::new().destructive(true));
    let nobody = |_: &ApprovalRequest| async { Decision::deny("nobody here") };
    Toolbox::new().layered(write, ApprovalLayer::new(nobody).caller_decides())
}

async fn worker(name: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let ledger = PathBuf::from(flag(args, "--ledger", String::new()));
    let write_ms: u64 = flag(args, "--write-ms", 1_500);
    let lease = Duration::from_millis(flag(args, "--lease-ms", 2_000));
    let store: Arc<dyn RunStore> = match flag(args, "--store", String::new()).as_str() {
        "redis" => {
            let url: String = flag(args, "--url", String::new());
            Arc::new(toolstack::agent::store::redis::RedisStore::connect(&url).await?)
        }
        "sqlite" => {
            let path: String = flag(args, "--path", String::new());
            Arc::new(toolstack::agent::store::sqlite::SqliteStore::open(path)?)
        }
        other => return Err(format!("--store redis|sqlite, not {other:?}").into()),
    };
    let agent = Agent::new(RowWriter, toolbox(ledger, write_ms))
        .store(store)
        .process_id(name.to_owned())
        .lease(lease);
    let app = axum::Router::new().nest("/api/chat", ChatEndpoint::new(agent).into_router());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening on {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
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
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ms = self.resume_us.clone();
        ms.sort_unstable();
        let at = |q: f64| {
            ms.get(((ms.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        write!(
            f,
            "{}/{} runs finished, {} answered approvals lost, {} writes run twice, {} writes cut off by the kill read as interrupted ({} answers refused while the dead process's lease held); resuming a waiting run (its answer to the response's head) took p50 {:.1} ms, p99 {:.1} ms; the runs cut off by the kill were all finished {} ms after it — {}",
            self.finished,
            self.runs,
            self.lost,
            self.twice,
            self.interrupted,
            self.refused_while_held,
            at(0.5).unwrap_or(0) as f64 / 1000.0,
            at(0.99).unwrap_or(0) as f64 / 1000.0,
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
    chunks: Vec<Value>,
    /// From the request to the response's head: for an answer, the time
    /// to load the run and take it (the endpoint resumes before it
    /// answers).
    head: Duration,
}

impl Proof {
    fn spawn(
        &self,
        name: &str,
        store: &[&str],
        ledger: &Path,
    ) -> Result<Worker, Box<dyn std::error::Error>> {
        let mut child = Command::new(&self.exe)
            .args(["--worker", name])
            .args(store)
            .arg("--ledger")
            .arg(ledger)
            .args(["--write-ms", &self.write_ms.to_string()])
            .args(["--lease-ms", &self.lease_ms.to_string()])
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
            let finish = answered.chunks.iter().rev().find(|c| c["type"] == "finish");
            let stopped = finish.is_some_and(|c| c["finishReason"] == "stop");
            let result = answered
                .chunks
                .iter()
                .find_map(|c| match c["type"].as_str() {
                    Some("tool-output-available") if c.get("preliminary").is_none() => {
                        c["output"].as_str().map(str::to_owned)
                    }
                    Some("tool-output-error") => c["errorText"].as_str().map(str::to_owned),
                    _ => None,
                });
            return match (stopped, result) {
                (true, Some(result)) => Ok((result, refused, answered.head)),
                _ => Err(format!(
                    "{}: status {}, {:?}",
                    waiting.row, answered.status, answered.chunks
                )),
            };
        }
    }

    /// Answers each of `waiting` through `url` at once; fills `report`.
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
        let a = self.spawn("a", &store, &ledger)?;
        let b = self.spawn("b", &store, &ledger)?;
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
        let first = self.spawn("a", &store, &ledger)?;
        let waiting = self.ask_all(&first.url).await?;
        let (cut, rest) = waiting.split_at(waiting.len() / 2);
        self.start_writes(&first, cut, &ledger).await?;
        drop(first);
        let killed = Instant::now();
        // The same process id: it takes its own runs back at once.
        let again = self.spawn("a", &store, &ledger)?;
        let mut report = self.answer_after_kill(&again.url, cut, rest, killed).await;
        self.check_ledger(&ledger, &mut report);
        Ok(report)
    }
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
