//! A worker process (`--worker N`): its share of the runs, all started at
//! once at the parent's common start, through an [`Agent`] whose model is
//! a local test model behind the spend limit layer every worker builds the
//! same way ([`spend_layer`]), on one Redis prefix.
//!
//! The test model answers with text of a random length (seeded: the same
//! run and turn answer the same way in every round), sometimes a tool
//! call, a few milliseconds between deltas, and ends with the usage a
//! real tokenizer would report — which differs from the layer's bytes / 4
//! estimate both ways (some runs write short words, most long ones).
//! Before it yields each delta it appends what it has generated to this
//! worker's ledger: the ledger, priced, is what a provider would bill,
//! whatever the layer counted and even when the process is killed.
//!
//! When its runs are over, the worker prints one JSON line: how each run
//! ended, and how long the layer added to each model call.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::{ready, BoxFuture, Ready};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::json;
use tower::{Layer, Service, ServiceBuilder};

use toolstack::agent::compaction::estimate_tokens;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{
    ChatRequest, Cost, FinishReason, Message, ModelDelta, Price, Prices, ToolCallDelta, Usage,
};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};
use toolstack_layers::spend::{Limit, LimitReached, RedisSpend, Scope, SpendLimitLayer, Window};

use crate::flag;

/// The model every call asks for, and the one the prices price.
pub(crate) const MODEL: &str = "proof-model";

/// The caller of a run: the per-caller limit's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct User(pub(crate) u32);

/// The run's number across all workers: what seeds its model's answers,
/// and names its calls in the ledger.
#[derive(Debug, Clone, Copy)]
struct RunNo(u32);

/// $3 per million prompt tokens, $15 per million output tokens.
pub(crate) fn prices() -> Prices {
    Prices::builder()
        .model(MODEL, Price::per_million_tokens(3.0, 15.0))
        .build()
        .expect("a valid price table")
}

/// What every process of a round agrees on: the limits, where they are
/// kept, and how the test model answers.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) redis: String,
    pub(crate) prefix: String,
    pub(crate) global: Cost,
    pub(crate) caller: Cost,
    pub(crate) users: u32,
    pub(crate) ttl: Duration,
    pub(crate) max_output: u64,
    pub(crate) delta: Duration,
    /// The share of runs (%) whose text is short words, which the layer's
    /// bytes / 4 underestimates.
    pub(crate) short: u64,
    pub(crate) seed: u64,
}

impl Settings {
    pub(crate) fn from_args(args: &[String]) -> Settings {
        let dollars = |name: &str, default: f64| {
            Cost::from_nanos((flag(args, name, default) * 1e9).round() as u64)
        };
        Settings {
            redis: flag(args, "--redis", String::new()),
            prefix: flag(args, "--prefix", "spend".to_owned()),
            global: dollars("--global-dollars", 20.0),
            caller: dollars("--caller-dollars", 3.0),
            users: flag(args, "--users", 10u32).max(4),
            ttl: Duration::from_millis(flag(args, "--ttl-ms", 3_000)),
            max_output: flag(args, "--max-output", 2_000),
            delta: Duration::from_millis(flag(args, "--delta-ms", 2)),
            short: flag(args, "--short-words", 25),
            seed: flag(args, "--seed", 1),
        }
    }

    /// The flags that give a worker these settings.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let dollars = |cost: Cost| format!("{}", cost.as_nanos() as f64 / 1e9);
        [
            ("--redis", self.redis.clone()),
            ("--prefix", self.prefix.clone()),
            ("--global-dollars", dollars(self.global)),
            ("--caller-dollars", dollars(self.caller)),
            ("--users", self.users.to_string()),
            ("--ttl-ms", self.ttl.as_millis().to_string()),
            ("--max-output", self.max_output.to_string()),
            ("--delta-ms", self.delta.as_millis().to_string()),
            ("--short-words", self.short.to_string()),
            ("--seed", self.seed.to_string()),
        ]
        .into_iter()
        .flat_map(|(name, value)| [name.to_owned(), value])
        .collect()
    }

    /// The caller of run `run`: a few heavy callers, whom the per-caller
    /// limit stops, and light ones, whom only the global limit does.
    pub(crate) fn user_of(&self, run: u32) -> User {
        let bucket = run.wrapping_mul(37) % 100;
        User(match bucket {
            0..30 => 0,
            30..50 => 1,
            50..60 => 2,
            _ => 3 + (bucket - 60) % (self.users - 3),
        })
    }
}

