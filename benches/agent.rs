//! Agent throughput: folding a recorded stream of 10,000 tool-call
//! fragments (four parallel calls, interleaved) into calls, and running
//! scripted agent turns with a trivial tool — with no run store, and with
//! every run checkpointed in memory and (`--features sqlite`) in a SQLite
//! file, as ratios to the run without a store measured in the same run.
//!
//! `cargo bench --bench agent` runs criterion, then prints chunks/s,
//! turns/s and the checkpointing ratios (`--features sqlite` for SQLite).

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::{Accumulator, Message, ScriptedModel, ToolCallDelta, Turn};
use toolstack::{tool, ToolError, Toolbox};

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

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    summary();
}
