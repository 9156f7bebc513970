//! An offline data-analysis assistant over a real embedded SQLite database.
//!
//! `cargo run --example assistant` creates and fills an in-memory SQLite
//! database, gives an agent three tools — search the schema, show a table,
//! execute SQL (rows stream out as they are read, with progress every 250
//! rows) — each stacked with trace, timeout, retry and rate-limit layers,
//! and prints the agent's event stream live. SQL that writes (`INSERT`,
//! `UPDATE`, `DELETE`, `DROP`) asks the person at the terminal first —
//! and is denied when nobody is there to answer, as in the scripted run,
//! where the denial goes back to the model. At most 50 rows of a query
//! reach the model (its head, its tail, and a note of what was cut); the
//! terminal counts every row read. The model is stacked too
//! (trace, retry before its first delta, timeouts to the first delta and
//! between deltas), and the agent asks again when an answer breaks off
//! after its first delta. It is the scripted one,
//! so it runs with no network and no key; with `--features openai` and
//! `OPENAI_BASE_URL`, `OPENAI_MODEL` (and `OPENAI_API_KEY`) set, a real
//! OpenAI-compatible endpoint answers instead; with `--features anthropic`,
//! `-- --provider anthropic` and `ANTHROPIC_API_KEY`, `ANTHROPIC_MODEL`
//! (and `ANTHROPIC_BASE_URL`) set, Anthropic's Messages API does, its
//! thinking printed as it streams.
//!
//! `-- --record FILE` writes every model call to `FILE`; `-- --replay
//! FILE` answers from such a recording: a real model's run, offline.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set (and `OTEL_SERVICE_NAME`), the
//! run's spans — `invoke_agent assistant`, each `chat` and `execute_tool`
//! with the GenAI attributes — go to that OpenTelemetry collector
//! (OTLP/HTTP).
//!
//! `-- --help` lists the options.
//!
//! `cargo run --example assistant --features http,sqlite -- --web [--port N] [--runs FILE] [--pace-ms MS]`
//! serves the same agent to a browser instead: one page (plain HTML + JS,
//! embedded; `examples/assistant.html`) at `http://127.0.0.1:3000/` and
//! the AI SDK chat endpoint it talks to at `/api/chat`. There the writes
//! wait for the person's Approve / Deny, and every question replays the
//! script. A run waiting for the answer is kept in a SQLite file (`FILE`,
//! by default `toolstack-assistant-runs.db` in the temporary directory):
//! stop the server and start it again, and Approve still works; reload
//! the page mid-answer, and it reconnects to the answer in progress. (The
//! example's own database is in memory: a restarted server has its rows
//! anew.) The scripted model streams a delta every `MS` (15 by default).
//!
//! The database, its tools, the script and the terminal are the demo
//! crate's (`toolstack_demo::assistant`); what is here is toolstack: the
//! tools' stacks, the agent, the model's stack, the event stream, the page.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::agent::Agent;
use toolstack::model::record::{RecordLayer, ReplayModel};
use toolstack::model::Message;
use toolstack::{ToolError, ToolOutput, Toolbox};
use toolstack_demo::assistant::{self, Db};
use toolstack_layers::approval::ApprovalLayer;
use toolstack_layers::budget::{BudgetLayer, Tap};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Layer, ServiceBuilder};