/// A Redis connection that waits for its answers: the machine is busy,
/// and a call Redis answers late must not be decided without it (the
/// layer fails closed).
pub(crate) async fn connect(url: &str) -> Result<ConnectionManager, redis::RedisError> {
    let patient = Duration::from_secs(10);
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(patient))
        .set_response_timeout(Some(patient))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(redis::Client::open(url)?, config).await
}

/// The spend limits every process of a round builds: one global limit on
/// cost per day, one per caller, kept in Redis under the round's prefix,
/// reservations that expire after the settings' ttl, failing closed.
pub(crate) fn spend_layer(settings: &Settings, manager: ConnectionManager) -> SpendLimitLayer {
    SpendLimitLayer::new(prices())
        .global(Window::Day, Limit::cost(settings.global))
        .per_caller::<User>(Window::Day, Limit::cost(settings.caller))
        .reserve_output_tokens(settings.max_output)
        .redis(
            RedisSpend::new(manager)
                .prefix(settings.prefix.clone())
                .reservation_ttl(settings.ttl)
                .timeout(Duration::from_secs(10))
                .fail_closed(),
        )
}

// ---- the tokenizer ---------------------------------------------------------

/// The tokens a real tokenizer counts in `text`: 1.3 a word, rounded up.
/// The layer estimates bytes / 4 instead: high for long words, low for
/// short ones — the estimate's error is real both ways.
fn tokens(text: &str) -> u64 {
    (text.split_whitespace().count() as u64 * 13).div_ceil(10)
}

/// What a message adds to a prompt besides its text.
const MESSAGE_TOKENS: u64 = 3;

/// A prompt's tokens, as the provider counts them.
fn prompt_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|message| {
            MESSAGE_TOKENS
                + match message {
                    Message::System { content } | Message::User { content } => tokens(content),
                    Message::Assistant {
                        content,
                        tool_calls,
                        ..
                    } => {
                        content.as_deref().map_or(0, tokens)
                            + tool_calls
                                .iter()
                                .map(|c| tokens(&c.name) + tokens(&c.arguments))
                                .sum::<u64>()
                    }
                    Message::Tool { content, .. } => tokens(content),
                }
        })
        .sum()
}

/// SplitMix64: seeded, the same on every machine.
struct Rng(u64);

