//! Tool search and typed answers.
//!
//! `cargo bench --bench tool_search` runs criterion, then prints:
//!
//! * **recall@5** of [`ToolSearch`] over the demo crate's catalogue (325
//!   tools as merged MCP servers list them, plus the 5 demo tools) with its
//!   205 queries worded as users ask: the share of queries whose one right
//!   tool is among the first five found — for all of them, and for each
//!   half (the even-numbered queries, from which the ranking's thesaurus
//!   was written, and the odd-numbered ones, held out);
//! * the **tokens of tool definitions** a model call carries (each tool as
//!   the OpenAI client sends it — name, description, parameters — at 4
//!   bytes a token): every tool shown, against the demo tools shown with
//!   the catalogue deferred — before any search (the demo tools and
//!   `search_tools`) and after one search has loaded five tools;
//! * the cost of a **typed answer**: a one-turn run whose answer is decoded
//!   into a struct and validated (`Agent::output`) against the same run
//!   ending with the text, in the same process;
//! * **how the cost grows** with the number of deferred tools: indexing
//!   and one search over 33, 330, 3,300 and 33,000 tools (the catalogue cut
//!   to a tenth, whole, and copied 10 and 100 times under new names), per
//!   tool indexed (best of 3).
//!
//! `-- --summary` prints only the recall, tokens and typed-answer summary.
//!
//! Criterion's groups: `tool_search/search` (one query), `tool_search/index`
//! (indexing the 330 tools), `typed_answer/{text,typed}`.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use http::Extensions;
use toolstack::agent::{search_tool_info, search_tool_info_with_names, Agent, AgentEvent};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::toolbox::ToolSearch;
use toolstack::{ToolInfo, Toolbox};
use toolstack_demo::catalogue;

/// The bytes per token of the estimate (the budget layer's).
const BYTES_PER_TOKEN: usize = 4;

fn deferred() -> Toolbox {
    catalogue::demo_tools().merge(catalogue::toolbox().deferred())
}

