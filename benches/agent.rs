//! Agent throughput: folding a recorded stream of 10,000 tool-call
//! fragments (four parallel calls, interleaved) into calls, and running
//! scripted agent turns with a trivial tool — with no run store, and with
//! every run checkpointed in memory and (`--features sqlite`) in a SQLite
//! file, as ratios to the run without a store measured in the same run.
//!
//! `cargo bench --bench agent` runs criterion, then prints chunks/s,
//! turns/s and the checkpointing ratios (`--features sqlite` for SQLite).
//!
//! The run-length group measures whether a turn costs the same in a long
//! run as in a short one: one run of a scripted model whose turns but the
//! last each call a tool returning 4 KiB or 64 KiB of text, 10, 100 and
//! 1,000 turns long, with no store, a `MemoryStore`, a `SqliteStore` (a
//! file in a fresh temporary directory per run, `--features sqlite`) and
//! a `RedisStore` (`--features redis`, against a `redis-server` the bench
//! starts on a free loopback port; the column is empty without one on
//! `PATH`). Each store is made afresh for each run. With `--features
//! restate` a fifth column runs the same script on Restate: the agent
//! served as `RestateRuns` (on a runtime of its own, as a process of its
//! own would be), registered with a `restate-server` the bench starts
//! (the one `npm ci` installs in `restate/`; the column is empty, and
//! says why on stderr, when it cannot start), each run a workflow of a
//! fresh key, timed from the ingress's `POST /AgentRuns/{key}/run` to
//! the end of its answer (the whole conversation, as JSON). Its service
//! is made afresh for each cell, not each run: its scripted model holds
//! the turns of all the cell's runs. It prints µs per turn
//! (the whole run's wall time ÷ its turns; best of 30 runs at 10 turns,
//! of 10 at 100, of 3 at 1,000) and, per output size, the ratio of the longest run's figure to
//! the 10-turn run's (the target is at most 1.5×). It runs outside
//! criterion, so that its cost stays bounded: a cell is skipped when the
//! one before it in its column, extrapolated linearly, predicts more than
//! two minutes, and a run still going after two minutes is given up. A
//! run that does not finish is reported (`!! did not finish`) and the
//! group goes on.
//!
//! ```text
//! cargo bench --bench agent --features sqlite,redis,restate -- run_length
//! ```
//!
//! runs that group alone; without a filter it runs after the rest.
//! `TOOLSTACK_BENCH_QUICK=1` keeps it to 10 and 100 turns (a smoke test),
//! as does criterion's test mode (`cargo test --benches`).
//!
//! The compaction group (`-- compaction`, also outside criterion) runs a
//! long conversation — 500 turns, each reading 8 KB, a 100,000-token
//! context budget — without compaction and with each built-in strategy
//! but the summary, and prints whether it finished, its largest request
//! and the tokens sent over the run (the agent's own estimate,
//! `compaction::estimate_tokens`, of each request the model was sent);
//! then what the check costs a model call when nothing is compacted: µs
//! per turn of 1,000 turns of 16-byte results with compaction set (a
//! budget never reached) against the same run without, best of 10.
//!
//! The allocations group (`-- allocations`, outside criterion: it counts,
//! it does not time) counts the heap allocations and the bytes they ask
//! for in one agent turn that calls one tool — arguments of 276 bytes in
//! 7-character fragments, as the scripted model streams them; a typed
//! output of 32 search hits, about 4 KiB of JSON — with no store, with
//! the run journaled into a `MemoryStore`, and (`--features http`)
//! through the AI SDK endpoint (its event → chunk mapping and SSE body
//! included). A counting `#[global_allocator]` wraps the system
//! allocator; a turn's figure is the difference between a run of 12
//! turns and one of 2, divided by 10, so the run's setup cancels out.
//!
//! ```text
//! cargo bench --bench agent --features http -- allocations
//! ```

#[cfg(feature = "redis")]
#[path = "../layers/tests/support/redis.rs"]
mod redis_server;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{Accumulator, Message, ScriptedModel, ToolCallDelta, Turn};
use toolstack::{tool, ToolError, Toolbox};

/// The system allocator, counting: what the allocations group reads.
struct Counting;

/// Whether allocations are counted: only while the allocations group runs,
/// so that the timed groups pay a load, not two atomic adds.
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ALLOCATED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Counting {
    fn count(bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        if !COUNTING.load(Relaxed) {
            return;
        }
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED_BYTES.fetch_add(bytes as u64, Relaxed);
    }

    /// Allocations and bytes asked for so far (a `realloc` counts as one
    /// allocation of its new size).
    fn now() -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (ALLOCATIONS.load(Relaxed), ALLOCATED_BYTES.load(Relaxed))
    }
}

// SAFETY: every call is passed to `System` unchanged; the counters are
// atomics, which do not allocate.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Counting::count(layout.size());
        std::alloc::System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        Counting::count(layout.size());
        std::alloc::System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        Counting::count(new_size);
        std::alloc::System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CHUNKS: usize = 10_000;
const TURNS: usize = 1_000;

/// Four calls whose argument text arrives in interleaved 8-byte fragments.
fn recorded() -> Vec<ToolCallDelta> {
    let mut out = Vec::with_capacity(CHUNKS);
    for i in 0..CHUNKS {
        let index = (i % 4) as u32;
        let delta = if i < 4 {
            ToolCallDelta::new(index)
                .id(format!("call_{index}"))
                .name("search")
                .arguments("{\"q\":\"")
        } else {
            ToolCallDelta::new(index).arguments("abcdéfgh")
        };
        out.push(delta);
    }
    out
}

