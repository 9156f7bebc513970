//! The proof that agent runs on Restate outlive the processes that run
//! them — and the server that keeps them: one `restate-server` of the
//! proof's own and two service processes (this binary, `--service`),
//! each serving `RestateRuns` for the same agent, behind ONE deployment
//! address (a TCP proxy in this process, each connection to a live
//! service process in turn), so Restate retries a killed process's
//! invocations on the other.
//!
//! Every chat goes through the AI SDK chat endpoint, served by this
//! process on a loopback port (`ChatEndpoint::restate`, a real HTTP
//! server): the runs write their events to a log in a `redis-server` of
//! the proof's own (`RedisRunEvents`), where the endpoint reads them. N
//! chats post their user message; each model calls `write` with its
//! chat's name, a tool not idempotent behind an approval layer that only
//! the caller decides, so every response ends with the approval request
//! (`tool-approval-request`, then `finish` `tool-calls`) and every run
//! waits — suspended: the proof checks, by the admin API's SQL, that no
//! process holds any run before it answers. Then every approval is
//! answered `approved: true` the protocol's way (the conversation again,
//! its assistant message's tool part `approval-responded`), in random
//! order, many at once, each answer's response read to its end; each
//! write appends its line to a ledger (synced) before it takes its time,
//! so a kill cannot hide that it ran. One round of chats meets two kills,
//! at different times:
//!
//! * **service kill**: once a third of the answers are in, the first
//!   service process seen with a write in flight is killed with SIGKILL
//!   and started again on its port;
//! * **restate kill**: once two thirds are in, `restate-server` itself is
//!   killed with SIGKILL while answers are in flight, and started again
//!   on its data directory; an answer the endpoint refuses meanwhile
//!   (`503`, the ingress down) is sent again, as a client would, and
//!   counted.
//!
//! What each client is told is what its answer's response says: the
//! write's output (`tool-output-available`) or that it may have run
//! (`tool-output-error`), the run's last text, `finish` `stop`. Then every
//! run's output is read from Restate (`attach`). Pass: every run finished;
//! every client told what its run's output says; every run told "wrote"
//! has its line in the ledger exactly once, every run told "the call may
//! have run" at most once, no line twice; 0 approvals lost (every answer's
//! response read to its end within its timeout, and every run's tool
//! result is the write's or "may have run" — never a denial, a timeout
//! nor a new run); every seat among the runs waiting given back. It prints how
//! the work spread over the processes, how long resuming took after each
//! kill (from the restart to the next write and the next run's end; p50
//! and p99 from an answer to its run's end around each kill), and exits
//! non-zero when a check fails.
//!
//! ```text
//! cargo build --release --features restate,http,redis --example restate_runs
//! target/release/examples/restate_runs --chats 1000
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};

use toolstack::agent::run_events::RedisRunEvents;
use toolstack::agent::store::redis::RedisStore;
use toolstack::http::ai_sdk::{ChatEndpoint, RestateIngress};
use toolstack_demo::redis_server::RedisProcess;
use toolstack_demo::restate_server::RestateProcess;

mod service;

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Milliseconds since the epoch: the clock the parent and the service
/// processes share.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

const USAGE: &str = "\
Usage: restate_runs [--chats N] [options]
  (cargo run --release --features restate,http,redis --example restate_runs -- ...;
   needs restate-server: `npm ci` in restate/, or TOOLSTACK_RESTATE_SERVER;
   and redis-server on PATH)

N chats on two service processes behind one Restate deployment, each
waiting for the approval of a write that is not idempotent; every approval
answered in random order through the AI SDK chat endpoint while a
service process, then restate-server itself, is killed with SIGKILL and
restarted.
  --chats N             chats (1000)
  --answers-at-once C   approvals sent at once and not yet taken by the
                        endpoint (32)
  --responses-open R    answers' responses open at once, each read to its
                        run's end (4 × C)
  --write-ms-min MS     the shortest write (200)
  --write-ms-max MS     the longest write (500)
  --suspend-ms MS       a waiting run's invocation suspends after (1000)
  --restate-down-ms MS  restate-server stays down this long before its
                        restart (1000)
  --response-s S        each response of the endpoint read to its end
                        within this, or the proof fails (120)
  --seed S              the answers' order (1)
  --deadline-s S        the proof fails past this (900)
  -h, --help            this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--service") {
        return service::service(&args).await;
    }
    let at_once = flag(&args, "--answers-at-once", 32_usize).max(1);
    let settings = Settings {
        chats: flag(&args, "--chats", 1000_usize).max(1),
        at_once,
        responses_open: flag(&args, "--responses-open", 4 * at_once).max(at_once),
        write_ms: (
            flag(&args, "--write-ms-min", 200),
            flag(&args, "--write-ms-max", 500),
        ),
        suspend_ms: flag(&args, "--suspend-ms", 1_000),
        down: Duration::from_millis(flag(&args, "--restate-down-ms", 1_000)),
        seed: flag(&args, "--seed", 1),
        response: Duration::from_secs(flag(&args, "--response-s", 120)),
        deadline: Instant::now() + Duration::from_secs(flag(&args, "--deadline-s", 900)),
    };
    let dir = std::env::temp_dir().join(format!("toolstack-restate-proof-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = prove(&settings, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    match outcome {
        Ok(true) => {
            println!("PASSED");
            Ok(())
        }
        Ok(false) => {
            println!("FAILED");
            std::process::exit(1);
        }
        Err(err) => {
            println!("FAILED: {err}");
            std::process::exit(1);
        }
    }
}