/// The tokens of tool definitions as the OpenAI client sends them.
fn definition_tokens<'a>(tools: impl Iterator<Item = &'a ToolInfo>) -> usize {
    tools
        .map(|info| {
            let definition = serde_json::json!({
                "type": "function",
                "function": {
                    "name": info.name(),
                    "description": info.description(),
                    "parameters": info.input_schema(),
                },
            });
            serde_json::to_vec(&definition).unwrap().len()
        })
        .sum::<usize>()
        .div_ceil(BYTES_PER_TOKEN)
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // decoded, not read
struct Forecast {
    city: String,
    days: u32,
    summary: String,
}

const ANSWER: &str = r#"{"city": "Lisbon", "days": 3, "summary": "sunny, then rain on Sunday"}"#;

/// One one-turn run answering `ANSWER`, typed or not; the events seen.
async fn answer(typed: bool) -> usize {
    let model = ScriptedModel::new([Turn::new().text(ANSWER)]);
    let agent = Agent::new(model, Toolbox::new());
    let run = match typed {
        true => agent
            .output::<Forecast>()
            .run(vec![Message::user("forecast?")]),
        false => agent.run(vec![Message::user("forecast?")]),
    };
    run.filter(|e| std::future::ready(matches!(e, AgentEvent::Done(_))))
        .count()
        .await
}

fn bench(c: &mut Criterion) {
    let toolbox = deferred();
    let search = ToolSearch::new(&toolbox);
    let extensions = Extensions::new();
    c.bench_function("tool_search/search", |b| {
        b.iter(|| {
            black_box(search.search(
                black_box("file a bug on github about the login page crashing"),
                &extensions,
                5,
            ))
        })
    });
    c.bench_function("tool_search/index", |b| {
        b.iter(|| black_box(ToolSearch::new(black_box(&toolbox))))
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("typed_answer");
    group.bench_function("text", |b| b.iter(|| runtime.block_on(answer(false))));
    group.bench_function("typed", |b| b.iter(|| runtime.block_on(answer(true))));
    group.finish();
}

/// Recall@5 of `queries` (all, or those of one parity).
fn recall(search: &ToolSearch, parity: Option<usize>) -> (usize, usize) {
    let extensions = Extensions::new();
    let queries: Vec<_> = catalogue::queries()
        .into_iter()
        .enumerate()
        .filter(|(at, _)| parity.is_none_or(|p| at % 2 == p))
        .map(|(_, q)| q)
        .collect();
    let found = queries
        .iter()
        .filter(|q| {
            search
                .search(&q.query, &extensions, 5)
                .iter()
                .any(|t| t.name() == q.expected)
        })
        .count();
    (found, queries.len())
}

fn summary() {
    let toolbox = deferred();
    let search = ToolSearch::new(&toolbox);
    let extensions = Extensions::new();
    println!();
    println!(
        "tool search over {} tools ({} deferred):",
        toolbox.len(),
        search.len()
    );
    for (what, parity) in [
        ("all queries", None),
        ("even (thesaurus written from these)", Some(0)),
        ("odd (held out)", Some(1)),
    ] {
        let (found, of) = recall(&search, parity);
        println!(
            "  recall@5, {what:<36} {:>5.1} % ({found} of {of})",
            found as f64 * 100.0 / of as f64
        );
    }

    let every = definition_tokens(toolbox.infos());
    let always: Vec<ToolInfo> = toolbox
        .infos()
        .filter(|t| !toolbox.is_deferred(t.name()))
        .cloned()
        .collect();
    let search_tool = search_tool_info(search.len());
    let before = definition_tokens(always.iter().chain([&search_tool]));
    let loaded = search.search("file a bug on github about the login page", &extensions, 5);
    let after = definition_tokens(
        always
            .iter()
            .chain(loaded.iter().copied())
            .chain([&search_tool]),
    );
    let deferred_names: Vec<&str> = toolbox
        .infos()
        .filter(|t| toolbox.is_deferred(t.name()))
        .map(ToolInfo::name)
        .collect();
    let names_tool = search_tool_info_with_names(&deferred_names);
    let names_in_view = definition_tokens(always.iter().chain([&names_tool]));
    println!("tokens of tool definitions per model call (4 bytes a token):");
    println!("  every tool shown                    {every:>7}");
    for (what, tokens) in [
        ("deferred, before a search", before),
        ("deferred, five tools loaded", after),
        ("deferred, names in view", names_in_view),
    ] {
        println!(
            "  {what:<35} {tokens:>7}  ({:.1} % fewer)",
            100.0 - tokens as f64 * 100.0 / every as f64
        );
    }

    // The typed answer: best of 5 × 2,000 runs of each, interleaved.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let time = |typed: bool| {
        let start = Instant::now();
        for _ in 0..2_000 {
            black_box(runtime.block_on(answer(typed)));
        }
        start.elapsed().as_nanos() as f64 / 2_000.0
    };
    let (mut text, mut typed) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        text = text.min(time(false));
        typed = typed.min(time(true));
    }
    println!("a one-turn run ending with its answer (best of 5 × 2,000):");
    println!("  text   {:>8.0} ns", text);
    println!(
        "  typed  {:>8.0} ns  (+{:.0} ns: decoded and validated, {:.2}×)",
        typed,
        typed - text,
        typed / text
    );
}

/// The catalogue's first `n` tools, or its copies renamed (`{name}_{k}`)
/// up to `n`, deferred.
fn catalogue_of(n: usize) -> Toolbox {
    let infos = catalogue::infos();
    let toolbox = (0..n).fold(Toolbox::new(), |toolbox, at| {
        let info = &infos[at % infos.len()];
        let info = match at / infos.len() {
            0 => info.clone(),
            k => info.clone().with_name(format!("{}_{k}", info.name())),
        };
        toolbox.service(
            info,
            tower::service_fn(|_: toolstack::ToolRequest| async {
                Ok::<_, toolstack::ToolError>(futures_util::stream::empty::<toolstack::ToolItem>())
            }),
        )
    });
    toolbox.deferred()
}

fn growth() {
    println!("how the cost grows with the tools deferred (best of 3):");
    println!("  tools    index (ms)  per tool (µs)  search (µs)  per tool (ns)");
    let extensions = Extensions::new();
    for n in [33, 330, 3_300, 33_000] {
        let toolbox = catalogue_of(n);
        let (mut index, mut search) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            let start = Instant::now();
            let built = ToolSearch::new(&toolbox);
            index = index.min(start.elapsed().as_secs_f64());
            let start = Instant::now();
            let rounds = 20;
            for _ in 0..rounds {
                black_box(built.search(
                    "file a bug on github about the login page",
                    &extensions,
                    5,
                ));
            }
            search = search.min(start.elapsed().as_secs_f64() / rounds as f64);
        }
        println!(
            "  {n:>6}  {:>10.2}  {:>13.2}  {:>11.1}  {:>13.1}",
            index * 1e3,
            index * 1e6 / n as f64,
            search * 1e6,
            search * 1e9 / n as f64
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    if std::env::args().any(|a| a == "--summary") {
        summary();
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    summary();
    growth();
}