fn accumulate(chunks: &[ToolCallDelta]) -> usize {
    let mut acc = Accumulator::new();
    for chunk in chunks {
        acc.push(chunk).expect("a bounded index");
    }
    acc.finish().expect("well-formed").len()
}

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// `TURNS` model turns: each but the last calls the add tool.
fn turns_run(runtime: &tokio::runtime::Runtime) -> usize {
    let mut turns = Vec::with_capacity(TURNS);
    for _ in 0..TURNS - 1 {
        turns.push(
            Turn::new()
                .text("adding")
                .tool_call("add", r#"{"a":1,"b":2}"#),
        );
    }
    turns.push(Turn::new().text("done"));
    let toolbox = Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }));
    let agent = Agent::new(ScriptedModel::new(turns), toolbox)
        .max_steps(TURNS + 1)
        .max_tool_calls(TURNS);
    runtime.block_on(async {
        let mut events = agent.run(vec![Message::user("go")]);
        let mut steps = 0;
        while let Some(event) = events.next().await {
            if let AgentEvent::Done(done) = event {
                steps = done.steps;
            }
        }
        steps
    })
}

/// Turns of a short run, checkpointed or not.
const SHORT: usize = 10;

/// A run of `SHORT` turns (each but the last calling the add tool), with
/// every run checkpointed in `store` if there is one.
fn short_run(
    runtime: &tokio::runtime::Runtime,
    store: Option<std::sync::Arc<dyn toolstack::agent::store::RunStore>>,
) -> usize {
    let mut turns = Vec::with_capacity(SHORT);
    for _ in 0..SHORT - 1 {
        turns.push(
            Turn::new()
                .text("adding")
                .tool_call("add", r#"{"a":1,"b":2}"#),
        );
    }
    turns.push(Turn::new().text("done"));
    let toolbox = Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }));
    let mut agent = Agent::new(ScriptedModel::new(turns), toolbox).max_steps(SHORT + 1);
    if let Some(store) = store {
        agent = agent.store(store);
    }
    runtime.block_on(async {
        let mut events = agent.run(vec![Message::user("go")]);
        let mut steps = 0;
        while let Some(event) = events.next().await {
            if let AgentEvent::Done(done) = event {
                steps = done.steps;
            }
        }
        assert_eq!(steps, SHORT, "the run did not finish");
        steps
    })
}

/// The stores a short run is measured with: none, memory, and SQLite.
fn stores() -> Vec<(
    &'static str,
    Option<std::sync::Arc<dyn toolstack::agent::store::RunStore>>,
)> {
    // Only SQLite adds to the list.
    #[cfg_attr(not(feature = "sqlite"), allow(unused_mut))]
    let mut stores: Vec<(
        &'static str,
        Option<std::sync::Arc<dyn toolstack::agent::store::RunStore>>,
    )> = vec![
        ("no store", None),
        (
            "MemoryStore",
            Some(std::sync::Arc::new(
                toolstack::agent::store::MemoryStore::new(),
            )),
        ),
    ];
    #[cfg(feature = "sqlite")]
    {
        let path =
            std::env::temp_dir().join(format!("toolstack-bench-runs-{}.db", std::process::id()));
        let store =
            toolstack::agent::store::sqlite::SqliteStore::open(&path).expect("a SQLite file");
        stores.push((
            "SqliteStore (a file, WAL)",
            Some(std::sync::Arc::new(store)),
        ));
        let path = std::env::temp_dir().join(format!(
            "toolstack-bench-runs-flushed-{}.db",
            std::process::id()
        ));
        let store = toolstack::agent::store::sqlite::SqliteStore::open(&path)
            .and_then(|store| store.sync_every_commit())
            .expect("a SQLite file");
        stores.push((
            "SqliteStore (a file, WAL, a disk flush per save)",
            Some(std::sync::Arc::new(store)),
        ));
    }
    stores
}

fn bench(c: &mut Criterion) {
    let chunks = recorded();
    assert_eq!(accumulate(&chunks), 4);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    c.bench_function("accumulate_10k_chunks", |b| {
        b.iter(|| accumulate(black_box(&chunks)))
    });
    let mut group = c.benchmark_group("agent");
    group.sample_size(10);
    group.bench_function("1000_scripted_turns", |b| b.iter(|| turns_run(&runtime)));
    for (name, store) in stores() {
        group.bench_function(format!("{SHORT}_turns_{name}"), |b| {
            b.iter(|| short_run(&runtime, store.clone()))
        });
    }
    group.finish();
}

