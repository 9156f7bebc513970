//! The proof that spend limits hold under concurrency, across processes
//! and through a kill: W worker processes (this binary, `--worker N`) run
//! N agent runs at once between them, every model call through the same
//! `SpendLimitLayer` — one global cost limit per day and a smaller one per
//! caller (`per_caller::<User>`), kept in the parent's own `redis-server`
//! under one prefix (`RedisSpend`, reservations with a short ttl). The
//! model is a local test model (`worker.rs`) whose answers stream a random
//! length of text, sometimes a tool call, and whose reported usage counts
//! tokens as a real tokenizer does — not as the layer estimates them
//! (bytes / 4). It appends what it generated to a ledger as it streams:
//! the ledgers, priced, are the real spend.
//!
//! Two rounds, each on a prefix of its own:
//!
//! * **limits**: every run to its end. Pass: the real spend is at most the
//!   global limit plus the sum of the estimates' errors (what the real
//!   prompt and output counts exceed the layer's bytes / 4 estimates by,
//!   priced), and so is each caller's; no reservation is left in Redis
//!   (every `{counter}:r` sorted set empty or gone, every counter's
//!   `rtokens` and `rnanos` 0); every run that did not finish stopped with
//!   `StopReason::SpendLimit` after a `SpendLimited` error that names its
//!   limit — refused before the call, or cut mid-answer.
//! * **kill**: the same, and worker 0 is killed with SIGKILL mid-answer.
//!   Pass: after the reservation ttl none of its reservations is live;
//!   once a call has been asked of every counter (the layer drops expired
//!   reservations when it next reserves on a counter), none is left at
//!   all; the totals hold — where the calls the kill cut off, which no
//!   counter ever saw settled, are reported apart.
//!
//! It prints what each round measured — runs finished, refused and cut;
//! the real spend against each limit, the estimates' error, the overshoot
//! (both as % of the limit, whose target is 1 %); what Redis counted; the
//! reservations left; the p50 and p99 of what the layer adds to a model
//! call (before its first delta: the reservation; after its last: the
//! settlement) — and exits non-zero when a check fails.
//!
//! ```text
//! cargo build --release --example spend_limits
//! target/release/examples/spend_limits --runs 1000 --workers 4
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tower::ServiceExt;

use toolstack::model::{ChatRequest, Cost, Message, Usage};
use toolstack::{ErrorKind, ToolError};
use toolstack_demo::redis_server::RedisProcess;

mod worker;

use worker::{Ends, Settings, User, MODEL};

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

const USAGE: &str = "\
Usage: spend_limits [--runs N] [--workers W] [--rounds LIST] [options]
  (cargo run --release --example spend_limits -- ...; needs redis-server on PATH)