struct Settings {
    chats: usize,
    at_once: usize,
    /// Answers' responses open at once (streaming to their run's end).
    responses_open: usize,
    write_ms: (u64, u64),
    suspend_ms: u64,
    down: Duration,
    seed: u64,
    response: Duration,
    deadline: Instant,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

// ---- the service processes and the proxy in front of them -----------------

/// A service process, killed with SIGKILL on drop.
struct ServiceProcess {
    child: Child,
    port: u16,
}

impl ServiceProcess {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Files {
    ledger: PathBuf,
    times: PathBuf,
    /// The runs' events log: the Redis and the keys' prefix.
    redis: String,
    prefix: String,
}

/// Starts a service process on `port` (0: a free one); returns once it
/// listens.
fn spawn_service(settings: &Settings, files: &Files, port: u16) -> Result<ServiceProcess, Error> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--service")
        .args(["--port", &port.to_string()])
        .arg("--ledger")
        .arg(&files.ledger)
        .arg("--times")
        .arg(&files.times)
        .args(["--redis", &files.redis, "--prefix", &files.prefix])
        .args(["--write-ms-min", &settings.write_ms.0.to_string()])
        .args(["--write-ms-max", &settings.write_ms.1.to_string()])
        .args(["--suspend-ms", &settings.suspend_ms.to_string()])
        // Room for every chat to wait at once.
        .args(["--max-waiting", &(settings.chats + 16).to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("the service's stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let port = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|port| port.parse().ok());
    match port {
        Some(port) => Ok(ServiceProcess { child, port }),
        None => {
            let _ = child.kill();
            Err(format!("a service process said {line:?}, not `listening on PORT`").into())
        }
    }
}

/// The one deployment address: each connection Restate opens goes to the
/// next service process in turn, or past it to one that accepts.
struct Proxy {
    port: u16,
    /// Connections made to each backend.
    connections: Arc<Vec<AtomicUsize>>,
}

async fn proxy(backends: Vec<u16>) -> Result<Proxy, Error> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let port = listener.local_addr()?.port();
    let connections: Arc<Vec<AtomicUsize>> =
        Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        let mut next = 0;
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let _ = inbound.set_nodelay(true);
            let first = next;
            next = (next + 1) % backends.len();
            let (backends, counted) = (backends.clone(), Arc::clone(&counted));
            tokio::spawn(async move {
                for at in (0..backends.len()).map(|k| (first + k) % backends.len()) {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", backends[at])).await
                    else {
                        continue;
                    };
                    let _ = outbound.set_nodelay(true);
                    counted[at].fetch_add(1, Ordering::Relaxed);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
                // None accepts: the connection closes, and Restate tries
                // again.
            });
        }
    });
    Ok(Proxy { port, connections })
}

// ---- talking to the ingress ----------------------------------------------

#[derive(Clone)]
struct Ingress {
    http: reqwest::Client,
    url: String,
}

impl Ingress {
    /// `POST path` with `body` (`null`: no body at all) or, without one,
    /// `GET path`: the status and the answer, JSON if it is JSON.
    async fn call(&self, path: &str, body: Option<Value>) -> Result<(u16, Value), reqwest::Error> {
        let url = format!("{}{path}", self.url);
        let request = match body {
            Some(Value::Null) => self.http.post(&url),
            Some(body) => self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.to_string()),
            None => self.http.get(&url),
        };
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// `call` again (every 100 ms) until `done` accepts its answer, or
    /// the deadline passes; how many tries it took. What the server says
    /// while it restarts, or a service process while it dies, is not an
    /// answer.
    async fn until(
        &self,
        path: &str,
        body: Option<Value>,
        deadline: Instant,
        done: impl Fn(u16, &Value) -> bool,
    ) -> Result<(Value, usize), String> {
        let mut tries = 0;
        loop {
            tries += 1;
            let last = match self.call(path, body.clone()).await {
                Ok((status, value)) if done(status, &value) => return Ok((value, tries)),
                Ok((status, value)) => format!("{status} {value}"),
                Err(err) => err.to_string(),
            };
            if Instant::now() > deadline {
                return Err(format!("{path}: {tries} tries, the last answered {last}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

// ---- talking to the AI SDK chat endpoint ------------------------------------

/// A client of the chat endpoint.
#[derive(Clone)]
struct Chats {
    http: reqwest::Client,
    url: String,
}

/// What the endpoint answered one request: a stream's chunks (read to its
/// `[DONE]`), or a refusal (its status and JSON).
enum Reply {
    Stream(Vec<Value>),
    Refused(u16, Value),
}

impl Chats {
    /// Sends `body`; `headers` is told the status as soon as it comes.
    /// The whole response is read within `within`.
    async fn post(
        &self,
        body: &Value,
        within: Duration,
        headers: impl FnOnce(u16),
    ) -> Result<Reply, String> {
        let exchange = async {
            let response = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| format!("the endpoint did not answer: {e}"))?;
            let status = response.status().as_u16();
            headers(status);
            let text = response
                .text()
                .await
                .map_err(|e| format!("the response ({status}) broke off: {e}"))?;
            Ok::<_, String>((status, text))
        };
        let (status, text) = tokio::time::timeout(within, exchange)
            .await
            .map_err(|_| format!("timed out: no whole response within {within:?}"))??;
        match status {
            200 => chunks(&text).map(Reply::Stream),
            _ => Ok(Reply::Refused(
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )),
        }
    }
}

/// A stream's chunks, in order; it must end with `[DONE]`. Comments (the
/// keep-alive) are skipped.
fn chunks(text: &str) -> Result<Vec<Value>, String> {
    let mut chunks = Vec::new();
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if done {
            return Err(format!("a chunk after [DONE]: {data}"));
        }
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk = serde_json::from_str(data)
            .map_err(|e| format!("a chunk that is not JSON ({e}): {data}"))?;
        chunks.push(chunk);
    }
    match done {
        true => Ok(chunks),
        false => Err(format!(
            "the stream ended without [DONE], after {} chunks",
            chunks.len()
        )),
    }
}

fn of_type<'a>(chunks: &'a [Value], kind: &str) -> Vec<&'a Value> {
    chunks.iter().filter(|c| c["type"] == kind).collect()
}

/// The last `finish` chunk's reason.
fn finish_reason(chunks: &[Value]) -> Option<&str> {
    of_type(chunks, "finish")
        .last()
        .and_then(|c| c["finishReason"].as_str())
}

fn text_of(chunks: &[Value]) -> String {
    of_type(chunks, "text-delta")
        .iter()
        .filter_map(|c| c["delta"].as_str())
        .collect()
}

/// The chat's user message: its name, which is what the model writes.
fn user_message(chat: &str) -> Value {
    json!({"id": format!("u-{chat}"), "role": "user", "parts": [{"type": "text", "text": chat}]})
}

/// What a chat's first response asked: the approval of its write.
#[derive(Clone)]
struct Asked {
    chat: String,
    /// The run, from the approval id (`{run}:{call}`).
    run: String,
    approval_id: String,
    call_id: String,
    input: Value,
}

/// The first response of `chat`: it must ask for the approval of the
/// write of the chat's name, and end there (`finish` `tool-calls`).
fn asked(chat: &str, chunks: &[Value]) -> Result<Asked, String> {
    let requests = of_type(chunks, "tool-approval-request");
    let [request] = requests[..] else {
        return Err(format!(
            "{chat}: {} approval requests in its first response: {}",
            requests.len(),
            json!(chunks)
        ));
    };
    let approval_id = request["approvalId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let call_id = request["toolCallId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let input = of_type(chunks, "tool-input-available")
        .into_iter()
        .find(|c| c["toolCallId"] == call_id.as_str() && c["toolName"] == "write")
        .map(|c| c["input"].clone())
        .ok_or_else(|| {
            format!(
                "{chat}: the approval asked is not of a write: {}",
                json!(chunks)
            )
        })?;
    if input["run"] != chat {
        return Err(format!("{chat}: the write asked about is {input}"));
    }
    if request["isAutomatic"] == true {
        return Err(format!(
            "{chat}: the call was decided without the person: {request}"
        ));
    }
    if finish_reason(chunks) != Some("tool-calls")
        || chunks.last().map(|c| &c["type"]) != Some(&json!("finish"))
    {
        return Err(format!(
            "{chat}: the first response does not end with finish tool-calls: {}",
            json!(chunks)
        ));
    }
    let run = approval_id
        .split_once(':')
        .map(|(run, _)| run.to_owned())
        .filter(|run| !run.is_empty())
        .ok_or_else(|| format!("{chat}: the approval id {approval_id:?} names no run"))?;
    Ok(Asked {
        chat: chat.to_owned(),
        run,
        approval_id,
        call_id,
        input,
    })
}

/// The answer: the conversation again, its assistant message's tool part
/// `approval-responded`, approved.
fn answer_body(asked: &Asked) -> Value {
    let assistant = json!({
        "id": format!("a-{}", asked.chat), "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-write", "toolCallId": asked.call_id, "state": "approval-responded",
             "input": asked.input, "approval": {"id": asked.approval_id, "approved": true}},
        ],
    });
    json!({"id": asked.chat, "messages": [user_message(&asked.chat), assistant]})
}

// ---- what the files say ----------------------------------------------------

/// One line of the ledger: a write began.
#[derive(Clone, Debug)]
struct Written {
    run: String,
    pid: u32,
    at: u64,
}

fn read_ledger(ledger: &Path) -> Result<Vec<Written>, String> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    // A line being written is not read yet.
    let whole = &text[..text.rfind('\n').map_or(0, |at| at + 1)];
    whole
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let written = match fields[..] {
                [run, pid, at] => pid
                    .parse()
                    .ok()
                    .zip(at.parse().ok())
                    .map(|(pid, at)| Written {
                        run: run.to_owned(),
                        pid,
                        at,
                    }),
                _ => None,
            };
            written.ok_or_else(|| format!("{}: a torn line {line:?}", ledger.display()))
        })
        .collect()
}