fn summary() {
    let chunks = recorded();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let best = |f: &mut dyn FnMut() -> usize, rounds: usize| {
        (0..rounds)
            .map(|_| {
                let start = Instant::now();
                black_box(f());
                start.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let acc = best(&mut || accumulate(&chunks), 50);
    let steps = turns_run(&runtime);
    let run = best(&mut || turns_run(&runtime), 5);
    println!("\nsummary (best of several rounds)");
    println!(
        "accumulate: {CHUNKS} chunks in {:.1} µs = {:.1} M chunks/s",
        acc * 1e6,
        CHUNKS as f64 / acc / 1e6
    );
    println!(
        "agent: {steps} scripted model turns ({} tool calls) in {:.2} ms = {:.0} turns/s",
        TURNS - 1,
        run * 1e3,
        steps as f64 / run
    );
    // Checkpointing, interleaved round by round so that drift hits each
    // store alike; each as a ratio to the run without a store.
    let stores = stores();
    let mut best = vec![f64::MAX; stores.len()];
    for _ in 0..30 {
        for (at, (_, store)) in stores.iter().enumerate() {
            let start = Instant::now();
            black_box(short_run(&runtime, store.clone()));
            best[at] = best[at].min(start.elapsed().as_secs_f64());
        }
    }
    for ((name, _), time) in stores.iter().zip(&best) {
        println!(
            "a {SHORT}-turn run, {name}: {:.1} µs = {:.2}x the run without a store",
            time * 1e6,
            time / best[0]
        );
    }
}

/// The run lengths of the run-length group, in turns.
const RUN_LENGTHS: [usize; 3] = [10, 100, 1_000];

/// The run lengths of a quick run-length group (a smoke test).
const QUICK_RUN_LENGTHS: [usize; 2] = [10, 100];

/// What each tool call of the run-length group returns, in bytes of text.
const OUTPUT_BYTES: [usize; 2] = [4 * 1024, 64 * 1024];

/// The most one cell of the run-length group may take. Checkpointing the
/// whole run at each save makes a long run quadratic; this keeps the group
/// to minutes even then.
const CELL_BUDGET: Duration = Duration::from_secs(120);

/// The run-length group's tool takes no arguments.
#[derive(Deserialize, JsonSchema)]
struct Read {}

/// A column of the run-length table: where the runs are checkpointed
/// (or, for Restate, journaled step by step and run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    None,
    Memory,
    Sqlite,
    Redis,
    Restate,
}

/// The columns of the run-length table.
const COLUMNS: usize = 5;

impl Column {
    const ALL: [Column; COLUMNS] = [
        Column::None,
        Column::Memory,
        Column::Sqlite,
        Column::Redis,
        Column::Restate,
    ];

    fn name(self) -> &'static str {
        match self {
            Column::None => "none",
            Column::Memory => "memory",
            Column::Sqlite => "sqlite",
            Column::Redis => "redis",
            Column::Restate => "restate",
        }
    }
}

/// How many runs a cell of the run-length group times, the best kept:
/// short runs are noisy.
fn rounds(turns: usize) -> usize {
    match turns {
        ..=10 => 30,
        11..=100 => 10,
        _ => 3,
    }
}

/// The run-length group's script: `turns` turns, each but the last
/// calling `read`.
fn run_length_script(turns: usize) -> impl Iterator<Item = Turn> {
    (0..turns).map(move |at| match at + 1 < turns {
        true => Turn::new().text("reading").tool_call("read", "{}"),
        false => Turn::new().text("done"),
    })
}

/// The run-length group's toolbox: `read`, returning `bytes` bytes of
/// text.
fn read_toolbox(bytes: usize) -> Toolbox {
    let line = "a line of tool output, 32 bytes\n";
    let text = line.repeat(bytes / line.len());
    assert_eq!(text.len(), bytes);
    Toolbox::new().tool(tool::from_fn("read", move |Read {}| {
        let text = text.clone();
        async move { Ok::<_, ToolError>(text) }
    }))
}

/// The stores of the run-length group: each run gets a fresh one, so that
/// no run reads or grows another's.
struct RunLengthStores {
    /// Names the SQLite directory of each run.
    #[cfg(feature = "sqlite")]
    runs: std::cell::Cell<usize>,
    #[cfg(feature = "redis")]
    redis: Option<redis_server::RedisServer>,
    /// The Restate column, or why it is empty.
    #[cfg(feature = "restate")]
    restate: Result<restate_column::RestateColumn, String>,
}

impl RunLengthStores {
    fn start() -> Self {
        RunLengthStores {
            #[cfg(feature = "sqlite")]
            runs: std::cell::Cell::new(0),
            #[cfg(feature = "redis")]
            redis: redis_server::RedisServer::start("the run-length group's redis column"),
            #[cfg(feature = "restate")]
            restate: restate_column::RestateColumn::start(),
        }
    }

    /// Why this build or this machine has no such store, if it has none.
    fn missing(&self, column: Column) -> Option<String> {
        match column {
            Column::None | Column::Memory => None,
            #[cfg(feature = "sqlite")]
            Column::Sqlite => None,
            #[cfg(not(feature = "sqlite"))]
            Column::Sqlite => Some("built without --features sqlite".to_owned()),
            #[cfg(feature = "redis")]
            Column::Redis if self.redis.is_some() => None,
            #[cfg(feature = "redis")]
            Column::Redis => Some("no redis-server on PATH".to_owned()),
            #[cfg(not(feature = "redis"))]
            Column::Redis => Some("built without --features redis".to_owned()),
            #[cfg(feature = "restate")]
            Column::Restate => self.restate.as_ref().err().cloned(),
            #[cfg(not(feature = "restate"))]
            Column::Restate => Some("built without --features restate".to_owned()),
        }
    }

    /// Why `column` cannot run `turns` turns of `bytes` bytes of output,
    /// when it cannot.
    #[cfg_attr(not(feature = "restate"), allow(unused_variables))]
    fn cannot(&self, column: Column, turns: usize, bytes: usize) -> Option<String> {
        #[cfg(feature = "restate")]
        if column == Column::Restate {
            return restate_column::RestateColumn::cannot(turns, bytes);
        }
        None
    }

    /// `agent` checkpointing into a fresh store of `column`, and the
    /// temporary directory to remove after its run.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    fn attach(
        &self,
        column: Column,
        agent: Agent<ScriptedModel>,
        runtime: &tokio::runtime::Runtime,
    ) -> (Agent<ScriptedModel>, Option<std::path::PathBuf>) {
        match column {
            Column::None => (agent, None),
            Column::Memory => (
                agent.store(toolstack::agent::store::MemoryStore::new()),
                None,
            ),
            #[cfg(feature = "sqlite")]
            Column::Sqlite => {
                let run = self.runs.get();
                self.runs.set(run + 1);
                let dir = std::env::temp_dir().join(format!(
                    "toolstack-bench-run-length-{}-{run}",
                    std::process::id()
                ));
                std::fs::create_dir_all(&dir).expect("a temporary directory");
                let store = toolstack::agent::store::sqlite::SqliteStore::open(dir.join("runs.db"))
                    .expect("a SQLite file");
                (agent.store(store), Some(dir))
            }
            #[cfg(feature = "redis")]
            Column::Redis => {
                let server = self.redis.as_ref().expect("a redis-server");
                let store = runtime
                    .block_on(toolstack::agent::store::redis::RedisStore::connect(
                        &server.url(),
                    ))
                    .expect("the bench's redis-server");
                (agent.store(store), None)
            }
            #[allow(unreachable_patterns)]
            _ => unreachable!("{} is missing from this build", column.name()),
        }
    }

    /// Forgets what the last run of `column` left behind.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    fn clean(
        &self,
        column: Column,
        dir: Option<std::path::PathBuf>,
        runtime: &tokio::runtime::Runtime,
    ) {
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        #[cfg(feature = "redis")]
        if let (Column::Redis, Some(server)) = (column, &self.redis) {
            runtime.block_on(async {
                let _: () = redis::cmd("FLUSHDB")
                    .query_async(&mut server.connection().await)
                    .await
                    .expect("FLUSHDB");
            });
        }
    }
}