fn toolbox(db: Db) -> Toolbox {
    let layers = || {
        // The README's order: the deadline over everything, the tool's own
        // idle bound below the admission layers (waiting for quota is not
        // the tool's time).
        ServiceBuilder::new()
            .stream_trace()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
            .stream_retry(RetryPolicy::new().max_attempts(3))
            .stream_rate_limit(
                RateLimitLayer::per_tool(Quota::per_second(NonZeroU32::new(20).expect("non-zero")))
                    .wait_at_most(Duration::from_secs(5)),
            )
            .stream_timeout(TimeoutLayer::new().idle(Duration::from_secs(5)))
    };
    let search = assistant::search_schema_tool(db.clone());
    let show = assistant::show_table_tool(db.clone());
    let sql = assistant::execute_sql_tool(db);
    // The same stack, with writes waiting for the user inside the trace
    // (the decision is on the call's span) and above the timeouts (a
    // person's time is not the tool's), and at most 50 rows reaching the
    // model.
    let sql_layers = ServiceBuilder::new()
        .stream_trace()
        .stream_approval(
            ApprovalLayer::new(assistant::nobody_to_ask)
                .when(|request| assistant::writes(request.arguments()))
                .decided_by("the user")
                // The person at the terminal, or in the browser (`--web`),
                // decides: each run carries its own approver.
                .caller_decides(),
        )
        .stream_budget(BudgetLayer::new().max_items(50).notice(|cut| {
            format!(
                "[… {} rows omitted here. Narrow the query (WHERE, GROUP BY) or ask for a page (LIMIT/OFFSET).]",
                cut.items
            )
        }))
        .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
        .stream_retry(RetryPolicy::new().max_attempts(3))
        .stream_rate_limit(
            RateLimitLayer::per_tool(Quota::per_second(NonZeroU32::new(20).expect("non-zero")))
                .wait_at_most(Duration::from_secs(5)),
        )
        .stream_timeout(TimeoutLayer::new().idle(Duration::from_secs(5)));
    Toolbox::new()
        .layered(search, layers())
        .layered(show, layers())
        .layered(sql, sql_layers)
}

/// A model, recorded by `record` when there is one (one type either way).
type Model = tower::util::BoxCloneSyncService<
    toolstack::model::ChatRequest,
    futures_util::stream::BoxStream<'static, Result<toolstack::model::ModelDelta, ToolError>>,
    ToolError,
>;

fn recorded<M>(model: M, record: &Option<RecordLayer>) -> Model
where
    M: toolstack::model::ModelService + Sync,
{
    use tower::ServiceExt;
    match record {
        Some(record) => Model::new(record.layer(model).map_response(|answer| answer.boxed())),
        None => Model::new(
            model
                .map_response(|answer| answer.boxed())
                .map_err(Into::into),
        ),
    }
}

/// The assistant's agent over `model`: its tools, and a limit of 8 steps;
/// two tool calls at once; a turn cut off mid-answer discarded and asked
/// again (the retry layer cannot take back deltas already shown).
fn analyst<M: toolstack::model::ModelService>(model: M, db: Db) -> Agent<M> {
    Agent::new(model, toolbox(db))
        .name("assistant")
        .max_steps(8)
        .parallel_tools(2)
        .retry_model_turns(2)
}

/// A real endpoint when `OPENAI_BASE_URL` and `OPENAI_MODEL` are set (and
/// the `openai` feature is on).
#[cfg(feature = "openai")]
fn endpoint() -> Option<toolstack::model::OpenAiModel> {
    toolstack::model::OpenAiModel::from_env()
}

#[cfg(not(feature = "openai"))]
fn endpoint() -> Option<std::convert::Infallible> {
    if std::env::var_os("OPENAI_BASE_URL").is_some() {
        println!("(OPENAI_BASE_URL is set: build with `--features openai` to use it; using the scripted model)");
    }
    None
}

/// `--provider anthropic`: Anthropic's Messages API, from
/// `ANTHROPIC_API_KEY`, `ANTHROPIC_MODEL` and `ANTHROPIC_BASE_URL` (and the
/// `anthropic` feature); `None` for another provider or none.
#[cfg(feature = "anthropic")]
fn anthropic(
    provider: Option<&str>,
) -> Result<Option<toolstack::model::AnthropicModel>, Box<dyn std::error::Error>> {
    if provider != Some("anthropic") {
        return Ok(None);
    }
    match toolstack::model::AnthropicModel::from_env() {
        Some(model) => Ok(Some(model)),
        None => Err("--provider anthropic needs ANTHROPIC_API_KEY and ANTHROPIC_MODEL".into()),
    }
}