/// The file of times: for each of `done` and `end`, each run's first time
/// and the process that noted it.
#[derive(Default)]
struct Times {
    done: HashMap<String, (u32, u64)>,
    end: HashMap<String, (u32, u64)>,
}

fn read_times(times: &Path) -> Times {
    let text = std::fs::read_to_string(times).unwrap_or_default();
    let mut read = Times::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [what, run, pid, at] = fields[..] else {
            continue;
        };
        let (Ok(pid), Ok(at)) = (pid.parse::<u32>(), at.parse::<u64>()) else {
            continue;
        };
        let map = match what {
            "done" => &mut read.done,
            "end" => &mut read.end,
            _ => continue,
        };
        let first = map.entry(run.to_owned()).or_insert((pid, at));
        if at < first.1 {
            *first = (pid, at);
        }
    }
    read
}

/// The writes begun and not done on the processes `live`: `(run, pid)`.
/// (A write a kill cut off earlier is never done, and not in flight.)
fn in_flight(files: &Files, live: &[u32]) -> Result<Vec<(String, u32)>, String> {
    let times = read_times(&files.times);
    Ok(read_ledger(&files.ledger)?
        .into_iter()
        .filter(|w| live.contains(&w.pid) && !times.done.contains_key(&w.run))
        .map(|w| (w.run, w.pid))
        .collect())
}

/// The `q` quantile of `values` (0 when there are none).
fn percentile(values: &[u64], q: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).copied().unwrap_or(0)
}