/// The run-length group's Restate column (`--features restate`): a
/// `restate-server` of the bench's own (the one `npm ci` installs in
/// `restate/`, started by the demo's `RestateProcess`), and the agent's
/// runs served as `RestateRuns` on a runtime of their own, as if in a
/// process of their own.
#[cfg(feature = "restate")]
mod restate_column {
    use std::cell::{Cell, RefCell};
    use std::io::Write;
    use std::time::{Duration, Instant};

    use toolstack::agent::restate::{listen, RestateRuns, RunInput, RunOutput};
    use toolstack::agent::Agent;
    use toolstack::model::{Message, ScriptedModel};
    use toolstack_demo::restate_server::RestateProcess;

    use super::{read_toolbox, rounds, run_length_script, RunEnd, Timed, CELL_BUDGET};

    /// The most of a failed answer's body a report quotes.
    const QUOTED_BYTES: usize = 512;

    /// The largest message restate-server 1.7 takes from a service by
    /// default (`hit message size limit: … >= 33816576`): a run's answer
    /// is one, and one larger is tried again without end.
    const MESSAGE_LIMIT: usize = 33_816_576;

    /// The server, the client of its ingress, and the service of the cell
    /// being measured.
    pub(super) struct RestateColumn {
        server: RestateProcess,
        client: reqwest::Client,
        service: RefCell<Option<Service>>,
        /// Numbers the runs: each is a workflow of a key of its own.
        runs: Cell<usize>,
    }

    /// The service of one cell (run length, output size): an agent whose
    /// scripted model holds the turns of all the cell's runs, played one
    /// run after another (a turn a run journaled is not asked again).
    struct Service {
        cell: (usize, usize),
        model: ScriptedModel,
        /// The turns its script holds.
        script: usize,
        /// Its runtime: dropped, the service stops.
        _runtime: tokio::runtime::Runtime,
    }

    impl RestateColumn {
        /// Starts the server, or says loudly why the column stays empty
        /// (and panics when `TOOLSTACK_REQUIRE_RESTATE` is set).
        pub(super) fn start() -> Result<RestateColumn, String> {
            let server = RestateProcess::start("bench-run-length").map_err(|e| {
                let why = format!("restate-server did not start: {e}");
                assert!(
                    std::env::var_os("TOOLSTACK_REQUIRE_RESTATE").is_none(),
                    "TOOLSTACK_REQUIRE_RESTATE is set but {why}"
                );
                let _ = writeln!(
                    std::io::stderr(),
                    "!! SKIPPED: the run-length group's restate column did NOT run: {why}"
                );
                why
            })?;
            Ok(RestateColumn {
                server,
                client: reqwest::Client::new(),
                service: RefCell::new(None),
                runs: Cell::new(0),
            })
        }

        /// Why a run of `turns` turns of `bytes` bytes cannot end on
        /// Restate, when it cannot: its answer holds every tool output.
        pub(super) fn cannot(turns: usize, bytes: usize) -> Option<String> {
            let outputs = turns.saturating_sub(1) * bytes;
            (outputs >= MESSAGE_LIMIT).then(|| {
                format!(
                    "its answer, the whole conversation ({} MiB of tool output), passes \
                     restate-server's message size limit ({MESSAGE_LIMIT} bytes), and the \
                     server retries such a run without end",
                    outputs / (1024 * 1024)
                )
            })
        }

