//! Tool search by meaning, with the local model (all-MiniLM-L6-v2).
//!
//! `cargo bench --bench search_meaning --features local-embeddings` prints:
//!
//! * **recall@1 and recall@5** for words alone, meaning alone and both
//!   fused, on each half of each query set: the demo catalogue's 205
//!   queries (the even-numbered half is the one the thesaurus and the
//!   fusion were tuned on; the odd-numbered half is held out), and, when
//!   present, the real MCP servers' catalogue (`demo/data/mcp/`) with its
//!   own queries, split the same way;
//! * **the no-match threshold**: the best similarity of queries that have
//!   a right tool and of those that have none, and the threshold that
//!   tells them apart best on the tuned half, applied to the held-out one;
//! * **cost**: the model's load time and memory, index build per tool, and
//!   one search (the query's embedding included) at 100, 1,000 and 10,000
//!   tools, p50 of 50.
//!
//! The model directory comes from `TOOLSTACK_EMBEDDING_MODEL`, else
//! `target/models/all-MiniLM-L6-v2` (`scripts/fetch-embedding-model.sh`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use http::Extensions;
use toolstack::embed::{Embeddings, LocalEmbedder};
use toolstack::toolbox::ToolSearch;
use toolstack::{ToolInfo, Toolbox};
use toolstack_demo::catalogue;

/// One query and the name of its right tool (`None`: no tool serves it).
struct Query {
    query: String,
    expected: Option<String>,
}

/// Resident memory, in MiB (Linux).
fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLSTACK_EMBEDDING_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models/all-MiniLM-L6-v2")
        });
    dir.join("model.safetensors").exists().then_some(dir)
}

/// The real catalogue (`demo/data/mcp/catalogue.json`) as one deferred
/// toolbox (each tool named `server_tool`, as a merge with a prefix
/// would), and its queries, when both are present.
fn real() -> Option<(Toolbox, Vec<Query>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/data/mcp");
    let catalogue: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("catalogue.json")).ok()?).ok()?;
    let queries: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("queries.json")).ok()?).ok()?;
    let mut infos = Vec::new();
    for server in catalogue.as_array()? {
        let prefix = server["server"].as_str()?;
        for tool in server["tools"].as_array()? {
            let name = format!("{prefix}_{}", tool["name"].as_str()?);
            let mut info = ToolInfo::new(name);
            if let Some(description) = tool["description"].as_str() {
                info = info.with_description(description);
            }
            if tool["inputSchema"].is_object() {
                info = info.with_input_schema(tool["inputSchema"].clone());
            }
            infos.push(info);
        }
    }
    let queries = queries
        .as_array()?
        .iter()
        .filter_map(|q| {
            Some(Query {
                query: q["query"].as_str()?.to_owned(),
                expected: q["expected"].as_str().map(str::to_owned),
            })
        })
        .collect();
    Some((catalogue::from_infos(infos).deferred(), queries))
}

fn demo() -> (Toolbox, Vec<Query>) {
    let toolbox = catalogue::demo_tools().merge(catalogue::toolbox().deferred());
    let queries = catalogue::queries()
        .into_iter()
        .map(|q| Query {
            query: q.query,
            expected: Some(q.expected),
        })
        .collect();
    (toolbox, queries)
}

/// Recall@1 and @5 (and the count) over the queries with a right tool in
/// half `parity`.
async fn recall(search: &ToolSearch, queries: &[Query], parity: usize) -> (f64, f64, usize) {
    let extensions = Extensions::new();
    let (mut at1, mut at5, mut n) = (0, 0, 0);
    for (at, query) in queries.iter().enumerate() {
        let Some(expected) = &query.expected else {
            continue;
        };
        if at % 2 != parity {
            continue;
        }
        n += 1;
        let found = search.find(&query.query, &extensions, 5).await;
        if found.tools.first().is_some_and(|t| t.name() == expected) {
            at1 += 1;
        }
        if found.tools.iter().any(|t| t.name() == expected) {
            at5 += 1;
        }
    }
    let n_f = n.max(1) as f64;
    (100.0 * at1 as f64 / n_f, 100.0 * at5 as f64 / n_f, n)
}

async fn quality(
    name: &str,
    toolbox: &Toolbox,
    queries: &[Query],
    embeddings: &Embeddings,
) -> ToolSearch {
    let started = Instant::now();
    let hybrid = ToolSearch::hybrid(toolbox, embeddings).await;
    let built = started.elapsed();
    println!(
        "\n## {name}: {} tools, {} queries ({} with no right tool); index built in {:.1} s ({:.1} ms a tool)\n",
        hybrid.len(),
        queries.len(),
        queries.iter().filter(|q| q.expected.is_none()).count(),
        built.as_secs_f64(),
        built.as_secs_f64() * 1000.0 / hybrid.len().max(1) as f64
    );
    println!("| ranking | tuned half: recall@1 | recall@5 | held-out half: recall@1 | recall@5 |");
    println!("|---|---|---|---|---|");
    for (label, search) in [
        ("words", ToolSearch::new(toolbox)),
        ("meaning", hybrid.clone().fusion(0.0, 1.0)),
        ("both (fused)", hybrid.clone()),
    ] {
        let (t1, t5, tn) = recall(&search, queries, 0).await;
        let (h1, h5, hn) = recall(&search, queries, 1).await;
        println!("| {label} | {t1:.1} % | {t5:.1} % | {h1:.1} % | {h5:.1} % |  (n = {tn} / {hn})");
    }
    if std::env::args().any(|a| a == "--tune") {
        // The fusion's weight of words, chosen on the tuned half only.
        println!("\n| words' weight (meaning 1) | tuned: recall@1 | recall@5 | held out: recall@1 | recall@5 |");
        println!("|---|---|---|---|---|");
        for words in [0.25, 0.5, 0.75, 1.0, 1.5] {
            let search = hybrid.clone().fusion(words, 1.0);
            let (t1, t5, _) = recall(&search, queries, 0).await;
            let (h1, h5, _) = recall(&search, queries, 1).await;
            println!("| {words} | {t1:.1} % | {t5:.1} % | {h1:.1} % | {h5:.1} % |");
        }
    }
    hybrid
}