#[cfg(not(feature = "anthropic"))]
fn anthropic(
    provider: Option<&str>,
) -> Result<Option<std::convert::Infallible>, Box<dyn std::error::Error>> {
    match provider {
        Some("anthropic") => {
            Err("--provider anthropic needs the example built with `--features anthropic`".into())
        }
        _ => Ok(None),
    }
}

const USAGE: &str = "\
Usage: cargo run --example assistant [--features openai|anthropic] -- [OPTIONS]

The agent answers one question over an in-memory SQLite database, its
events printed as they stream. The model is the scripted one, unless:
  --provider openai|anthropic   a real endpoint (OPENAI_BASE_URL, OPENAI_MODEL,
                                OPENAI_API_KEY / ANTHROPIC_API_KEY, ANTHROPIC_MODEL)
  --record FILE                 write every model call to FILE
  --replay FILE                 answer from such a recording, offline
With --features http[,sqlite]:
  --web                         serve the page and the AI SDK endpoint instead
  --port N                      its port (3000)
  --runs FILE                   where waiting runs are kept (a SQLite file)
  --pace-ms MS                  the scripted model's time per delta (15)
  -h, --help                    this text
OTEL_EXPORTER_OTLP_ENDPOINT sends the spans to an OpenTelemetry collector.
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|at| args.get(at + 1))
            .cloned()
    };
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    // Spans to an OpenTelemetry collector when the standard variables name
    // one; flushed when `_otel` drops at the end of `main`.
    let _otel = toolstack_layers::otel::init_from_env()?;
    if _otel.is_some() {
        println!("(exporting spans over OTLP to the collector in OTEL_EXPORTER_OTLP_ENDPOINT)");
    }
    let db: Db = Arc::new(Mutex::new(assistant::database()?));
    if args.iter().any(|a| a == "--web") {
        let port = flag("--port").map_or(Ok(3000), |p| p.parse::<u16>())?;
        // Where the runs waiting for an approval are kept: a restarted
        // server finds them there.
        let runs = flag("--runs").map_or_else(
            || std::env::temp_dir().join("toolstack-assistant-runs.db"),
            std::path::PathBuf::from,
        );
        let pace = flag("--pace-ms").map_or(Ok(15), |ms| ms.parse::<u64>())?;
        return web::serve(db, port, runs, Duration::from_millis(pace)).await;
    }
    let question = "Which country brings the most revenue?";
    let conversation = vec![
        Message::system("You are a careful data analyst with a SQLite database. Use the tools."),
        Message::user(question),
    ];
    println!("user: {question}\n");
    let provider = flag("--provider");
    if !matches!(provider.as_deref(), None | Some("openai" | "anthropic")) {
        return Err(
            format!("--provider is openai or anthropic, not {provider:?}\n\n{USAGE}").into(),
        );
    }
    let anthropic = anthropic(provider.as_deref())?;
    let openai = match anthropic {
        None => endpoint(),
        Some(_) => None,
    };
    // The same stream-aware layers as the tools', on model calls (the chat
    // spans name the provider): a deadline over the whole answer, and per
    // attempt bounds to the first delta and between deltas.
    let trace = match (&anthropic, &openai) {
        (Some(_), _) => TraceLayer::new().provider("anthropic"),
        (_, Some(_)) => TraceLayer::new().provider("openai"),
        _ => TraceLayer::new(),
    };
    let layers = ServiceBuilder::new()
        .layer(trace)
        .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(300)))
        .stream_retry(RetryPolicy::new().max_attempts(3))
        .stream_timeout(
            TimeoutLayer::new()
                .first_item(Duration::from_secs(60))
                .idle(Duration::from_secs(20)),
        );
    // The terminal hears of every row read (a budget tap), not only of the
    // 50 a query puts in the model's context; and it is the approver.
    let rows_read = Arc::new(AtomicU64::new(0));
    let counter = rows_read.clone();
    let mut extensions = http::Extensions::new();
    extensions.insert(Tap::new(move |item: &ToolOutput| {
        if matches!(item, ToolOutput::Json { .. }) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }));
    let (approver, mut asks) = assistant::terminal_approver();
    extensions.insert(approver);
    let record = flag("--record").map(RecordLayer::create).transpose()?;
    let mut events = match (flag("--replay"), anthropic, openai) {
        (Some(file), _, _) => {
            let replay = ReplayModel::open(&file)?;
            eprintln!("(model: the recording in {file})");
            let agent = analyst(layers.service(recorded(replay.clone(), &record)), db);
            match replay.recorded_model() {
                Some(name) => agent.model_name(name),
                None => agent,
            }
            .run_with(conversation, extensions)
        }
        #[cfg(feature = "anthropic")]
        (None, Some(model), _) => {
            println!("(model: Anthropic's Messages API)\n");
            analyst(layers.service(recorded(model, &record)), db)
                .provider("anthropic")
                .run_with(conversation, extensions)
        }
        #[cfg(feature = "openai")]
        (None, None, Some(model)) => {
            println!("(model: the OpenAI-compatible endpoint in OPENAI_BASE_URL)\n");
            analyst(layers.service(recorded(model, &record)), db)
                .provider("openai")
                .run_with(conversation, extensions)
        }
        _ => analyst(layers.service(recorded(assistant::script(), &record)), db)
            .model_name("scripted")
            .run_with(conversation, extensions),
    };
    let mut console = assistant::Console::new(rows_read);
    loop {
        tokio::select! {
            // What the run streamed first is printed first.
            biased;
            event = events.next() => match event {
                Some(event) => console.event(event).await?,
                None => break,
            },
            Some(ask) = asks.recv() => console.asked(ask).await,
        }
    }
    Ok(())
}