        /// Serves the runs of the cell of `turns` turns of `bytes` bytes
        /// of output (the script of all its rounds), registered with the
        /// server.
        fn serve(&self, turns: usize, bytes: usize) -> Result<Service, String> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| format!("a runtime for the service: {e}"))?;
            let listener = {
                let _entered = runtime.enter();
                listen(([127, 0, 0, 1], 0).into())
            }
            .map_err(|e| format!("a port for the service: {e}"))?;
            let addr = listener
                .local_addr()
                .map_err(|e| format!("the service's address: {e}"))?;
            let runs = rounds(turns);
            let model = ScriptedModel::new((0..runs).flat_map(|_| run_length_script(turns)));
            let agent = Agent::new(model.clone(), read_toolbox(bytes))
                .max_steps(turns + 1)
                .max_tool_calls(turns);
            runtime.spawn(RestateRuns::new(agent).serve(listener));
            self.server
                .register(&format!("http://{addr}"))
                .map_err(|e| format!("the service did not register: {e}"))?;
            Ok(Service {
                cell: (turns, bytes),
                model,
                script: runs * turns,
                _runtime: runtime,
            })
        }

        /// One run through the ingress, timed from the POST to the end of
        /// its answer.
        pub(super) fn run(
            &self,
            runtime: &tokio::runtime::Runtime,
            turns: usize,
            bytes: usize,
        ) -> Timed {
            let failed = |stop: &str, error: String| Timed {
                time: Duration::ZERO,
                turns: 0,
                end: RunEnd::Stopped {
                    stop: stop.to_owned(),
                    error: Some(error),
                },
            };
            let mut service = self.service.borrow_mut();
            // A fresh service when the cell changes, or when its script
            // has not a whole run left at a run's start.
            let fits = service.as_ref().is_some_and(|s| {
                let played = s.model.turns_played();
                s.cell == (turns, bytes) && played % turns == 0 && played + turns <= s.script
            });
            if !fits {
                *service = None;
                match self.serve(turns, bytes) {
                    Ok(fresh) => *service = Some(fresh),
                    Err(e) => return failed("no service", e),
                }
            }
            let run = self.runs.get();
            self.runs.set(run + 1);
            let url = format!(
                "{}/AgentRuns/run-length-{}-{run}/run",
                self.server.ingress_url(),
                std::process::id()
            );
            let input = RunInput {
                messages: vec![Message::user("go")],
            };
            let body = serde_json::to_string(&input).expect("a run's input is JSON");
            let (time, answer) = runtime.block_on(async {
                let start = Instant::now();
                let answer = async {
                    let response = self
                        .client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .timeout(CELL_BUDGET)
                        .send()
                        .await?;
                    let status = response.status().as_u16();
                    Ok::<_, reqwest::Error>((status, response.bytes().await?))
                }
                .await;
                (start.elapsed(), answer)
            });
            let (status, body) = match answer {
                Ok(answer) => answer,
                Err(e) if e.is_timeout() => {
                    // The run goes on in the server: stop its service, so
                    // that it stops taking turns beside the next cells.
                    *service = None;
                    return Timed {
                        time,
                        turns: 0,
                        end: RunEnd::OutOfTime,
                    };
                }
                Err(e) => return failed("no answer", format!("POST {url}: {e}")),
            };
            let quoted = || {
                let text = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BYTES)]);
                format!("HTTP {status}: {text}")
            };
            if status != 200 {
                return Timed {
                    time,
                    turns: 0,
                    end: RunEnd::Stopped {
                        stop: "the ingress refused it".to_owned(),
                        error: Some(quoted()),
                    },
                };
            }
            let output: RunOutput = match serde_json::from_slice(&body) {
                Ok(output) => output,
                Err(e) => return failed("an answer not a RunOutput", format!("{e}: {}", quoted())),
            };
            let steps = output
                .messages
                .iter()
                .filter(|m| matches!(m, Message::Assistant { .. }))
                .count();
            let end = if output.stop == "finished" {
                assert_eq!(steps, turns, "a finished run took every turn");
                assert_eq!(
                    output.text.as_deref(),
                    Some("done"),
                    "the script's last turn"
                );
                RunEnd::Finished
            } else {
                RunEnd::Stopped {
                    stop: output.stop,
                    error: None,
                }
            };
            Timed {
                time,
                turns: steps,
                end,
            }
        }
    }
}

/// How a run of the run-length group ended.
enum RunEnd {
    Finished,
    /// It stopped for another reason (or its stream ended without
    /// `Done`), after the error event's message if there was one.
    Stopped {
        stop: String,
        error: Option<String>,
    },
    /// It was still going at the cell's budget, and was dropped.
    OutOfTime,
}

/// One run of the run-length group.
struct Timed {
    time: Duration,
    /// The turns it took (or the tool results it saw, if given up).
    turns: usize,
    end: RunEnd,
}

/// One run of `turns` turns, each but the last calling a tool that
/// returns `bytes` bytes of text, checkpointed into a fresh store of
/// `column`; timed from its start to its `Done`.
fn run_length_run(
    runtime: &tokio::runtime::Runtime,
    stores: &RunLengthStores,
    column: Column,
    turns: usize,
    bytes: usize,
) -> Timed {
    #[cfg(feature = "restate")]
    if let (Column::Restate, Ok(restate)) = (column, &stores.restate) {
        return restate.run(runtime, turns, bytes);
    }
    let agent = Agent::new(
        ScriptedModel::new(run_length_script(turns)),
        read_toolbox(bytes),
    )
    .max_steps(turns + 1)
    .max_tool_calls(turns);
    let (agent, dir) = stores.attach(column, agent, runtime);
    let timed = runtime.block_on(async {
        let start = Instant::now();
        let mut events = agent.run(vec![Message::user("go")]);
        let mut error = None;
        let mut results = 0;
        while let Some(event) = events.next().await {
            match event {
                AgentEvent::ToolResult { .. } => results += 1,
                AgentEvent::Error(err) => error = Some(err.message().to_owned()),
                AgentEvent::Done(done) => {
                    let time = start.elapsed();
                    let end = if done.stop == StopReason::Finished {
                        assert_eq!(done.steps, turns, "a finished run took every turn");
                        RunEnd::Finished
                    } else {
                        RunEnd::Stopped {
                            stop: done.stop.as_str().to_owned(),
                            error,
                        }
                    };
                    return Timed {
                        time,
                        turns: done.steps,
                        end,
                    };
                }
                _ => {}
            }
            if start.elapsed() > CELL_BUDGET {
                return Timed {
                    time: start.elapsed(),
                    turns: results,
                    end: RunEnd::OutOfTime,
                };
            }
        }
        Timed {
            time: start.elapsed(),
            turns: results,
            end: RunEnd::Stopped {
                stop: "its stream ended without Done".to_owned(),
                error,
            },
        }
    });
    drop(agent);
    stores.clean(column, dir, runtime);
    timed
}