/// The best similarity of each query, split by whether it has a right
/// tool; the threshold that best tells them apart on the tuned half, and
/// how it does on the held-out half.
async fn threshold(search: &ToolSearch, queries: &[Query]) {
    let extensions = Extensions::new();
    let mut scored = Vec::new();
    for (at, query) in queries.iter().enumerate() {
        let found = search.find(&query.query, &extensions, 1).await;
        scored.push((
            at % 2,
            query.expected.is_some(),
            found.similarity.unwrap_or(0.0),
        ));
    }
    let accuracy = |parity: usize, t: f32| {
        let half: Vec<_> = scored.iter().filter(|s| s.0 == parity).collect();
        let right = half.iter().filter(|s| s.1 == (s.2 >= t)).count();
        let kept = half.iter().filter(|s| s.1 && s.2 >= t).count();
        let answerable = half.iter().filter(|s| s.1).count();
        let refused = half.iter().filter(|s| !s.1 && s.2 < t).count();
        let none = half.len() - answerable;
        (
            100.0 * right as f64 / half.len().max(1) as f64,
            100.0 * kept as f64 / answerable.max(1) as f64,
            100.0 * refused as f64 / none.max(1) as f64,
        )
    };
    if !scored.iter().any(|s| !s.1) {
        println!("\n(no queries without a right tool: no threshold measured)");
        return;
    }
    let mut best = (0.0, 0.0);
    for step in 0..=80 {
        let t = step as f32 * 0.01;
        let (acc, _, _) = accuracy(0, t);
        if acc > best.1 {
            best = (t, acc);
        }
    }
    let (t, _) = best;
    let (ta, tk, tr) = accuracy(0, t);
    let (ha, hk, hr) = accuracy(1, t);
    println!("\nno-match threshold (best similarity below it: nothing fits), chosen on the tuned half: {t:.2}");
    println!("| half | right calls | answerable kept | no-tool refused |");
    println!("|---|---|---|---|");
    println!("| tuned | {ta:.1} % | {tk:.1} % | {tr:.1} % |");
    println!("| held out | {ha:.1} % | {hk:.1} % | {hr:.1} % |");
}

/// One search's p50 (of 50 distinct queries, each embedded: a cache of
/// its own, empty at first) over `n` tools: the demo catalogue copied
/// under new names.
async fn search_cost(model: &LocalEmbedder, n: usize) -> (Duration, Duration) {
    let embeddings = &Embeddings::new(model.clone());
    let infos = catalogue::infos();
    let mut all = Vec::with_capacity(n);
    for copy in 0.. {
        for info in &infos {
            if all.len() == n {
                break;
            }
            let mut info = info.clone();
            if copy > 0 {
                let name = format!("{}_{copy}", info.name());
                info = info.with_name(name);
            }
            all.push(info);
        }
        if all.len() == n {
            break;
        }
    }
    let toolbox = catalogue::from_infos(all).deferred();
    let started = Instant::now();
    let search = ToolSearch::hybrid(&toolbox, embeddings).await;
    let built = started.elapsed();
    let extensions = Extensions::new();
    let queries = catalogue::queries();
    let mut times = Vec::new();
    for query in queries.iter().take(50) {
        let started = Instant::now();
        std::hint::black_box(search.find(&query.query, &extensions, 5).await);
        times.push(started.elapsed());
    }
    times.sort();
    (built, times[times.len() / 2])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(dir) = model_dir() else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "!! SKIPPED: no embedding model (run scripts/fetch-embedding-model.sh, or set TOOLSTACK_EMBEDDING_MODEL)"
        );
        return;
    };
    let before = rss_mib();
    let started = Instant::now();
    let model = LocalEmbedder::load(&dir).expect("the model loads");
    println!(
        "model {}: loaded in {:.0} ms, +{:.0} MiB resident",
        dir.display(),
        started.elapsed().as_secs_f64() * 1000.0,
        rss_mib() - before
    );
    let embeddings = Embeddings::new(model.clone());
    let (toolbox, queries) = demo();
    quality("the demo catalogue", &toolbox, &queries, &embeddings).await;
    match real() {
        Some((toolbox, queries)) => {
            let search = quality("real MCP servers (demo/data/mcp)", &toolbox, &queries, &embeddings).await;
            threshold(&search, &queries).await;
        }
        None => println!("\n(demo/data/mcp/catalogue.json or queries.json missing: the real catalogue was not measured)"),
    }
    if std::env::args().any(|a| a == "--quality") {
        return;
    }
    println!("\n## cost of one search, the query's embedding included (p50 of 50)\n");
    println!("| tools | index build | per tool | one search |");
    println!("|---:|---:|---:|---:|");
    for n in [100, 1_000, 10_000] {
        let before = rss_mib();
        let (built, search) = search_cost(&model, n).await;
        println!(
            "| {n} | {:.1} s | {:.2} ms | {:.2} ms |  (+{:.1} MiB resident)",
            built.as_secs_f64(),
            built.as_secs_f64() * 1000.0 / n as f64,
            search.as_secs_f64() * 1000.0,
            rss_mib() - before
        );
    }
}