/// `--web`: the page and the AI SDK chat endpoint.
#[cfg(feature = "http")]
mod web {
    use super::*;
    use toolstack::http::ai_sdk::ChatEndpoint;

    pub async fn serve(
        db: Db,
        port: u16,
        runs: std::path::PathBuf,
        pace: Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let agent = Agent::new(assistant::PacedScript::new(pace), toolbox(db))
            .name("assistant")
            .max_steps(8)
            .parallel_tools(2);
        // Runs waiting for a person's approval are checkpointed in SQLite,
        // and so are the answers in progress: stopped and started again,
        // the server still takes the answer; a reloaded page reconnects.
        #[cfg(feature = "sqlite")]
        let (agent, log) = {
            eprintln!("(runs kept in {})", runs.display());
            let store = toolstack::agent::store::sqlite::SqliteStore::open(&runs)?;
            (agent.store(store.clone()), store)
        };
        #[cfg(not(feature = "sqlite"))]
        let (agent, log) = {
            eprintln!(
                "(runs kept in memory, not in {}: build with `--features http,sqlite` to keep them across a restart)",
                runs.display()
            );
            let store = toolstack::agent::store::MemoryStore::new();
            (
                agent.store(store),
                toolstack::http::ai_sdk::MemoryChunkLog::new(),
            )
        };
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get(|| async {
                    axum::response::Html(include_str!("assistant.html"))
                }),
            )
            .nest(
                "/api/chat",
                ChatEndpoint::new(agent)
                    .resumable_streams(log)
                    .into_router(),
            );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("serving on http://{}/", listener.local_addr()?);
        axum::serve(listener, app).await?;
        Ok(())
    }
}

#[cfg(not(feature = "http"))]
mod web {
    pub async fn serve(
        _: super::Db,
        _: u16,
        _: std::path::PathBuf,
        _: std::time::Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        Err("the web page needs the `http` feature: cargo run --example assistant --features http -- --web".into())
    }
}