/// The runs in a random order (xorshift, from `seed`).
fn shuffled(runs: &[String], seed: u64) -> Vec<String> {
    let mut state = seed.max(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut order = runs.to_vec();
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

// ---- the proof -----------------------------------------------------------

/// One approval's answer: when it was first sent and when the endpoint
/// took it (its response's headers), how many sends it took and what
/// refused the ones before, the chunks of the response read to its end.
struct Answered {
    asked: Asked,
    sent: u64,
    accepted: u64,
    tries: usize,
    refusals: Vec<String>,
    chunks: Vec<Value>,
}

/// What a kill did, and how long things took to go on after it.
struct Kill {
    what: String,
    /// When it was killed, and when it answered again.
    killed: u64,
    restarted: u64,
    /// The writes in flight at the kill.
    cut: Vec<String>,
    /// The answers sent and not yet taken at the kill; the answers'
    /// responses not ended.
    answers_in_flight: usize,
    responses_open: usize,
}

async fn prove(settings: &Settings, dir: &Path) -> Result<bool, Error> {
    let redis = RedisProcess::start("restate-runs-proof").map_err(|e| e.to_string())?;
    let files = Files {
        ledger: dir.join("ledger"),
        times: dir.join("times"),
        redis: redis.url(),
        prefix: "restate-runs-proof:".to_owned(),
    };
    let mut restate = RestateProcess::start("restate-runs-proof")?;
    let mut services = vec![
        spawn_service(settings, &files, 0)?,
        spawn_service(settings, &files, 0)?,
    ];
    let proxy = proxy(services.iter().map(|s| s.port).collect()).await?;
    let deployment = format!("http://127.0.0.1:{}", proxy.port);
    tokio::task::block_in_place(|| restate.register(&deployment))?;
    let ingress = Ingress {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
        url: restate.ingress_url(),
    };
    // The AI SDK chat endpoint, on a loopback port of this process: runs
    // started and answered through the ingress, their events read from
    // the log the service processes write to.
    let store = RedisStore::connect(&files.redis)
        .await?
        .prefix(&files.prefix);
    let endpoint = ChatEndpoint::new(service::agent(
        files.ledger.clone(),
        files.times.clone(),
        settings.write_ms.0,
        settings.write_ms.1,
    ))
    .restate(RestateIngress::new(
        restate.ingress_url(),
        RedisRunEvents::new(&store),
    ));
    let app: axum::Router = endpoint.into_router();
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let chats = Chats {
        http: reqwest::Client::new(),
        url: format!("http://127.0.0.1:{}/", listener.local_addr()?.port()),
    };
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            eprintln!("the chat endpoint's server stopped: {err}");
        }
    });
    let mut pids: Vec<(String, u32)> = vec![
        ("service 0".to_owned(), services[0].pid()),
        ("service 1".to_owned(), services[1].pid()),
    ];
    println!(
        "restate runs: {} chats through the AI SDK chat endpoint ({}, events from redis-server at {}) on 2 service processes (pids {} and {}) behind one deployment ({deployment}, a TCP proxy), restate-server at {}; writes of {}–{} ms, suspended after {} ms waiting",
        settings.chats,
        chats.url,
        files.redis,
        pids[0].1,
        pids[1].1,
        restate.ingress_url(),
        settings.write_ms.0,
        settings.write_ms.1,
        settings.suspend_ms,
    );

    // Every chat starts through the endpoint, and its response ends with
    // the approval request.
    let names: Vec<String> = (0..settings.chats).map(|i| format!("chat-{i}")).collect();
    let began = Instant::now();
    let deadline = settings.deadline;
    let started = futures_util::stream::iter(names.iter().cloned())
        .map(|chat| {
            let chats = chats.clone();
            async move {
                let body = json!({"id": chat, "messages": [user_message(&chat)]});
                match chats.post(&body, settings.response, |_| {}).await {
                    Ok(Reply::Stream(chunks)) => asked(&chat, &chunks),
                    Ok(Reply::Refused(status, why)) => Err(format!(
                        "{chat}: the endpoint refused the chat: {status} {why}"
                    )),
                    Err(why) => Err(format!("{chat}: {why}")),
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let mut all_asked = Vec::with_capacity(settings.chats);
    for outcome in started {
        all_asked.push(outcome?);
    }
    let runs: Vec<String> = all_asked.iter().map(|a| a.chat.clone()).collect();
    let run_of: HashMap<String, String> = all_asked
        .iter()
        .map(|a| (a.chat.clone(), a.run.clone()))
        .collect();
    println!(
        "asked: all {} chats wait for their approval (each first response ends with the tool-approval-request of its write and finish tool-calls), {:.1} s after the first started",
        settings.chats,
        began.elapsed().as_secs_f64()
    );
    // While they wait, no process holds them: every run's invocation
    // suspends.
    let asked_at = Instant::now();
    let suspended = loop {
        let statuses = run_statuses(&ingress.http, &restate.admin_url()).await?;
        let suspended = statuses.get("suspended").copied().unwrap_or(0);
        if suspended == settings.chats as u64 {
            break true;
        }
        if asked_at.elapsed() > Duration::from_secs(60) {
            println!("suspended: FAILED: 60 s after every chat was asked, the runs' invocations are {statuses:?}");
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if suspended {
        println!(
            "suspended: all {} runs' invocations, {:.1} s after the last was asked",
            settings.chats,
            asked_at.elapsed().as_secs_f64()
        );
    }

    // Every approval answered through the endpoint, in random order, many
    // at once, each response read to its end; the kills come while they
    // go. An answer the endpoint refuses with 503 (it could not reach the
    // ingress, or read the events) is sent again, as a client would.
    let accepted = Arc::new(AtomicUsize::new(0));
    let sending = Arc::new(AtomicUsize::new(0));
    // Answers whose response has not ended.
    let open = Arc::new(AtomicUsize::new(0));
    let answering = {
        let (chats, accepted, sending, open) = (
            chats.clone(),
            Arc::clone(&accepted),
            Arc::clone(&sending),
            Arc::clone(&open),
        );
        let by_chat: HashMap<String, Asked> = all_asked
            .iter()
            .map(|a| (a.chat.clone(), a.clone()))
            .collect();
        let order: Vec<Asked> = shuffled(&runs, settings.seed)
            .into_iter()
            .map(|chat| by_chat[&chat].clone())
            .collect();
        let (responses_open, within) = (settings.responses_open, settings.response);
        // At most `at_once` answers sent and not yet taken (their
        // response's headers); more responses open, each streaming to its
        // run's end: a person answers whether or not other chats' runs
        // have ended, so answers go on while restate-server is down.
        let taking = Arc::new(tokio::sync::Semaphore::new(settings.at_once));
        tokio::spawn(async move {
            futures_util::stream::iter(order)
                .map(|asked| {
                    let (chats, accepted, sending, open, taking) = (
                        chats.clone(),
                        Arc::clone(&accepted),
                        Arc::clone(&sending),
                        Arc::clone(&open),
                        Arc::clone(&taking),
                    );
                    async move {
                        open.fetch_add(1, Ordering::SeqCst);
                        let body = answer_body(&asked);
                        let mut sent = None;
                        let mut tries = 0;
                        let mut refusals = Vec::new();
                        let mut taken: Option<u64> = None;
                        let outcome = loop {
                            let permit = Arc::clone(&taking).acquire_owned().await;
                            if sent.is_none() {
                                sent = Some(now_ms());
                                sending.fetch_add(1, Ordering::SeqCst);
                            }
                            tries += 1;
                            let taken_at = &mut taken;
                            let (sending, accepted) = (&sending, &accepted);
                            let took = move |status: u16| {
                                drop(permit);
                                if status == 200 {
                                    *taken_at = Some(now_ms());
                                    sending.fetch_sub(1, Ordering::SeqCst);
                                    accepted.fetch_add(1, Ordering::SeqCst);
                                }
                            };
                            match chats.post(&body, within, took).await {
                                Ok(Reply::Stream(chunks)) => break Ok(chunks),
                                Ok(Reply::Refused(503, why)) if Instant::now() < deadline => {
                                    refusals.push(format!("503 {}", why["kind"]));
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                }
                                Ok(Reply::Refused(status, why)) => {
                                    break Err(format!(
                                    "{}: the answer was refused ({tries} sends): {status} {why}",
                                    asked.chat
                                ))
                                }
                                Err(why) => {
                                    break Err(format!(
                                        "{}: the answer's response ({tries} sends): {why}",
                                        asked.chat
                                    ))
                                }
                            }
                        };
                        if taken.is_none() {
                            sending.fetch_sub(1, Ordering::SeqCst);
                            accepted.fetch_add(1, Ordering::SeqCst);
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                        outcome.map(|chunks| Answered {
                            sent: sent.unwrap_or_default(),
                            accepted: taken.unwrap_or_else(now_ms),
                            tries,
                            refusals,
                            chunks,
                            asked,
                        })
                    }
                })
                .buffer_unordered(responses_open)
                .collect::<Vec<_>>()
                .await
        })
    };

    let mut kills = Vec::new();
    // The service kill: a third of the answers in, the first process seen
    // with a write in flight.
    let third = settings.chats.div_ceil(3);
    loop {
        if Instant::now() > deadline {
            return Err("no write was in flight on a service process to kill".into());
        }
        if accepted.load(Ordering::SeqCst) >= third {
            let live: Vec<u32> = services.iter().map(ServiceProcess::pid).collect();
            let flying = in_flight(&files, &live)?;
            if let Some(at) = services
                .iter()
                .position(|s| flying.iter().any(|(_, pid)| *pid == s.pid()))
            {
                let pid = services[at].pid();
                let in_flight_now = sending.load(Ordering::SeqCst);
                let open_now = open.load(Ordering::SeqCst);
                services[at].kill();
                let killed = now_ms();
                let cut = flying
                    .into_iter()
                    .filter(|(_, p)| *p == pid)
                    .map(|(run, _)| run)
                    .collect();
                let port = services[at].port;
                services[at] =
                    tokio::task::block_in_place(|| spawn_service(settings, &files, port))?;
                let restarted = now_ms();
                pids.push((format!("service {at}, restarted"), services[at].pid()));
                kills.push(Kill {
                    what: format!("service kill (service {at}, pid {pid})"),
                    killed,
                    restarted,
                    cut,
                    answers_in_flight: in_flight_now,
                    responses_open: open_now,
                });
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // The restate kill: two thirds in, answers in flight.
    let two_thirds = (settings.chats * 2).div_ceil(3);
    loop {
        if Instant::now() > deadline {
            return Err("the answers did not reach two thirds in time".into());
        }
        if accepted.load(Ordering::SeqCst) >= two_thirds {
            let live: Vec<u32> = services.iter().map(ServiceProcess::pid).collect();
            let cut = in_flight(&files, &live)?
                .into_iter()
                .map(|(run, _)| run)
                .collect();
            let in_flight_now = sending.load(Ordering::SeqCst);
            let open_now = open.load(Ordering::SeqCst);
            restate.kill();
            let killed = now_ms();
            tokio::time::sleep(settings.down).await;
            tokio::task::block_in_place(|| restate.restart())?;
            kills.push(Kill {
                what: "restate kill (restate-server, restarted on its data directory)".to_owned(),
                killed,
                restarted: now_ms(),
                cut,
                answers_in_flight: in_flight_now,
                responses_open: open_now,
            });
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let answers = answering.await?;
    println!(
        "answered: {} approvals through the endpoint, their responses read to their end, {:.1} s after the first chat started",
        answers.len(),
        began.elapsed().as_secs_f64()
    );

    // Every run's output, as Restate keeps it: what the clients were told
    // is checked against it.
    let outputs = futures_util::stream::iter(runs.iter().cloned())
        .map(|chat| {
            let ingress = ingress.clone();
            let path = format!("/restate/workflow/AgentRuns/{}/attach", run_of[&chat]);
            async move {
                let output = ingress
                    .until(&path, None, deadline, |status, _| status == 200)
                    .await
                    .map(|(output, _)| output);
                (chat, output)
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;

    let report = Report::judge(settings, &files, &runs, answers, outputs, &kills)?;
    for line in report.lines(&kills, &pids, &proxy, &services) {
        println!("{line}");
    }
    // Every seat among the runs waiting given back (the call gives its
    // seat in a message of its own, soon after its decision).
    let (seats, _) = ingress
        .until(
            "/AgentWaiting/runs/count",
            Some(Value::Null),
            Instant::now() + Duration::from_secs(30),
            |status, count| status == 200 && count == 0,
        )
        .await
        .map_or_else(|why| (false, why), |_| (true, String::new()));
    println!(
        "seats: {} — {}",
        match seats {
            true => "0 runs counted waiting at the end".to_owned(),
            false => format!(
                "runs still counted waiting 30 s after the end: {}",
                seats_why(&ingress).await
            ),
        },
        if seats { "ok" } else { "FAILED" }
    );
    Ok(report.passed() && suspended && seats)
}

/// What the count of runs waiting says now.
async fn seats_why(ingress: &Ingress) -> String {
    match ingress
        .call("/AgentWaiting/runs/count", Some(Value::Null))
        .await
    {
        Ok((status, count)) => format!("{status} {count}"),
        Err(err) => err.to_string(),
    }
}

/// How many of the runs' invocations are in each status, by the admin
/// API's SQL (`sys_invocation`).
async fn run_statuses(http: &reqwest::Client, admin: &str) -> Result<BTreeMap<String, u64>, Error> {
    let query = "SELECT status, COUNT(*) AS n FROM sys_invocation \
                 WHERE target_service_name = 'AgentRuns' AND target_handler_name = 'run' \
                 GROUP BY status";
    let text = http
        .post(format!("{admin}/query"))
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(json!({ "query": query }).to_string())
        .send()
        .await?
        .text()
        .await?;
    let body: Value = serde_json::from_str(&text)?;
    let rows = body["rows"]
        .as_array()
        .ok_or_else(|| format!("the admin API's query answered {text}"))?;
    Ok(rows
        .iter()
        .map(|row| {
            let status = row["status"].as_str().unwrap_or("unknown").to_owned();
            (status, row["n"].as_u64().unwrap_or(0))
        })
        .collect())
}

// ---- the judgement ---------------------------------------------------------

/// What a client was told by its answer's response.
enum Told {
    /// The write's output, and the process it names.
    Wrote(String, u32),
    /// A `tool-output-error` that says the call may have run.
    MayHaveRun,
}

/// What `answer`'s response told its client: the write's output, or that
/// it may have run; then the run's last text, which says so, and `finish`
/// `stop` — in the same assistant message, asking nothing again.
fn told_by(answer: &Answered) -> Result<Told, String> {
    let (chat, chunks) = (&answer.asked.chat, &answer.chunks);
    let shown = |why: String| format!("{chat}: its answer's response {why}: {}", json!(chunks));
    if chunks.first().map(|c| &c["messageId"]) != Some(&json!(format!("a-{chat}"))) {
        return Err(shown("does not go on in the assistant message".to_owned()));
    }
    for kind in ["tool-approval-request", "tool-output-denied", "error"] {
        if !of_type(chunks, kind).is_empty() {
            return Err(shown(format!("has a {kind} chunk")));
        }
    }
    let call = answer.asked.call_id.as_str();
    // A preliminary output (the tool's own, as it streams) is not its
    // result.
    let outputs: Vec<&Value> = of_type(chunks, "tool-output-available")
        .into_iter()
        .filter(|c| c["toolCallId"] == call && c["preliminary"] != true)
        .collect();
    let errors: Vec<&Value> = of_type(chunks, "tool-output-error")
        .into_iter()
        .filter(|c| c["toolCallId"] == call)
        .collect();
    let wrote = format!("wrote {chat} in process ");
    let (told, says) = match (&outputs[..], &errors[..]) {
        ([output], []) => {
            let output = output["output"].as_str().unwrap_or_default();
            let pid = output
                .strip_prefix(&wrote)
                .and_then(|pid| pid.parse::<u32>().ok())
                .ok_or_else(|| shown(format!("has the output {output:?}")))?;
            (Told::Wrote(output.to_owned(), pid), output.to_owned())
        }
        ([], [error]) => {
            let text = error["errorText"].as_str().unwrap_or_default();
            if !text.contains("the call may have run") {
                return Err(shown(format!("has the error {text:?}")));
            }
            (Told::MayHaveRun, "the call may have run".to_owned())
        }
        _ => {
            return Err(shown(format!(
                "has {} outputs and {} errors of the call",
                outputs.len(),
                errors.len()
            )))
        }
    };
    let text = text_of(chunks);
    if !text.starts_with(&format!("{chat}: ")) || !text.contains(&says) {
        return Err(shown(format!(
            "ends with the text {text:?}, not one of {says:?}"
        )));
    }
    if finish_reason(chunks) != Some("stop") {
        return Err(shown("does not finish with stop".to_owned()));
    }
    Ok(told)
}

#[derive(Default)]
struct Report {
    chats: usize,
    finished: usize,
    /// Runs told "wrote" / "the call may have run" / anything else.
    wrote: usize,
    may_have_run: usize,
    /// Of the "may have run": in the ledger once / not at all.
    may_have_run_written: usize,
    /// Of the "may have run": not among the writes in flight at a kill
    /// (done, or not yet begun, when it came).
    may_have_run_uncut: usize,
    lost: Vec<String>,
    /// "wrote" runs whose line is not in the ledger exactly once, or not
    /// by the process that says it wrote.
    wrote_wrong: Vec<String>,
    twice: Vec<String>,
    /// Lines of runs that are not this proof's.
    strangers: usize,
    ledger_lines: usize,
    /// Clients told what their run's output (Restate's) does not say.
    told_wrong: Vec<String>,
    /// Answers sent more than once; the sends again; what refused the
    /// sends before (status and kind, counted); responses not read to
    /// their end within their timeout.
    answers_retried: usize,
    resends: usize,
    refusals: BTreeMap<String, usize>,
    timed_out: usize,
    /// Per process: writes begun, runs ended.
    writes_by: BTreeMap<u32, usize>,
    ends_by: BTreeMap<u32, usize>,
    /// Answer taken → run's end, ms: every run's; around each kill.
    answer_to_end: Vec<u64>,
    around: Vec<Vec<u64>>,
    /// After each kill: from the restart to the next write begun, the
    /// next write done and the next run's end; from the kill to the end
    /// of the last run it cut.
    next_write: Vec<Option<u64>>,
    next_done: Vec<Option<u64>>,
    next_end: Vec<Option<u64>>,
    cut_ended: Vec<Option<u64>>,
}

impl Report {
    fn judge(
        settings: &Settings,
        files: &Files,
        runs: &[String],
        answers: Vec<Result<Answered, String>>,
        outputs: Vec<(String, Result<Value, String>)>,
        kills: &[Kill],
    ) -> Result<Report, Error> {
        let mut report = Report {
            chats: settings.chats,
            ..Report::default()
        };
        let ledger = read_ledger(&files.ledger)?;
        let times = read_times(&files.times);
        report.ledger_lines = ledger.len();
        let mut lines: HashMap<&str, Vec<&Written>> = HashMap::new();
        for written in &ledger {
            lines.entry(written.run.as_str()).or_default().push(written);
            *report.writes_by.entry(written.pid).or_default() += 1;
        }
        for (pid, _) in times.end.values() {
            *report.ends_by.entry(*pid).or_default() += 1;
        }
        report.strangers = lines
            .keys()
            .filter(|run| !runs.iter().any(|r| r == *run))
            .count();
        report.twice = lines
            .iter()
            .filter(|(_, l)| l.len() > 1)
            .map(|(run, l)| format!("{run}: {} lines", l.len()))
            .collect();

        // What every client was told, by its answer's response.
        let mut told: HashMap<String, Told> = HashMap::new();
        let mut answered_at = HashMap::new();
        for answer in answers {
            match answer {
                Ok(answer) => {
                    report.answers_retried += usize::from(answer.tries > 1);
                    report.resends += answer.tries - 1;
                    for refusal in &answer.refusals {
                        *report.refusals.entry(refusal.clone()).or_default() += 1;
                    }
                    let chat = answer.asked.chat.clone();
                    answered_at.insert(chat.clone(), (answer.sent, answer.accepted));
                    match told_by(&answer) {
                        Ok(what) => {
                            told.insert(chat, what);
                        }
                        Err(why) => report.lost.push(why),
                    }
                }
                Err(why) => {
                    report.timed_out += usize::from(why.contains("timed out"));
                    report.lost.push(why);
                }
            }
        }

        // Every run finished; every client told what its run's output
        // says, and the ledger agrees.
        for (run, output) in outputs {
            let output = match output {
                Ok(output) => output,
                Err(why) => {
                    report.lost.push(format!("{run}: no output: {why}"));
                    continue;
                }
            };
            if output["stop"] == "finished" {
                report.finished += 1;
            }
            let results: Vec<&str> = output["messages"]
                .as_array()
                .map(|messages| {
                    messages
                        .iter()
                        .filter(|m| m["role"] == "tool")
                        .filter_map(|m| m["content"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            let written = lines.get(run.as_str()).map_or(&[][..], Vec::as_slice);
            match told.get(&run) {
                // Not told: counted lost above.
                None => {}
                Some(Told::Wrote(result, pid)) => {
                    report.wrote += 1;
                    if results[..] != [result.as_str()] {
                        report.told_wrong.push(format!(
                            "{run}: told {result:?}, its run's tool results are {results:?}"
                        ));
                    }
                    if written.len() != 1 || written[0].pid != *pid {
                        report.wrote_wrong.push(format!(
                            "{run}: told {result:?}, the ledger has {:?}",
                            written
                        ));
                    }
                }
                Some(Told::MayHaveRun) => {
                    report.may_have_run += 1;
                    report.may_have_run_written += usize::from(!written.is_empty());
                    let cut = kills.iter().any(|kill| kill.cut.contains(&run));
                    report.may_have_run_uncut += usize::from(!cut);
                    if !matches!(results[..], [result] if result.contains("the call may have run"))
                    {
                        report.told_wrong.push(format!(
                            "{run}: told the call may have run, its run's tool results are {results:?}"
                        ));
                    }
                }
            }
            if let (Some((_, accepted)), Some((_, end))) =
                (answered_at.get(&run), times.end.get(&run))
            {
                report.answer_to_end.push(end.saturating_sub(*accepted));
            }
        }

        // Resuming after each kill.
        for kill in kills {
            let after = |at: u64| at >= kill.restarted;
            let first = |times: &mut dyn Iterator<Item = u64>| {
                times
                    .filter(|at| after(*at))
                    .min()
                    .map(|at| at - kill.restarted)
            };
            report
                .next_write
                .push(first(&mut ledger.iter().map(|w| w.at)));
            report
                .next_done
                .push(first(&mut times.done.values().map(|(_, at)| *at)));
            report
                .next_end
                .push(first(&mut times.end.values().map(|(_, at)| *at)));
            let ends: Vec<Option<u64>> = kill
                .cut
                .iter()
                .map(|run| {
                    times
                        .end
                        .get(run)
                        .map(|(_, at)| at.saturating_sub(kill.killed))
                })
                .collect();
            report
                .cut_ended
                .push(match ends.iter().all(Option::is_some) {
                    true => ends.into_iter().flatten().max(),
                    false => None,
                });
            // The answers first sent from 2 s before the kill to 2 s after
            // the restart: from their sending (the outage included) to
            // their run's end.
            let window = kill.killed.saturating_sub(2_000)..kill.restarted + 2_000;
            let around = answered_at
                .iter()
                .filter(|(_, (sent, _))| window.contains(sent))
                .filter_map(|(run, (sent, _))| {
                    times.end.get(run).map(|(_, end)| end.saturating_sub(*sent))
                })
                .collect();
            report.around.push(around);
        }
        Ok(report)
    }

    fn passed(&self) -> bool {
        self.finished == self.chats
            && self.wrote + self.may_have_run == self.chats
            && self.lost.is_empty()
            && self.wrote_wrong.is_empty()
            && self.told_wrong.is_empty()
            && self.timed_out == 0
            && self.twice.is_empty()
            && self.strangers == 0
    }

    fn lines(
        &self,
        kills: &[Kill],
        pids: &[(String, u32)],
        proxy: &Proxy,
        services: &[ServiceProcess],
    ) -> Vec<String> {
        let ms = |v: Option<u64>| v.map_or("never".to_owned(), |v| format!("{v} ms"));
        let mut lines = Vec::new();
        for (k, kill) in kills.iter().enumerate() {
            lines.push(format!(
                "{}: {} writes in flight cut, {} answers not yet taken by the endpoint and {} answers' responses open; up again {} ms after the kill; from then the next write began after {}, the next write returned after {}, the next run ended after {}; the runs cut all ended {} after the kill; answers sent around it (2 s either side) to their run's end: p50 {} ms, p99 {} ms ({} answers)",
                kill.what,
                kill.cut.len(),
                kill.answers_in_flight,
                kill.responses_open,
                kill.restarted.saturating_sub(kill.killed),
                ms(self.next_write[k]),
                ms(self.next_done[k]),
                ms(self.next_end[k]),
                ms(self.cut_ended[k]),
                percentile(&self.around[k], 0.5),
                percentile(&self.around[k], 0.99),
                self.around[k].len(),
            ));
        }
        let spread: Vec<String> = pids
            .iter()
            .map(|(name, pid)| {
                format!(
                    "{name} (pid {pid}): {} writes, {} runs ended",
                    self.writes_by.get(pid).copied().unwrap_or(0),
                    self.ends_by.get(pid).copied().unwrap_or(0)
                )
            })
            .collect();
        let connections: Vec<String> = proxy
            .connections
            .iter()
            .zip(services)
            .enumerate()
            .map(|(i, (n, s))| {
                format!(
                    "service {i} (port {}): {}",
                    s.port,
                    n.load(Ordering::Relaxed)
                )
            })
            .collect();
        lines.push(format!(
            "spread: {}; Restate's connections through the proxy: {}",
            spread.join("; "),
            connections.join(", ")
        ));
        let refusals: Vec<String> = self
            .refusals
            .iter()
            .map(|(what, n)| format!("{n} × {what}"))
            .collect();
        lines.push(format!(
            "answers through the AI SDK endpoint: {} approvals; {} needed a retry ({} sends again, after {}); {} responses timed out; answer taken to its run's end: p50 {} ms, p99 {} ms",
            self.chats,
            self.answers_retried,
            self.resends,
            match refusals.is_empty() {
                true => "no refusal".to_owned(),
                false => refusals.join(", "),
            },
            self.timed_out,
            percentile(&self.answer_to_end, 0.5),
            percentile(&self.answer_to_end, 0.99),
        ));
        let check = |ok: bool| if ok { "ok" } else { "FAILED" };
        lines.push(format!(
            "runs: {}/{} finished; told by their answer's response \"wrote\" {}, \"the call may have run\" {} (of those {} in the ledger once, {} not at all; {} not among the writes in flight at a kill); {} clients told what their run's output does not say; ledger: {} lines, {} runs written twice, {} \"wrote\" runs not in it exactly once by their process, {} lines of no run of ours; {} approvals lost — {}",
            self.finished,
            self.chats,
            self.wrote,
            self.may_have_run,
            self.may_have_run_written,
            self.may_have_run - self.may_have_run_written,
            self.may_have_run_uncut,
            self.told_wrong.len(),
            self.ledger_lines,
            self.twice.len(),
            self.wrote_wrong.len(),
            self.strangers,
            self.lost.len(),
            check(self.passed()),
        ));
        for what in self
            .lost
            .iter()
            .chain(&self.twice)
            .chain(&self.wrote_wrong)
            .chain(&self.told_wrong)
            .take(10)
        {
            lines.push(format!("  {what}"));
        }
        lines
    }
}