/// A cell of the run-length table.
#[derive(Debug, Clone, Copy)]
enum Cell {
    /// The best run's µs per turn.
    PerTurn(f64),
    DidNotFinish,
    OverBudget,
    Missing,
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cell::PerTurn(us) => f.pad(&format!("{us:.1}")),
            Cell::DidNotFinish => f.pad("failed"),
            Cell::OverBudget => f.pad("skipped"),
            Cell::Missing => f.pad("n/a"),
        }
    }
}

/// `n` with a comma between thousands, as the table writes turns.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The run-length group: every (output size, run length, store) cell,
/// the stores interleaved so that drift hits each alike, then the table.
fn run_length(quick: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stores = RunLengthStores::start();
    let lengths: &[usize] = if quick {
        &QUICK_RUN_LENGTHS
    } else {
        &RUN_LENGTHS
    };
    println!(
        "\nrun_length: best of 30 runs a cell at 10 turns, of 10 at 100, of 3 at 1,000; each store fresh for each run"
    );
    let mut table = Vec::new();
    for bytes in OUTPUT_BYTES {
        // Per column, the last run measured: its time and its turns.
        let mut last: [Option<(Duration, usize)>; COLUMNS] = [None; COLUMNS];
        let mut over: [bool; COLUMNS] = [false; COLUMNS];
        for &turns in lengths {
            let rounds = rounds(turns);
            let mut row = [Cell::Missing; COLUMNS];
            for (at, column) in Column::ALL.into_iter().enumerate() {
                if stores.missing(column).is_some() {
                    continue;
                }
                let name = format!("run_length/{}/{turns}x{}KiB", column.name(), bytes / 1024);
                if let Some(why) = stores.cannot(column, turns, bytes) {
                    println!("{name}: n/a: {why}");
                    continue;
                }
                let predicted = last[at].map(|(time, done)| {
                    time.mul_f64(turns as f64 / done.max(1) as f64 * rounds as f64)
                });
                if over[at] || predicted.is_some_and(|p| p > CELL_BUDGET) {
                    over[at] = true;
                    row[at] = Cell::OverBudget;
                    match predicted {
                        Some(p) if p > CELL_BUDGET => {
                            println!("{name}: skipped: over budget ({p:.0?} predicted)")
                        }
                        _ => println!("{name}: skipped: over budget"),
                    }
                    continue;
                }
                let mut best = Duration::MAX;
                for _ in 0..rounds {
                    let run = run_length_run(&runtime, &stores, column, turns, bytes);
                    last[at] = Some((run.time, run.turns));
                    match run.end {
                        RunEnd::Finished => best = best.min(run.time),
                        RunEnd::Stopped { stop, error } => {
                            println!(
                                "!! did not finish: {stop} {}   [{name}, after {} turns, {:.2?}]",
                                error.as_deref().unwrap_or("(no error event)"),
                                run.turns,
                                run.time
                            );
                            row[at] = Cell::DidNotFinish;
                            break;
                        }
                        RunEnd::OutOfTime => {
                            println!(
                                "{name}: skipped: over budget (given up after {:.0?}, {} tool results)",
                                run.time, run.turns
                            );
                            over[at] = true;
                            row[at] = Cell::OverBudget;
                            break;
                        }
                    }
                }
                if matches!(row[at], Cell::Missing) {
                    let per_turn = best.as_secs_f64() * 1e6 / turns as f64;
                    println!(
                        "{name}: {per_turn:.1} µs per turn ({:.2?} a run, best of {rounds})",
                        best
                    );
                    row[at] = Cell::PerTurn(per_turn);
                }
            }
            table.push((turns, bytes, row));
        }
    }

    println!("\nrun length (µs per turn; the whole run ÷ turns)");
    print!("{:<16}", "turns × output");
    for column in Column::ALL {
        print!("{:>10}", column.name());
    }
    println!();
    for (turns, bytes, row) in &table {
        print!(
            "{:<16}",
            format!("{} × {} KiB", thousands(*turns), bytes / 1024)
        );
        for cell in row {
            print!("{cell:>10}");
        }
        println!();
    }
    let (shortest, longest) = (lengths[0], lengths[lengths.len() - 1]);
    for bytes in OUTPUT_BYTES {
        let row = |turns: usize| {
            table
                .iter()
                .find(|(t, b, _)| *t == turns && *b == bytes)
                .map(|(_, _, row)| *row)
                .expect("a measured row")
        };
        let (short, long) = (row(shortest), row(longest));
        let ratios: Vec<String> = Column::ALL
            .into_iter()
            .enumerate()
            .map(|(at, column)| {
                let ratio = match (short[at], long[at]) {
                    (Cell::PerTurn(s), Cell::PerTurn(l)) => format!("{:.1}×", l / s),
                    (_, Cell::PerTurn(_)) => "n/a".to_owned(),
                    (_, cell) => cell.to_string(),
                };
                format!("{} {ratio}", column.name())
            })
            .collect();
        println!(
            "ratio {} turns ÷ {} turns, {} KiB: {}   (target ≤ 1.5×)",
            thousands(longest),
            thousands(shortest),
            bytes / 1024,
            ratios.join(", ")
        );
    }
    for column in Column::ALL {
        if let Some(why) = stores.missing(column) {
            println!("{}: n/a, {why}", column.name());
        }
    }
}