N agent runs at once on W worker processes share one global and one
per-caller spend limit in Redis; then again, with a worker killed mid-answer.
  --runs N              agent runs per round, across the workers (1000)
  --workers W           worker processes (4)
  --rounds LIST         limits,kill (both)
  --global-dollars D    the global limit, per day (20)
  --caller-dollars D    each caller's limit, per day (3)
  --users U             callers; runs go mostly to the first three (10)
  --ttl-ms MS           a reservation's time to live in Redis (3000)
  --max-output T        the most output tokens an answer writes, and the
                        output each call reserves (2000)
  --delta-ms MS         between an answer's deltas (2)
  --short-words PCT     the share of runs that write short words, whose
                        tokens the layer's bytes / 4 underestimates (25)
  --kill-after-lines L  the kill round kills worker 0 once its ledger has
                        L lines and an answer streams (20 a run of its own:
                        at the defaults, a tenth of a second in, within
                        the reservation ttl of the round's end)
  --seed S              the test model's seed (1)
  --deadline-s S        a round's workers are killed, and it fails, past
                        this (300)
  -h, --help            this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--worker") {
        return worker::worker(&args).await;
    }
    let runs: u32 = flag(&args, "--runs", 1000);
    let workers: u32 = flag(&args, "--workers", 4).max(1);
    let redis = RedisProcess::start("spend-limits")?;
    let mut settings = Settings::from_args(&args);
    settings.redis = redis.url();
    let dir = std::env::temp_dir().join(format!("toolstack-spend-proof-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let proof = Proof {
        exe: std::env::current_exe()?,
        runs,
        workers,
        dir: dir.clone(),
        deadline: Duration::from_secs(flag(&args, "--deadline-s", 300)),
    };
    println!(
        "spend limits: {runs} agent runs at once on {workers} processes; global limit {} a day, {} per caller ({} callers), in Redis ({}); reservations live {} ms",
        settings.global,
        settings.caller,
        settings.users,
        settings.redis,
        settings.ttl.as_millis()
    );
    let rounds: String = flag(&args, "--rounds", "limits,kill".to_owned());
    let mut failed = false;
    for round in rounds.split(',') {
        let kill_after: Option<usize> = match round {
            "limits" => None,
            "kill" => Some(flag(
                &args,
                "--kill-after-lines",
                (runs / workers * 20).max(40) as usize,
            )),
            other => return Err(format!("--rounds: no round {other:?}").into()),
        };
        let settings = Settings {
            prefix: format!("proof:spend:{round}"),
            ..settings.clone()
        };
        match proof.round(round, &settings, kill_after).await {
            Ok(passed) => failed |= !passed,
            Err(err) => {
                println!("{round}: FAILED: {err}");
                failed = true;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(redis);
    if failed {
        println!("FAILED");
        std::process::exit(1);
    }
    println!("PASSED");
    Ok(())
}

struct Proof {
    exe: PathBuf,
    runs: u32,
    workers: u32,
    dir: PathBuf,
    deadline: Duration,
}

/// A worker process, killed with SIGKILL on drop.
struct Worker {
    child: Child,
    ledger: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One model call, as the ledger has it: what it was asked and generated.
#[derive(Debug, Clone, Copy, Default)]
struct Call {
    user: u32,
    prompt: u64,
    prompt_estimate: u64,
    output: u64,
    output_bytes: u64,
    ended: bool,
}

impl Call {
    /// What a provider bills for it.
    fn cost(&self) -> u64 {
        nanos(Usage::new(self.prompt, self.output))
    }

    /// What the real counts exceed the layer's estimates by (prompt:
    /// bytes / 4 of its messages; output: bytes / 4 of its deltas),
    /// priced; nothing where the estimate was high.
    fn estimate_error(&self) -> u64 {
        let prompt = self.prompt.saturating_sub(self.prompt_estimate);
        let output = self.output.saturating_sub(self.output_bytes.div_ceil(4));
        nanos(Usage::new(prompt, output))
    }
}

fn nanos(usage: Usage) -> u64 {
    worker::prices()
        .cost(MODEL, &usage)
        .map_or(0, Cost::as_nanos)
}

/// Every call in `ledger`, by (run, turn): its last line, the most it
/// generated.
fn read_ledger(ledger: &Path) -> Result<HashMap<(u32, u32), Call>, String> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    parse_ledger(&text).map_err(|line| format!("{}: a torn line {line:?}", ledger.display()))
}

/// The calls of a ledger's text; the line that is not one, if any.
fn parse_ledger(text: &str) -> Result<HashMap<(u32, u32), Call>, String> {
    let mut calls = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [run, turn, user, prompt, estimate, output, bytes, what] = fields[..] else {
            return Err(line.to_owned());
        };
        let n = |s: &str| s.parse::<u64>().map_err(|_| line.to_owned());
        let call: &mut Call = calls.entry((n(run)? as u32, n(turn)? as u32)).or_default();
        *call = Call {
            user: n(user)? as u32,
            prompt: n(prompt)?,
            prompt_estimate: n(estimate)?,
            output: call.output.max(n(output)?),
            output_bytes: call.output_bytes.max(n(bytes)?),
            ended: call.ended || what == "e",
        };
    }
    Ok(calls)
}

/// How many whole lines `ledger` has, and how many of its calls are
/// streaming (made, not ended). A line being written is not read.
fn streaming(ledger: &Path) -> Result<(usize, usize), String> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let whole = &text[..text.rfind('\n').map_or(0, |at| at + 1)];
    let calls = parse_ledger(whole).map_err(|line| format!("a torn line {line:?}"))?;
    let open = calls.values().filter(|call| !call.ended).count();
    Ok((whole.lines().count(), open))
}

/// Real spend and the estimates' error, in nano-dollars.
#[derive(Default, Clone, Copy)]
struct Spend {
    real: u64,
    error: u64,
    calls: u64,
    /// What the calls a kill cut off generated: no counter saw it
    /// settled, and their reservations expire.
    uncounted: u64,
}

impl Spend {
    fn add(&mut self, call: &Call, cut_off: bool) {
        self.real += call.cost();
        self.error += call.estimate_error();
        self.calls += 1;
        if cut_off {
            self.uncounted += call.cost();
        }
    }

    /// Whether it holds against `limit`, and the line that says so.
    fn judged(&self, what: &str, limit: Cost) -> (bool, String) {
        let uncounted = self.uncounted;
        let limit = limit.as_nanos();
        let pct = |n: u64| n as f64 / limit as f64 * 100.0;
        let over = self.real.saturating_sub(limit);
        let holds = self.real <= limit + self.error + uncounted;
        let mut line = format!(
            "{what}: real spend {} of the {} limit ({} calls); estimates' error {} ({:.2} %); overshoot {} ({:.2} %, target ≤ 1 %: {}); ≤ limit + error",
            dollars(self.real),
            dollars(limit),
            self.calls,
            dollars(self.error),
            pct(self.error),
            dollars(over),
            pct(over),
            if pct(over) <= 1.0 { "met" } else { "MISSED" },
        );
        if uncounted > 0 {
            line += &format!(
                " + the killed calls' {} no counter saw settled: {holds} (without them: {})",
                dollars(uncounted),
                self.real <= limit + self.error
            );
        } else {
            line += &format!(": {holds}");
        }
        (holds, line)
    }
}

fn dollars(nanos: u64) -> String {
    format!("${:.4}", nanos as f64 / 1e9)
}

/// The `q` quantile of `values` (0 when there are none).
fn percentile(values: &[u64], q: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).copied().unwrap_or(0)
}

