//! A service process (`--service`): `RestateRuns` over an agent whose
//! model is scripted per chat — asked first, it calls `write` with the
//! chat's run id; asked after the write's result, it answers with text —
//! and whose one tool, `write`, is not idempotent and waits for the
//! caller's approval. The write appends its line to the ledger (synced)
//! before it takes its time, so a kill cannot hide that it ran.
//!
//! The runs write their events to the log in the parent's
//! `redis-server` (`--redis`, `--prefix`), where the parent's AI SDK chat
//! endpoint reads them.
//!
//! Besides the ledger, the process notes when things happen in a file of
//! times, one line each: `done {run} {pid} {ms}` when a write returns and
//! `end {run} {pid} {ms}` when the model gives a run its last answer
//! (milliseconds since the epoch): what the parent measures resuming by.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use toolstack::agent::restate::{listen, RestateRuns};
use toolstack::agent::run_events::RedisRunEvents;
use toolstack::agent::store::redis::RedisStore;
use toolstack::agent::Agent;
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

use crate::{flag, now_ms};

/// The model of every chat: its user message is the run id; asked once,
/// it writes that id; asked after the write's result, it says what
/// became of it. Whatever process asks, the answer is the same.
#[derive(Clone)]
pub(crate) struct ChatWriter {
    times: PathBuf,
}

impl tower::Service<ChatRequest> for ChatWriter {
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
        let run = request
            .messages
            .iter()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let turn = match request.messages.last() {
            Some(Message::Tool { content, .. }) => {
                note(&self.times, "end", &run);
                Turn::new().text(format!("{run}: {content}"))
            }
            _ => Turn::new().tool_call("write", json!({ "run": run }).to_string()),
        };
        // A script of one turn per request: its call id is `call_0_0`,
        // so the approval id is `{run}:call_0_0` on every process.
        let answer = ScriptedModel::new([turn]).call(request).into_inner();
        futures_util::future::ready(answer.map(StreamExt::boxed))
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    run: String,
}

/// Appends `line` to `path` in one write (appends from many calls and
/// processes never interleave within it), synced when `sync`.
fn append(path: &Path, line: &str, sync: bool) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(line.as_bytes())?;
    file.flush()?;
    if sync {
        file.sync_data()?;
    }
    Ok(())
}

/// Notes `what` happened to `run` now, in the file of times; a note that
/// cannot be written is said on stderr (the parent then misses a time,
/// never a write).
fn note(times: &Path, what: &str, run: &str) {
    let line = format!("{what} {run} {} {}\n", std::process::id(), now_ms());
    if let Err(err) = append(times, &line, false) {
        eprintln!("service {}: {}: {err}", std::process::id(), times.display());
    }
}

/// How long the write of `run` takes: between `min` and `max` ms, the same
/// for a run on every process.
fn write_time(run: &str, min: u64, max: u64) -> Duration {
    let hash = run.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    Duration::from_millis(min + hash % (max.saturating_sub(min) + 1))
}

/// `write` (not idempotent): appends `{run} {pid} {ms}` to the ledger,
/// synced, then takes its time; behind an approval layer whose own
/// approver denies, so only the caller's answer lets it run.
fn toolbox(ledger: PathBuf, times: PathBuf, min_ms: u64, max_ms: u64) -> Toolbox {
    let write = tool::from_fn("write", move |WriteArgs { run }: WriteArgs| {
        let (ledger, times) = (ledger.clone(), times.clone());
        async move {
            let pid = std::process::id();
            append(&ledger, &format!("{run} {pid} {}\n", now_ms()), true)
                .map_err(|e| ToolError::failed(format!("the ledger {}: {e}", ledger.display())))?;
            tokio::time::sleep(write_time(&run, min_ms, max_ms)).await;
            note(&times, "done", &run);
            Ok::<_, ToolError>(format!("wrote {run} in process {pid}"))
        }
    })
    .with_annotations(ToolAnnotations::new().idempotent(false).destructive(true));
    let nobody = |_: &ApprovalRequest| async { Decision::deny("only the caller decides") };
    Toolbox::new().layered(write, ApprovalLayer::new(nobody).caller_decides())
}

/// The agent: the scripted writer and its `write`. The service processes
/// run it; the parent's chat endpoint is given the same one.
pub(crate) fn agent(
    ledger: PathBuf,
    times: PathBuf,
    min_ms: u64,
    max_ms: u64,
) -> Agent<ChatWriter> {
    Agent::new(
        ChatWriter {
            times: times.clone(),
        },
        toolbox(ledger, times, min_ms, max_ms),
    )
}

/// Serves the runs on `127.0.0.1:{--port}` (0: a free port) until killed;
/// says `listening on {port}` on stdout once it listens.
pub(crate) async fn service(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let ledger = PathBuf::from(flag(args, "--ledger", String::new()));
    let times = PathBuf::from(flag(args, "--times", String::new()));
    if ledger.as_os_str().is_empty() || times.as_os_str().is_empty() {
        return Err("--service needs --ledger FILE and --times FILE".into());
    }
    let port: u16 = flag(args, "--port", 0);
    let min_ms: u64 = flag(args, "--write-ms-min", 200);
    let max_ms: u64 = flag(args, "--write-ms-max", 500).max(min_ms);
    let suspend_ms: u64 = flag(args, "--suspend-ms", 1_000);
    let waiting: usize = flag(args, "--max-waiting", 10_000);
    let redis = flag(args, "--redis", String::new());
    let prefix = flag(args, "--prefix", String::new());
    if redis.is_empty() || prefix.is_empty() {
        return Err("--service needs --redis URL and --prefix P (the runs' events log)".into());
    }
    let store = RedisStore::connect(&redis).await?.prefix(&prefix);
    let runs = RestateRuns::new(agent(ledger, times, min_ms, max_ms))
        // The runs' events, where the parent's chat endpoint reads them.
        .events(RedisRunEvents::new(&store))
        // Nobody answering in time would be an approval lost: the proof
        // answers every one, so the timeout is far past its deadline.
        .approval_timeout(Duration::from_secs(3600))
        .max_waiting_runs(waiting)
        .suspend_after(Duration::from_millis(suspend_ms));
    // A restarted process takes its killed predecessor's port: the kernel
    // frees it at once, but try a while.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let tried = std::time::Instant::now();
    let listener = loop {
        match listen(addr) {
            Ok(listener) => break listener,
            Err(e) if tried.elapsed() < Duration::from_secs(10) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(format!("the service's address {addr}: {e}").into()),
        }
    };
    println!("listening on {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    runs.serve(listener).await;
    Ok(())
}