/// The benchmark filter criterion was given, if any: its one positional
/// argument, once the options and their values are skipped.
fn bench_filter() -> Option<String> {
    const WITH_VALUE: [&str; 20] = [
        "-c",
        "--color",
        "--colour",
        "-s",
        "--save-baseline",
        "-b",
        "--baseline",
        "--baseline-lenient",
        "--format",
        "--profile-time",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
    ];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

criterion_group!(benches, bench);

fn main() {
    let filter = bench_filter();
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|arg| arg == flag);
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    // The summary and the run-length group are ours, not criterion's: the
    // filter picks them the same way (a name containing it).
    let run_length_named = filter.as_deref().map(|f| f.contains("run_length"));
    let allocations_named = filter.as_deref().map(|f| f.contains("allocations"));
    if allocations_named == Some(true) {
        allocations();
        return;
    }
    if run_length_named != Some(true) {
        summary();
    }
    if allocations_named.is_none() && !has("--list") {
        allocations();
    }
    let compaction_named = filter.as_deref().map(|f| f.contains("compaction"));
    if compaction_named != Some(false) && !has("--list") {
        let test_mode = !has("--bench") || has("--test");
        compaction(test_mode);
    }
    if run_length_named != Some(false) && compaction_named != Some(true) && !has("--list") {
        // Criterion's test mode (no `--bench`, or `--test`) only checks
        // that each benchmark runs.
        let test_mode = !has("--bench") || has("--test");
        let quick = test_mode || std::env::var("TOOLSTACK_BENCH_QUICK").is_ok_and(|v| v == "1");
        run_length(quick);
    }
}

/// One run of `turns` turns, each reading `bytes` bytes, with `strategy`
/// (none: no compaction) at `budget`: whether it finished, the largest
/// request and the tokens sent over the run (estimated), its wall time.
fn long_conversation<C: toolstack::agent::compaction::Compact>(
    runtime: &tokio::runtime::Runtime,
    turns: usize,
    bytes: usize,
    budget: u64,
    strategy: Option<C>,
) -> (bool, u64, u64, Duration) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use toolstack::agent::compaction::estimate_tokens;
    let text = "x".repeat(bytes);
    let mut script = Vec::with_capacity(turns);
    for _ in 0..turns - 1 {
        script.push(Turn::new().text("reading").tool_call("read", "{}"));
    }
    script.push(Turn::new().text("done"));
    let toolbox = Toolbox::new().tool(tool::from_fn("read", move |Read {}| {
        let text = text.clone();
        async move { Ok::<_, ToolError>(text) }
    }));
    let (largest, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (l, t) = (Arc::clone(&largest), Arc::clone(&sent));
    let model = tower::ServiceBuilder::new()
        .map_request(move |request: toolstack::model::ChatRequest| {
            let tokens = estimate_tokens(&request.messages);
            l.fetch_max(tokens, Ordering::Relaxed);
            t.fetch_add(tokens, Ordering::Relaxed);
            request
        })
        .service(ScriptedModel::new(script));
    let mut agent = Agent::new(model, toolbox)
        .max_steps(turns + 1)
        .max_tool_calls(turns);
    if let Some(strategy) = strategy {
        agent = agent.compaction(budget, strategy);
    }
    let (finished, time) = runtime.block_on(async {
        let start = Instant::now();
        let events: Vec<AgentEvent> = agent.run(vec![Message::user("go")]).collect().await;
        let finished = matches!(events.last(), Some(AgentEvent::Done(done)) if done.stop == StopReason::Finished);
        (finished, start.elapsed())
    });
    (
        finished,
        largest.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed),
        time,
    )
}

/// The compaction group: see the crate docs.
fn compaction(quick: bool) {
    use toolstack::agent::compaction::{ElideToolResults, KeepFirstAndLast};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (turns, bytes, budget) = match quick {
        true => (50, 8 * 1024, 20_000),
        false => (500, 8 * 1024, 100_000),
    };
    eprintln!("\n== compaction: {turns} turns x {bytes} bytes, a budget of {budget} tokens");
    eprintln!("| strategy | finished | largest request (tokens) | tokens sent | time |");
    eprintln!("|---|---|---|---|---|");
    let runs = [
        (
            "none",
            long_conversation(&runtime, turns, bytes, budget, None::<ElideToolResults>),
        ),
        (
            "ElideToolResults::new(4)",
            long_conversation(
                &runtime,
                turns,
                bytes,
                budget,
                Some(ElideToolResults::new(4)),
            ),
        ),
        (
            "KeepFirstAndLast::new(4)",
            long_conversation(
                &runtime,
                turns,
                bytes,
                budget,
                Some(KeepFirstAndLast::new(4)),
            ),
        ),
    ];
    let without = runs[0].1 .2.max(1);
    for (name, (finished, largest, sent, time)) in runs {
        eprintln!(
            "| {name} | {finished} | {} | {} ({:.1}% of none) | {:.2} s |",
            thousands(largest as usize),
            thousands(sent as usize),
            sent as f64 * 100.0 / without as f64,
            time.as_secs_f64()
        );
    }
    // What the check costs a model call when nothing is compacted.
    let (turns, best_of) = match quick {
        true => (100, 2),
        false => (1_000, 10),
    };
    let per_turn = |compacting: bool| {
        (0..best_of)
            .map(|_| {
                let strategy = compacting.then(|| ElideToolResults::new(4));
                long_conversation(&runtime, turns, 16, u64::MAX / 4, strategy).3
            })
            .min()
            .unwrap()
            .as_secs_f64()
            * 1e6
            / turns as f64
    };
    let plain = per_turn(false);
    let checked = per_turn(true);
    eprintln!(
        "== compaction check, nothing compacted ({turns} turns, best of {best_of}): {plain:.2} us a turn without, {checked:.2} with: {:.2} us a model call ({:.2}x)",
        checked - plain,
        checked / plain
    );
}

/// The allocations group's tool: a code search, called as a model calls
/// it (the fields are read by the schema and the decoder, not by us).
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Search {
    path: String,
    query: String,
    context_lines: u32,
    max_hits: u32,
    case_sensitive: bool,
    include: Vec<String>,
}

/// One hit of the search: what its typed output lists.
#[derive(Clone, serde::Serialize)]
struct Hit {
    path: String,
    line: u32,
    text: String,
}