impl Rng {
    fn new(parts: &[u64]) -> Rng {
        let mut rng = Rng(0x5eed);
        for part in parts {
            rng.0 ^= part.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            rng.next();
        }
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// `n` words, space-separated, of 1–3 letters when `short`, else 3–9.
    fn words(&mut self, n: u64, short: bool, out: &mut String) {
        let (low, high) = if short { (1, 3) } else { (3, 9) };
        for _ in 0..n {
            if !out.is_empty() {
                out.push(' ');
            }
            for _ in 0..self.range(low, high) {
                out.push(char::from(b'a' + (self.next() % 26) as u8));
            }
        }
    }
}

// ---- the test model --------------------------------------------------------

/// The local test model: see the module docs.
#[derive(Clone)]
struct TestModel {
    ledger: Arc<std::fs::File>,
    settings: Arc<Settings>,
}

impl Service<ChatRequest> for TestModel {
    type Response = BoxStream<'static, Result<ModelDelta, ToolError>>;
    type Error = ToolError;
    type Future = Ready<Result<Self::Response, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let (Some(&RunNo(run)), Some(&User(user))) = (
            request.extensions.get::<RunNo>(),
            request.extensions.get::<User>(),
        ) else {
            return ready(Err(ToolError::new(
                ErrorKind::Failed,
                "the test model needs the run's number and caller in the request",
            )));
        };
        // The turn: how many answers the run has had.
        let turn = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count() as u64;
        let seed = self.settings.seed;
        let mut rng = Rng::new(&[seed, u64::from(run), turn]);
        let short = Rng::new(&[seed, u64::from(run)]).chance(self.settings.short);
        let output = rng.range(20, self.settings.max_output);
        let answer = Answer {
            ledger: Arc::clone(&self.ledger),
            head: format!(
                "{run} {turn} {user} {} {}",
                prompt_tokens(&request.messages),
                estimate_tokens(&request.messages),
            ),
            prompt: prompt_tokens(&request.messages),
            // Words a tokenizer reads as about `output` tokens.
            words_left: output * 10 / 13,
            tool: (turn < 3 && rng.chance(70)).then(|| {
                let mut topic = String::new();
                rng.words(2, short, &mut topic);
                let name = if rng.chance(50) { "lookup" } else { "tally" };
                (name, json!({ "topic": topic }).to_string())
            }),
            id: format!("call-{run}-{turn}"),
            rng,
            short,
            words: 0,
            tool_tokens: 0,
            bytes: 0,
            delta: self.settings.delta,
            stage: Stage::Text,
        };
        // The prompt is billed once the call is made, answer or not.
        answer.write('s');
        let deltas = futures_util::stream::unfold(answer, |mut answer| async move {
            let delta = answer.next().await?;
            Some((Ok(delta), answer))
        });
        ready(Ok(deltas.boxed()))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Text,
    Tool,
    Finish,
    Usage,
    Done,
}

/// One answer as it streams.
struct Answer {
    ledger: Arc<std::fs::File>,
    /// The ledger line's start: run, turn, caller, prompt tokens (real,
    /// and the layer's estimate).
    head: String,
    prompt: u64,
    words_left: u64,
    tool: Option<(&'static str, String)>,
    id: String,
    rng: Rng,
    short: bool,
    /// Generated so far: words of text, tool-call tokens, bytes of both.
    words: u64,
    tool_tokens: u64,
    bytes: u64,
    delta: Duration,
    stage: Stage,
}

impl Answer {
    fn output(&self) -> u64 {
        (self.words * 13).div_ceil(10) + self.tool_tokens
    }

    /// Appends what was generated so far to the ledger, one line in one
    /// write (appends never interleave within it; a kill after it cannot
    /// take it back). `s` the call made, `d` a delta, `e` the end.
    fn write(&self, what: char) {
        let line = format!("{} {} {} {what}\n", self.head, self.output(), self.bytes);
        if let Err(err) = (&*self.ledger).write_all(line.as_bytes()) {
            eprintln!("the ledger: {err}");
            std::process::exit(3);
        }
    }