/// What the round's keys in Redis hold.
#[derive(Debug, Default)]
struct Left {
    /// Reservations in the sorted sets, and of those the ones not expired.
    members: u64,
    live: u64,
    /// The counters' reserved totals.
    rtokens: i64,
    rnanos: i64,
    /// What the global counter counted as spent.
    counted_nanos: u64,
    counters: u64,
    /// A few of the reservations left: their counter, member and expiry.
    samples: Vec<String>,
}

impl Left {
    fn none(&self) -> bool {
        self.members == 0 && self.rtokens == 0 && self.rnanos == 0
    }
}

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} reservations left in {} counters ({} live), rtokens {}, rnanos {}",
            self.members, self.counters, self.live, self.rtokens, self.rnanos
        )?;
        for sample in &self.samples {
            write!(f, "\n    left: {sample}")?;
        }
        Ok(())
    }
}

async fn left_in_redis(
    redis: &mut redis::aio::ConnectionManager,
    prefix: &str,
) -> Result<Left, redis::RedisError> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(redis)
        .await?;
    let now = now_ms() as u64;
    let mut left = Left::default();
    for key in keys {
        if key.ends_with(":r") {
            let all: u64 = redis::cmd("ZCARD").arg(&key).query_async(redis).await?;
            let live: u64 = redis::cmd("ZCOUNT")
                .arg(&key)
                .arg(format!("({now}"))
                .arg("+inf")
                .query_async(redis)
                .await?;
            left.members += all;
            left.live += live;
            if left.samples.len() < 3 {
                let some: Vec<(String, u64)> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(2 - left.samples.len())
                    .arg("WITHSCORES")
                    .query_async(redis)
                    .await?;
                for (member, expiry) in some {
                    let ms = expiry as i128 - now as i128;
                    left.samples
                        .push(format!("{key} {member}, expiry {ms:+} ms from now"));
                }
            }
        } else {
            let fields: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(&key)
                .arg("rtokens")
                .arg("rnanos")
                .arg("nanos")
                .query_async(redis)
                .await?;
            left.counters += 1;
            left.rtokens += fields[0].unwrap_or(0);
            left.rnanos += fields[1].unwrap_or(0);
            if key.starts_with(&format!("{prefix}:all:")) {
                left.counted_nanos += fields[2].unwrap_or(0).max(0) as u64;
            }
        }
    }
    Ok(left)
}