/// The search's arguments: 276 bytes of JSON, about what a model writes.
const SEARCH_ARGUMENTS: &str = concat!(
    r#"{"path":"src/agent/run","query":"where does the run record its step counts and usage before the answer is stored","#,
    r#""context_lines":3,"max_hits":32,"case_sensitive":false,"#,
    r#""include":["src/agent/**/*.rs","src/http/ai_sdk/*.rs","tests/it/agent*.rs","benches/agent.rs","docs/*.md"]}"#,
);

/// The search's output: 32 hits, about 4 KiB of JSON.
fn search_hits() -> Vec<Hit> {
    (0..32)
        .map(|at| Hit {
            path: format!("src/agent/run/mod{at:02}.rs"),
            line: 100 + at,
            text: format!(
                "{at:02}: self.journal.answered(message, continues, self.counts(), planned);"
            ),
        })
        .collect()
}

/// A run of `turns` turns — each but the last calling the search once —
/// as the allocations group makes it.
fn searching_agent(turns: usize) -> Agent<ScriptedModel> {
    let mut script: Vec<Turn> = (0..turns - 1)
        .map(|_| {
            Turn::new()
                .text("Searching the code.")
                .tool_call("search", SEARCH_ARGUMENTS)
        })
        .collect();
    script.push(Turn::new().text("Found it."));
    let hits = search_hits();
    let toolbox = Toolbox::new().tool(tool::from_fn("search", move |_: Search| {
        let hits = hits.clone();
        async move { Ok::<_, ToolError>(hits) }
    }));
    Agent::new(ScriptedModel::new(script), toolbox)
        .max_steps(turns + 1)
        .max_tool_calls(turns)
}

/// Where the allocations group runs its turns.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// The agent's events, no store.
    Agent,
    /// The agent's events, the run journaled into a `MemoryStore`.
    Journaled,
    /// A request to the AI SDK endpoint (its own `MemoryStore`), its SSE
    /// body read to the end.
    #[cfg(feature = "http")]
    AiSdk,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Agent => "agent, no store",
            Path::Journaled => "agent, MemoryStore journal",
            #[cfg(feature = "http")]
            Path::AiSdk => "AI SDK endpoint (MemoryStore)",
        }
    }
}

/// The allocations and bytes one run of `turns` turns takes on `path`,
/// its setup left out.
fn run_allocations(runtime: &tokio::runtime::Runtime, path: Path, turns: usize) -> (u64, u64) {
    let agent = searching_agent(turns);
    let (count, bytes) = match path {
        Path::Agent | Path::Journaled => {
            let agent = match path {
                Path::Journaled => agent.store(toolstack::agent::store::MemoryStore::new()),
                _ => agent,
            };
            let messages = vec![Message::user("Where are the counts recorded?")];
            let before = Counting::now();
            let steps = runtime.block_on(async {
                let mut events = agent.run(messages);
                let mut steps = 0;
                while let Some(event) = events.next().await {
                    if let AgentEvent::Done(done) = event {
                        assert_eq!(done.stop, StopReason::Finished);
                        steps = done.steps;
                    }
                }
                steps
            });
            let after = Counting::now();
            assert_eq!(steps, turns, "the run did not finish");
            (after.0 - before.0, after.1 - before.1)
        }
        #[cfg(feature = "http")]
        Path::AiSdk => {
            use tower::ServiceExt;
            let app = toolstack::http::ai_sdk::ChatEndpoint::new(agent).into_router();
            let body = serde_json::json!({"id": "bench", "messages": [{
                "id": "u1", "role": "user",
                "parts": [{"type": "text", "text": "Where are the counts recorded?"}],
            }]})
            .to_string();
            let request = axum::http::Request::post("/")
                .body(axum::body::Body::from(body))
                .expect("a request");
            let before = Counting::now();
            let bytes = runtime.block_on(async {
                let response = app.oneshot(request).await.expect("a response");
                axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .expect("the body")
            });
            let after = Counting::now();
            let text = std::str::from_utf8(&bytes).expect("UTF-8");
            assert!(text.contains(r#""finishReason":"stop""#), "{text}");
            drop(bytes);
            (after.0 - before.0, after.1 - before.1)
        }
    };
    (count, bytes)
}

/// The allocations group: see the crate docs.
fn allocations() {
    const SHORT_RUN: usize = 2;
    const LONG_RUN: usize = 12;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
    let hits = serde_json::to_string(&search_hits()).expect("hits").len();
    println!(
        "\nallocations per turn calling one tool ({} B of arguments, {hits} B of JSON output); \
         (a {LONG_RUN}-turn run − a {SHORT_RUN}-turn run) ÷ {}, fewest of 5",
        SEARCH_ARGUMENTS.len(),
        LONG_RUN - SHORT_RUN
    );
    let paths = [
        Path::Agent,
        Path::Journaled,
        #[cfg(feature = "http")]
        Path::AiSdk,
    ];
    for path in paths {
        // Warmed once (lazy statics, the runtime's first task), then the
        // fewest of five: a run is deterministic but for such one-offs.
        run_allocations(&runtime, path, SHORT_RUN);
        let fewest = |turns| {
            (0..5)
                .map(|_| run_allocations(&runtime, path, turns))
                .min()
                .expect("five runs")
        };
        let (short, long) = (fewest(SHORT_RUN), fewest(LONG_RUN));
        let turns = (LONG_RUN - SHORT_RUN) as f64;
        println!(
            "{:<32} {:>8.1} allocations {:>9.0} bytes per turn   (a {SHORT_RUN}-turn run: {} allocations, {} bytes)",
            path.name(),
            (long.0 - short.0) as f64 / turns,
            (long.1 - short.1) as f64 / turns,
            short.0,
            short.1,
        );
    }
    #[cfg(not(feature = "http"))]
    println!("AI SDK endpoint: n/a, built without --features http");
}