    async fn next(&mut self) -> Option<ModelDelta> {
        loop {
            match self.stage {
                Stage::Text if self.words_left > 0 => {
                    tokio::time::sleep(self.delta).await;
                    let n = self.rng.range(4, 16).min(self.words_left);
                    let mut text = String::new();
                    self.rng.words(n, self.short, &mut text);
                    if self.words > 0 {
                        text.insert(0, ' ');
                    }
                    self.words_left -= n;
                    self.words += n;
                    self.bytes += text.len() as u64;
                    self.write('d');
                    return Some(ModelDelta::Text(text));
                }
                Stage::Text => self.stage = Stage::Tool,
                Stage::Tool => {
                    self.stage = Stage::Finish;
                    let Some((name, arguments)) = &self.tool else {
                        continue;
                    };
                    tokio::time::sleep(self.delta).await;
                    self.tool_tokens = tokens(name) + tokens(arguments);
                    self.bytes += (self.id.len() + name.len() + arguments.len()) as u64;
                    self.write('d');
                    return Some(ModelDelta::ToolCall(
                        ToolCallDelta::new(0)
                            .id(self.id.clone())
                            .name(*name)
                            .arguments(arguments.clone()),
                    ));
                }
                Stage::Finish => {
                    self.stage = Stage::Usage;
                    return Some(ModelDelta::Finish(if self.tool.is_some() {
                        FinishReason::ToolCalls
                    } else {
                        FinishReason::Stop
                    }));
                }
                Stage::Usage => {
                    self.stage = Stage::Done;
                    self.write('e');
                    return Some(ModelDelta::Usage(Usage::new(self.prompt, self.output())));
                }
                Stage::Done => return None,
            }
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Topic {
    topic: String,
}

/// Two tools whose results grow the next prompt: `lookup` (20–300 words
/// about the topic) and `tally` (a number).
fn toolbox() -> Toolbox {
    let lookup = tool::from_fn("lookup", |Topic { topic }: Topic| async move {
        let mut rng = Rng::new(&[topic.len() as u64, topic.bytes().map(u64::from).sum()]);
        let mut text = String::new();
        let n = rng.range(20, 300);
        rng.words(n, false, &mut text);
        Ok::<_, ToolError>(text)
    });
    let tally = tool::from_fn("tally", |Topic { topic }: Topic| async move {
        Ok::<_, ToolError>(topic.len() * 7)
    });
    Toolbox::new().tool(lookup).tool(tally)
}

// ---- the layer's added latency ---------------------------------------------

/// What the spend layer added to the model calls: from the agent's call
/// to the answer's stream (the reservation's round trip to Redis; the
/// test model's own future is ready at once), and from the usage, the
/// answer's last delta, to its end (the settlement's).
#[derive(Clone, Default)]
struct Added {
    before_us: Arc<Mutex<Vec<u64>>>,
    after_us: Arc<Mutex<Vec<u64>>>,
}

#[derive(Clone)]
struct Timed<S> {
    inner: S,
    added: Added,
}

impl<S: Clone> Layer<S> for Added {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            added: self.clone(),
        }
    }
}

impl<S> Service<ChatRequest> for Timed<S>
where
    S: Service<ChatRequest, Error = ToolError>,
    S::Future: Send + 'static,
    S::Response: futures_core::Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    type Response = BoxStream<'static, Result<ModelDelta, ToolError>>;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<Self::Response, ToolError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let asked = Instant::now();
        let answer = self.inner.call(request);
        let added = self.added.clone();
        Box::pin(async move {
            let stream = answer.await?;
            added
                .before_us
                .lock()
                .unwrap()
                .push(asked.elapsed().as_micros() as u64);
            let timed = futures_util::stream::unfold(
                (stream.boxed(), None::<Instant>, added),
                |(mut stream, mut usage_at, added)| async move {
                    match stream.next().await {
                        Some(item) => {
                            if matches!(item, Ok(ModelDelta::Usage(_))) {
                                usage_at = Some(Instant::now());
                            }
                            Some((item, (stream, usage_at, added)))
                        }
                        None => {
                            if let Some(at) = usage_at {
                                let took = at.elapsed().as_micros() as u64;
                                added.after_us.lock().unwrap().push(took);
                            }
                            None
                        }
                    }
                },
            );
            Ok(timed.boxed())
        })
    }
}

// ---- the worker ------------------------------------------------------------

/// How the runs ended, as a worker tells the parent (a line of JSON), and
/// as the parent adds up what the workers said.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ends {
    pub(crate) finished: u64,
    /// Refused before the call, by the global limit and by the caller's.
    pub(crate) refused: [u64; 2],
    /// Cut mid-answer, likewise.
    pub(crate) cut: [u64; 2],
    /// Stopped otherwise, or by a spend limit whose error is not typed or
    /// does not name its limit.
    pub(crate) other: Vec<String>,
    /// One message of each kind, to show.
    pub(crate) refused_said: Option<String>,
    pub(crate) cut_said: Option<String>,
    /// The layer's added latency per model call, in µs: before the answer
    /// and after its last delta.
    pub(crate) before_us: Vec<u64>,
    pub(crate) after_us: Vec<u64>,
}

impl Ends {
    /// Adds what another worker said.
    pub(crate) fn add(&mut self, other: Ends) {
        self.finished += other.finished;
        for limit in 0..2 {
            self.refused[limit] += other.refused[limit];
            self.cut[limit] += other.cut[limit];
        }
        self.other.extend(other.other);
        self.refused_said = self.refused_said.take().or(other.refused_said);
        self.cut_said = self.cut_said.take().or(other.cut_said);
        self.before_us.extend(other.before_us);
        self.after_us.extend(other.after_us);
    }

    /// How many runs ended, each way.
    pub(crate) fn runs(&self) -> u64 {
        self.finished
            + self.refused.iter().sum::<u64>()
            + self.cut.iter().sum::<u64>()
            + self.other.len() as u64
    }