/// Asks one call of every counter of the round, through the same layer,
/// of a model that fails at once: the layer drops each counter's expired
/// reservations as it reserves (or refuses), and gives back what it
/// reserved when the model fails.
async fn ask_every_counter(settings: &Settings) -> Result<(), Box<dyn std::error::Error>> {
    let manager = worker::connect(&settings.redis).await?;
    let failing = tower::service_fn(|_: ChatRequest| async {
        Err::<futures_util::stream::Empty<Result<toolstack::model::ModelDelta, ToolError>>, _>(
            ToolError::new(ErrorKind::Unavailable, "a probe: no model here"),
        )
    });
    let model = tower::ServiceBuilder::new()
        .layer(worker::spend_layer(settings, manager))
        .service(failing);
    for user in 0..settings.users {
        let request = ChatRequest::new(vec![Message::user("probe")])
            .with_model(MODEL)
            .with_extension(User(user));
        let _ = model.clone().oneshot(request).await;
    }
    Ok(())
}

impl Proof {
    fn spawn(
        &self,
        index: u32,
        settings: &Settings,
        round: &str,
        start: u128,
    ) -> Result<Worker, Box<dyn std::error::Error>> {
        let ledger = self.dir.join(format!("{round}-{index}.ledger"));
        let child = Command::new(&self.exe)
            .args(["--worker", &index.to_string()])
            .args(["--workers", &self.workers.to_string()])
            .args(["--runs", &self.runs.to_string()])
            .args(["--start", &start.to_string()])
            .arg("--ledger")
            .arg(&ledger)
            .args(settings.to_args())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Worker { child, ledger })
    }

    /// Runs one round; prints what it measured and whether it passed.
    async fn round(
        &self,
        round: &str,
        settings: &Settings,
        kill_after: Option<usize>,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let mut redis = worker::connect(&settings.redis).await?;
        let start = now_ms() + 1_500;
        let mut workers: Vec<Worker> = (0..self.workers)
            .map(|index| self.spawn(index, settings, round, start))
            .collect::<Result<_, _>>()?;
        let began = Instant::now();
        let give_up = began + self.deadline;

        // The kill round: worker 0 dies once its ledger has this many
        // lines and answers are streaming.
        let mut killed = None;
        if let Some(lines) = kill_after {
            let ledger = workers[0].ledger.clone();
            loop {
                let (written, open) = streaming(&ledger)?;
                if written >= lines && open > 0 {
                    break;
                }
                if workers[0].child.try_wait()?.is_some() || Instant::now() > give_up {
                    return Err(format!(
                        "worker 0 ended (or the deadline passed) with {written} ledger lines, before the kill at {lines} with an answer streaming"
                    )
                    .into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            workers[0].child.kill()?;
            workers[0].child.wait()?;
            killed = Some(Instant::now());
        }

        // The others' reports, within the deadline.
        let mut ends = Ends::default();
        let (tx, rx) = std::sync::mpsc::channel();
        for (index, worker) in workers.iter_mut().enumerate() {
            if killed.is_some() && index == 0 {
                continue;
            }
            let stdout = worker.child.stdout.take().ok_or("no stdout")?;
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let read = BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send((index, read.map(|_| line)));
            });
        }
        drop(tx);
        let survivors = self.workers as usize - usize::from(killed.is_some());
        for _ in 0..survivors {
            let wait = give_up.saturating_duration_since(Instant::now());
            let (index, line) = rx.recv_timeout(wait).map_err(|_| {
                format!("the workers did not all report within {:?}", self.deadline)
            })?;
            let line = line?;
            let report: Ends = serde_json::from_str(&line)
                .map_err(|e| format!("worker {index}'s report {line:?}: {e}"))?;
            ends.add(report);
            workers[index].child.wait()?;
        }
        let took = began.elapsed();

        // The real spend, from every ledger (the killed worker's too).
        let mut all = Spend::default();
        let mut per_user: HashMap<u32, Spend> = HashMap::new();
        let mut cut_off = 0u64;
        for (index, worker) in workers.iter().enumerate() {
            for call in read_ledger(&worker.ledger)?.values() {
                let killed_mid_answer = killed.is_some() && index == 0 && !call.ended;
                cut_off += u64::from(killed_mid_answer);
                all.add(call, killed_mid_answer);
                per_user
                    .entry(call.user)
                    .or_default()
                    .add(call, killed_mid_answer);
            }
        }

        let mut passed = true;
        println!("\n{round}: {} s", took.as_secs());
        let expected = u64::from(self.runs)
            - if killed.is_some() {
                u64::from(self.runs).div_ceil(u64::from(self.workers))
            } else {
                0
            };
        let (refused, cut) = (ends.refused, ends.cut);
        println!(
            "  runs{}: {} finished, {} refused before a call ({} by the global limit, {} by a caller's), {} cut mid-answer ({} global, {} caller's), {} ended otherwise — {} of {expected}",
            if killed.is_some() { " on the workers that lived" } else { "" },
            ends.finished,
            refused[0] + refused[1],
            refused[0],
            refused[1],
            cut[0] + cut[1],
            cut[0],
            cut[1],
            ends.other.len(),
            ends.runs(),
        );
        for other in ends.other.iter().take(5) {
            println!("  !! {other}");
        }
        passed &= ends.other.is_empty() && ends.runs() == expected;
        if let Some(said) = &ends.refused_said {
            println!("  refused, as said: {said}");
        }
        if let Some(said) = &ends.cut_said {
            println!("  cut, as said: {said}");
        }

        if let Some(killed) = killed {
            println!(
                "  worker 0 killed with SIGKILL {} ms after the start, {cut_off} of its answers mid-stream (they had generated {})",
                (killed - began).as_millis().saturating_sub(1_500),
                dollars(all.uncounted)
            );
            passed &= cut_off > 0;
            // Past the ttl, none of them is live any more…
            let expired = killed + settings.ttl + Duration::from_millis(100);
            tokio::time::sleep_until(expired.into()).await;
            let left = left_in_redis(&mut redis, &settings.prefix).await?;
            println!(
                "  after the reservation ttl, before any call: {left}; live: {}",
                left.live
            );
            passed &= left.live == 0;
            // …and the next call on each counter drops them.
            ask_every_counter(settings).await?;
        }
        // Reservations given back by a task (a dropped answer's) may land
        // a moment after the runs end: asked again until none is left, or
        // for 5 s.
        let mut left = left_in_redis(&mut redis, &settings.prefix).await?;
        let asked = Instant::now();
        while !left.none() && asked.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            left = left_in_redis(&mut redis, &settings.prefix).await?;
        }
        println!(
            "  after the runs{}: {left}",
            if killed.is_some() {
                " and a call on every counter"
            } else {
                ""
            }
        );
        passed &= left.none();

        println!(
            "  Redis counted {} spent on the global counter; the ledgers say {}",
            dollars(left.counted_nanos),
            dollars(all.real)
        );
        let (holds, line) = all.judged("  global", settings.global);
        println!("{line}");
        passed &= holds;
        let mut users: Vec<_> = per_user.into_iter().collect();
        users.sort_by_key(|(user, _)| *user);
        for (user, spend) in users {
            let (holds, line) = spend.judged(&format!("  caller {user}"), settings.caller);
            println!("{line}");
            passed &= holds;
        }
        let (before, after) = (&ends.before_us, &ends.after_us);
        println!(
            "  the layer's added latency per model call (Redis round trips, on this loaded machine): before the answer p50 {:.2} ms, p99 {:.2} ms ({} calls); after its last delta p50 {:.2} ms, p99 {:.2} ms",
            percentile(before, 0.5) as f64 / 1000.0,
            percentile(before, 0.99) as f64 / 1000.0,
            before.len(),
            percentile(after, 0.5) as f64 / 1000.0,
            percentile(after, 0.99) as f64 / 1000.0,
        );
        println!("{round}: {}", if passed { "ok" } else { "FAILED" });
        Ok(passed)
    }
}