    fn count(&mut self, stop: Option<StopReason>, error: Option<ToolError>) {
        match (stop, error) {
            (Some(StopReason::Finished), None) => self.finished += 1,
            (Some(StopReason::SpendLimit), Some(err)) if err.kind() == ErrorKind::SpendLimited => {
                // Typed: the limit, for code to read, is the error's source;
                // what it says, for the model and an operator, must agree.
                let message = err.message();
                let Some(reached) = std::error::Error::source(&err)
                    .and_then(|source| source.downcast_ref::<LimitReached>())
                else {
                    self.other.push(format!(
                        "a spend limit's error without its LimitReached: {message}"
                    ));
                    return;
                };
                let limit = match (reached.scope, message) {
                    (Scope::All, m) if m.starts_with("all model calls together") => 0,
                    (Scope::Caller, m) if m.starts_with("this caller") => 1,
                    (scope, _) => {
                        self.other.push(format!(
                            "a spend limit ({scope:?}) whose message names another: {message}"
                        ));
                        return;
                    }
                };
                // A refusal says the model was not called; a cut, that
                // the answer was.
                let refused = message.contains("the model was not called");
                if refused == reached.cut_an_answer() {
                    self.other.push(format!(
                        "a spend limit whose message and LimitReached disagree on a cut: {message}"
                    ));
                } else if refused {
                    self.refused[limit] += 1;
                    self.refused_said.get_or_insert_with(|| message.to_owned());
                } else {
                    self.cut[limit] += 1;
                    self.cut_said.get_or_insert_with(|| message.to_owned());
                }
            }
            (stop, error) => self.other.push(format!(
                "stopped {:?}: {:?}",
                stop.map(StopReason::as_str),
                error.map(|e| format!("{:?}: {}", e.kind(), e.message()))
            )),
        }
    }
}

pub(crate) async fn worker(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let settings = Arc::new(Settings::from_args(args));
    let index: u32 = flag(args, "--worker", 0);
    let workers: u32 = flag(args, "--workers", 1);
    let runs: u32 = flag(args, "--runs", 0);
    let start: u128 = flag(args, "--start", 0);
    let ledger = PathBuf::from(flag(args, "--ledger", String::new()));
    let ledger = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&ledger)
        .map_err(|e| format!("the ledger {}: {e}", ledger.display()))?;

    let manager = connect(&settings.redis).await?;
    let added = Added::default();
    let model = ServiceBuilder::new()
        .layer(added.clone())
        .layer(spend_layer(&settings, manager))
        .service(TestModel {
            ledger: Arc::new(ledger),
            settings: Arc::clone(&settings),
        });
    let agent = Agent::new(model, toolbox()).model_name(MODEL).max_steps(8);

    let wait = start.saturating_sub(crate::now_ms());
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    let tasks: Vec<_> = (index..runs)
        .step_by(workers as usize)
        .map(|run| {
            let agent = agent.clone();
            let user = settings.user_of(run);
            let mut words = String::new();
            Rng::new(&[settings.seed, u64::from(run), 99]).words(40, false, &mut words);
            let ask = format!("Run {run}: find out about {words}, then sum it up.");
            tokio::spawn(async move {
                let mut extensions = http::Extensions::new();
                extensions.insert(user);
                extensions.insert(RunNo(run));
                let mut events = agent.run_with(vec![Message::user(ask)], extensions);
                let (mut stop, mut error) = (None, None);
                while let Some(event) = events.next().await {
                    match event {
                        AgentEvent::Error(err) => error = Some(err),
                        AgentEvent::Done(done) => stop = Some(done.stop),
                        _ => {}
                    }
                }
                (stop, error)
            })
        })
        .collect();
    let mut ends = Ends::default();
    for task in tasks {
        let (stop, error) = task.await?;
        ends.count(stop, error);
    }
    ends.before_us = std::mem::take(&mut *added.before_us.lock().unwrap());
    ends.after_us = std::mem::take(&mut *added.after_us.lock().unwrap());
    println!("{}", serde_json::to_string(&ends)?);
    std::io::stdout().flush()?;
    Ok(())
}
