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
//! `-- --record FILE` writes every model call (the request, the answer's
//! deltas and their timing) to `FILE`; `-- --replay FILE` answers from
//! such a recording instead of the script or the endpoint — a real
//! model's run, replayed offline.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set (and `OTEL_SERVICE_NAME`), the
//! run's spans — `invoke_agent assistant`, each `chat` and `execute_tool`
//! with the GenAI attributes — go to that OpenTelemetry collector
//! (OTLP/HTTP).
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

use std::io::Write;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

use toolstack::agent::{Agent, AgentEvent};
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};
use toolstack::model::record::{RecordLayer, ReplayModel};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{tool, Progress, ToolAnnotations, ToolContext, ToolError, ToolOutput, Toolbox};
use toolstack_layers::approval::ApprovalLayer;
use toolstack_layers::budget::{BudgetLayer, Tap};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Layer, ServiceBuilder};

type Db = Arc<Mutex<Connection>>;

const PROGRESS_EVERY: u64 = 250;

fn database() -> rusqlite::Result<Connection> {
    let db = Connection::open_in_memory()?;
    db.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                              amount REAL NOT NULL, placed_on TEXT NOT NULL);",
    )?;
    let countries = ["France", "Japan", "Brazil", "Kenya", "Canada"];
    for id in 1..=200 {
        db.execute(
            "INSERT INTO customers VALUES (?1, ?2, ?3)",
            (
                id,
                format!("customer {id}"),
                countries[id as usize % countries.len()],
            ),
        )?;
    }
    // Deterministic "random" orders.
    let mut seed: u64 = 42;
    for id in 1..=3_000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let customer = 1 + (seed >> 33) % 200;
        let amount = ((seed >> 20) % 50_000) as f64 / 100.0;
        let day = 1 + (seed >> 45) % 28;
        db.execute(
            "INSERT INTO orders VALUES (?1, ?2, ?3, ?4)",
            (id, customer as i64, amount, format!("2026-11-{day:02}")),
        )?;
    }
    Ok(db)
}

fn sql_error(err: rusqlite::Error) -> ToolError {
    ToolError::failed(format!("SQL error: {err}"))
}

fn cell(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => i.into(),
        ValueRef::Real(f) => f.into(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
        ValueRef::Blob(b) => format!("<{} bytes>", b.len()).into(),
    }
}

/// Search the database schema: tables and columns whose names contain the query.
#[derive(Deserialize, JsonSchema)]
struct SearchSchema {
    /// Part of a table or column name; empty lists everything.
    #[serde(default)]
    query: String,
}

/// Show the first rows of a table.
#[derive(Deserialize, JsonSchema)]
struct ShowTable {
    /// The table's name.
    table: String,
    /// How many rows (default 5, at most 50).
    limit: Option<u32>,
}

/// Run one SQL statement; rows stream out as they are read.
#[derive(Deserialize, JsonSchema)]
struct ExecuteSql {
    /// A single statement. A SELECT runs at once; one that writes waits
    /// for the user's approval.
    sql: String,
}

/// Whether `sql` writes (and so needs the user's approval).
fn writes(sql: &str) -> bool {
    let sql = sql.to_uppercase();
    ["INSERT", "UPDATE", "DELETE", "DROP"].iter().any(|w| {
        sql.split(|c: char| !c.is_ascii_alphabetic())
            .any(|word| word == *w)
    })
}

/// What the toolbox's approval layer does when the call carries no
/// approver of its own (the terminal and the browser each give one).
fn nobody_to_ask(_: &ApprovalRequest) -> impl std::future::Future<Output = Decision> {
    std::future::ready(Decision::deny(
        "nobody was there to approve a write; answer from what you have read",
    ))
}

/// A call waiting for the person at the terminal, and where the answer goes.
type Ask = (ApprovalRequest, oneshot::Sender<Decision>);

/// The terminal's approver: it hands each request to the console, which
/// asks once it has printed what came before it (the model's text, the
/// call, the other calls' output) — the person sees the call, then is
/// asked.
fn terminal_approver() -> (CallerApprover, mpsc::UnboundedReceiver<Ask>) {
    let (asks, asked) = mpsc::unbounded_channel::<Ask>();
    let approver = CallerApprover::new("the user", move |request: &ApprovalRequest| {
        let (answer, decision) = oneshot::channel();
        let _ = asks.send((request.clone(), answer));
        async move {
            decision
                .await
                .unwrap_or_else(|_| Decision::deny("the terminal closed before answering"))
        }
    });
    (approver, asked)
}

/// Asks the person at the terminal; with nobody there (stdin is not a
/// terminal, as in the scripted run), the write is denied.
async fn ask_at_the_terminal(asked: &ApprovalRequest) -> Decision {
    let sql = serde_json::from_str::<Value>(&asked.arguments)
        .ok()
        .and_then(|v| v.get("sql").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| asked.arguments.clone());
    if !std::io::stdin().is_terminal() {
        println!("    (nobody at the terminal to approve a write: denied)");
        return Decision::deny(
            "the user was not there to approve a write; answer from what you have read",
        );
    }
    let answer = tokio::task::spawn_blocking(move || {
        print!("    run this write: {sql}\n    approve? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line
    })
    .await
    .unwrap_or_default();
    if answer.trim().eq_ignore_ascii_case("y") {
        Decision::Allow
    } else {
        Decision::deny("the user said no to this write")
    }
}

fn search_schema(db: &Db, query: &str) -> Result<Value, ToolError> {
    let db = db
        .lock()
        .map_err(|_| ToolError::failed("the database lock was poisoned"))?;
    let mut tables = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .map_err(sql_error)?;
    let names: Vec<String> = tables
        .query_map([], |row| row.get(0))
        .map_err(sql_error)?
        .collect::<Result<_, _>>()
        .map_err(sql_error)?;
    let query = query.to_lowercase();
    let mut found = Map::new();
    for table in names {
        let mut columns = db
            .prepare(&format!("PRAGMA table_info({table})"))
            .map_err(sql_error)?;
        let columns: Vec<String> = columns
            .query_map([], |row| {
                Ok(format!(
                    "{} {}",
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?
                ))
            })
            .map_err(sql_error)?
            .collect::<Result<_, _>>()
            .map_err(sql_error)?;
        if table.contains(&query) || columns.iter().any(|c| c.to_lowercase().contains(&query)) {
            found.insert(table, columns.into());
        }
    }
    Ok(Value::Object(found))
}

fn show_table(db: &Db, table: &str, limit: u32) -> Result<Value, ToolError> {
    if !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(ToolError::invalid_arguments(format!(
            "`{table}` is not a table name"
        )));
    }
    let db = db
        .lock()
        .map_err(|_| ToolError::failed("the database lock was poisoned"))?;
    let mut stmt = db
        .prepare(&format!("SELECT * FROM {table} LIMIT {}", limit.min(50)))
        .map_err(sql_error)?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let mut rows = stmt.query([]).map_err(sql_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        let mut object = Map::new();
        for (i, name) in columns.iter().enumerate() {
            object.insert(name.clone(), cell(row.get_ref(i).map_err(sql_error)?));
        }
        out.push(Value::Object(object));
    }
    Ok(json!({ "table": table, "rows": out }))
}

/// Reads the query's rows on a blocking thread and sends them one by one;
/// stops when the receiver (the tool's stream) is dropped.
fn execute_sql(
    db: Db,
    sql: String,
    ctx: ToolContext,
) -> tokio::sync::mpsc::Receiver<Result<Value, ToolError>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::task::spawn_blocking(move || {
        let run = || -> Result<u64, ToolError> {
            let db = db
                .lock()
                .map_err(|_| ToolError::failed("the database lock was poisoned"))?;
            // A query's row count first, so that progress has a total.
            let reads = sql
                .trim_start()
                .get(..6)
                .is_some_and(|w| w.eq_ignore_ascii_case("select"));
            let total: Option<u64> = reads
                .then(|| {
                    let count = format!(
                        "SELECT COUNT(*) FROM ({})",
                        sql.trim().trim_end_matches(';')
                    );
                    db.query_row(&count, [], |row| row.get::<_, i64>(0)).ok()
                })
                .flatten()
                .map(|n| n.max(0) as u64);
            let mut stmt = db.prepare(&sql).map_err(sql_error)?;
            let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
            let mut rows = stmt.query([]).map_err(sql_error)?;
            let mut n = 0u64;
            let report = |n: u64| {
                let mut progress = Progress::new(n as f64).message(format!("{n} rows read"));
                if let Some(total) = total {
                    progress = progress.total(total as f64);
                }
                ctx.report(progress);
            };
            while let Some(row) = rows.next().map_err(sql_error)? {
                let mut object = Map::new();
                for (i, name) in columns.iter().enumerate() {
                    object.insert(name.clone(), cell(row.get_ref(i).map_err(sql_error)?));
                }
                if tx.blocking_send(Ok(Value::Object(object))).is_err() {
                    return Ok(n); // the consumer walked away
                }
                n += 1;
                if n % PROGRESS_EVERY == 0 {
                    report(n);
                }
            }
            if n % PROGRESS_EVERY != 0 && total.is_some() {
                report(n);
            }
            Ok(n)
        };
        if let Err(err) = run() {
            let _ = tx.blocking_send(Err(err));
        }
    });
    rx
}

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
    let schema_db = db.clone();
    let search = tool::from_fn("search_schema", move |args: SearchSchema| {
        let db = schema_db.clone();
        async move { search_schema(&db, &args.query) }
    })
    .with_description("Search the database schema: tables and columns matching a name.")
    .with_annotations(ToolAnnotations::new().read_only());
    let table_db = db.clone();
    let show = tool::from_fn("show_table", move |args: ShowTable| {
        let db = table_db.clone();
        async move { show_table(&db, &args.table, args.limit.unwrap_or(5)) }
    })
    .with_description("Show the first rows of a table.")
    .with_annotations(ToolAnnotations::new().read_only());
    let sql =
        tool::from_stream_with_context("execute_sql", move |args: ExecuteSql, ctx: ToolContext| {
            tokio_stream::wrappers::ReceiverStream::new(execute_sql(db.clone(), args.sql, ctx))
        })
        .with_description(
            "Run one SQL statement; rows stream out as they are read. \
             Statements that write need the user's approval.",
        )
        .with_annotations(ToolAnnotations {
            destructive_hint: Some(true),
            ..Default::default()
        });
    // The same stack, with writes waiting for the user inside the trace
    // (the decision is on the call's span) and above the timeouts (a
    // person's time is not the tool's), and at most 50 rows reaching the
    // model.
    let sql_layers = ServiceBuilder::new()
        .stream_trace()
        .stream_approval(
            ApprovalLayer::new(nobody_to_ask)
                .when(|request| writes(request.arguments()))
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

fn script() -> ScriptedModel {
    ScriptedModel::new(turns())
}

fn turns() -> Vec<Turn> {
    vec![
        Turn::new()
            .text("Let me find where the orders live.")
            .tool_call("search_schema", r#"{"query":"order"}"#),
        Turn::new().text("A quick look at the data first.").tool_call("show_table", r#"{"table":"orders","limit":3}"#),
        Turn::new().text("Now every order with its customer's country.").tool_call(
            "execute_sql",
            r#"{"sql":"SELECT o.id, c.country, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.id"}"#,
        ),
        Turn::new().text("And the revenue per country.").tool_call(
            "execute_sql",
            r#"{"sql":"SELECT c.country, COUNT(*) AS orders, ROUND(SUM(o.amount), 2) AS revenue FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.country ORDER BY revenue DESC"}"#,
        ),
        Turn::new().text("Let me clear out the test orders under a cent first.").tool_call(
            "execute_sql",
            r#"{"sql":"DELETE FROM orders WHERE amount < 0.01"}"#,
        ),
        Turn::new().text("I was not allowed to delete anything, so the data stands as it is. Brazil leads on revenue; the per-country totals are in the last result."),
    ]
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
fn assistant<M: toolstack::model::ModelService>(model: M, db: Db) -> Agent<M> {
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Spans to an OpenTelemetry collector when the standard variables name
    // one; flushed when `_otel` drops at the end of `main`.
    let _otel = toolstack_layers::otel::init_from_env()?;
    if _otel.is_some() {
        println!("(exporting spans over OTLP to the collector in OTEL_EXPORTER_OTLP_ENDPOINT)");
    }
    let db: Db = Arc::new(Mutex::new(database()?));
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--web") {
        let port = args
            .iter()
            .position(|a| a == "--port")
            .and_then(|at| args.get(at + 1))
            .map_or(Ok(3000), |p| p.parse::<u16>())?;
        // Where the runs waiting for an approval are kept (SQLite): a
        // restarted server finds them there.
        let runs = args
            .iter()
            .position(|a| a == "--runs")
            .and_then(|at| args.get(at + 1))
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("toolstack-assistant-runs.db"));
        // How long the scripted model takes per delta (a real one streams).
        let pace = args
            .iter()
            .position(|a| a == "--pace-ms")
            .and_then(|at| args.get(at + 1))
            .map_or(Ok(15), |ms| ms.parse::<u64>())?;
        return web::serve(db, port, runs, Duration::from_millis(pace)).await;
    }
    let question = "Which country brings the most revenue?";
    let conversation = vec![
        Message::system("You are a careful data analyst with a SQLite database. Use the tools."),
        Message::user(question),
    ];
    println!("user: {question}\n");
    // The same stream-aware layers as the tools', on model calls.
    // A deadline bounds the whole answer (an endless stream of small
    // deltas included); the first-delta and idle bounds are per attempt.
    let provider = args
        .iter()
        .position(|a| a == "--provider")
        .and_then(|at| args.get(at + 1))
        .map(String::as_str);
    if !matches!(provider, None | Some("openai" | "anthropic")) {
        return Err(format!("--provider is openai or anthropic, not {provider:?}").into());
    }
    let anthropic = anthropic(provider)?;
    let openai = match anthropic {
        None => endpoint(),
        Some(_) => None,
    };
    // The chat spans name the provider that answers.
    let trace = match (&anthropic, &openai) {
        (Some(_), _) => TraceLayer::new().provider("anthropic"),
        (_, Some(_)) => TraceLayer::new().provider("openai"),
        _ => TraceLayer::new(),
    };
    let model_layers = ServiceBuilder::new()
        .layer(trace)
        .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(300)))
        .stream_retry(RetryPolicy::new().max_attempts(3))
        .stream_timeout(
            TimeoutLayer::new()
                .first_item(Duration::from_secs(60))
                .idle(Duration::from_secs(20)),
        );
    // The terminal hears of every row read (a budget tap), not only of
    // the 50 a query puts in the model's context.
    let rows_read = Arc::new(AtomicU64::new(0));
    let counter = rows_read.clone();
    let mut extensions = http::Extensions::new();
    extensions.insert(Tap::new(move |item: &ToolOutput| {
        if matches!(item, ToolOutput::Json { .. }) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }));
    let (approver, mut asks) = terminal_approver();
    extensions.insert(approver);
    // `--record FILE`: every model call goes to FILE as it is made;
    // `--replay FILE`: the model answers from such a file, not the script
    // nor the endpoint.
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|at| args.get(at + 1))
            .map(std::path::PathBuf::from)
    };
    let record = flag("--record").map(RecordLayer::create).transpose()?;
    let layers = model_layers;
    let mut events = match (flag("--replay"), anthropic, openai) {
        (Some(file), _, _) => {
            let replay = ReplayModel::open(&file)?;
            eprintln!("(model: the recording in {})", file.display());
            let agent = assistant(layers.service(recorded(replay.clone(), &record)), db);
            match replay.recorded_model() {
                Some(name) => agent.model_name(name),
                None => agent,
            }
            .run_with(conversation, extensions)
        }
        #[cfg(feature = "anthropic")]
        (None, Some(model), _) => {
            println!("(model: Anthropic's Messages API)\n");
            assistant(layers.service(recorded(model, &record)), db)
                .provider("anthropic")
                .run_with(conversation, extensions)
        }
        #[cfg(feature = "openai")]
        (None, None, Some(model)) => {
            println!("(model: the OpenAI-compatible endpoint in OPENAI_BASE_URL)\n");
            assistant(layers.service(recorded(model, &record)), db)
                .provider("openai")
                .run_with(conversation, extensions)
        }
        _ => assistant(layers.service(recorded(script(), &record)), db)
            .model_name("scripted")
            .run_with(conversation, extensions),
    };
    let mut out = std::io::stdout();
    let mut streamed_rows = 0u64;
    // Calls whose request the console has printed, and those whose
    // approver waits: a call is asked about once it is in both.
    let mut printed: Vec<String> = Vec::new();
    let mut waiting: Vec<Ask> = Vec::new();
    loop {
        let event = tokio::select! {
            // What the run streamed first is printed first.
            biased;
            event = events.next() => match event {
                Some(event) => event,
                None => break,
            },
            Some(ask) = asks.recv() => {
                waiting.push(ask);
                ask_the_printed(&mut printed, &mut waiting).await;
                continue;
            }
        };
        if let AgentEvent::ApprovalRequested { call_id, .. } = &event {
            printed.push(call_id.clone());
        }
        let asking = matches!(event, AgentEvent::ApprovalRequested { .. });
        match event {
            AgentEvent::TextDelta(text) => {
                print!("{text}");
                out.flush()?;
            }
            AgentEvent::ReasoningDelta(thought) => {
                print!("\x1b[2m{thought}\x1b[0m");
                out.flush()?;
            }
            AgentEvent::ToolCall(call) => println!("\n  → {}({})", call.name, call.arguments),
            AgentEvent::Progress { progress, .. } => {
                let filled = ((progress.progress / 3_000.0) * 30.0).min(30.0) as usize;
                print!(
                    "\r    [{}{}] {}",
                    "#".repeat(filled),
                    ".".repeat(30 - filled),
                    progress.message.unwrap_or_default()
                );
                out.flush()?;
            }
            AgentEvent::ToolOutput {
                output: ToolOutput::Json { .. },
                ..
            } => streamed_rows += 1,
            AgentEvent::ToolResult { name, result, .. } => {
                let text = result.text().replace('\n', " | ");
                let shown: String = text.chars().take(160).collect();
                let more = if text.len() > shown.len() { " …" } else { "" };
                let status = if result.is_error { "error" } else { "ok" };
                println!(
                    "\n  ← {name} [{status}, {} items]: {shown}{more}",
                    result.content.len()
                );
            }
            AgentEvent::ApprovalRequested {
                name, arguments, ..
            } => {
                println!("\n  ? {name} waits for approval: {arguments}")
            }
            AgentEvent::ApprovalDecided { decision, by, .. } => {
                println!("    {} by {by}", decision.outcome())
            }
            AgentEvent::TurnDiscarded { error } => {
                println!("\n(the model's answer broke off: {error}; asking again)")
            }
            AgentEvent::Error(err) => println!("\nmodel error: {err}"),
            AgentEvent::Done(done) => {
                let usage = done.usage.map_or("not reported".to_owned(), |u| {
                    format!(
                        "{} prompt + {} completion tokens",
                        u.prompt_tokens, u.completion_tokens
                    )
                });
                println!(
                    "\n\ndone: {:?} after {} model turns; {} rows read, {} of them in the model's context; usage {usage}",
                    done.stop,
                    done.steps,
                    rows_read.load(Ordering::Relaxed),
                    streamed_rows
                )
            }
            _ => {}
        }
        if asking {
            ask_the_printed(&mut printed, &mut waiting).await;
        }
    }
    Ok(())
}

/// Asks the person about every waiting call whose request is printed.
async fn ask_the_printed(printed: &mut Vec<String>, waiting: &mut Vec<Ask>) {
    while let Some(at) = waiting
        .iter()
        .position(|(request, _)| printed.contains(&request.call_id))
    {
        let (request, answer) = waiting.remove(at);
        // One printed request for one ask: two calls of one id (a provider
        // that repeats them) are asked about one each.
        if let Some(seen) = printed.iter().position(|id| *id == request.call_id) {
            printed.remove(seen);
        }
        let _ = answer.send(ask_at_the_terminal(&request).await);
    }
}

/// `--web`: the page and the AI SDK chat endpoint.
#[cfg(feature = "http")]
mod web {
    use super::*;
    use toolstack::http::ai_sdk::ChatEndpoint;
    use toolstack::model::{ChatRequest, ModelDelta};

    /// The script again for every question: the turn is chosen by how many
    /// answers the model has given since the user's last message. Each
    /// delta comes `pace` after the last, as a real model's would.
    #[derive(Clone)]
    struct Replay {
        pace: Duration,
    }

    impl tower::Service<ChatRequest> for Replay {
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
            let since_user = request
                .messages
                .iter()
                .rev()
                .take_while(|m| !matches!(m, Message::User { .. }))
                .filter(|m| matches!(m, Message::Assistant { .. }))
                .count();
            let mut turn = turns().into_iter().nth(since_user);
            // The last turn reads what became of the write it asked about.
            let denied = request.messages.iter().rev().find_map(|m| match m {
                Message::Tool { content, .. } => Some(content.contains("denied")),
                _ => None,
            });
            if since_user == 5 && denied == Some(false) {
                turn = Some(Turn::new().text(
                    "The test orders under a cent are cleared out. Brazil leads on revenue; the per-country totals are in the last result.",
                ));
            }
            // Call ids unique in the process (a fresh script numbers from 0).
            static CALLS: AtomicU64 = AtomicU64::new(1);
            let n = CALLS.fetch_add(1, Ordering::Relaxed);
            let answer = ScriptedModel::new(turn).call(request).into_inner();
            let pace = self.pace;
            futures_util::future::ready(answer.map(|deltas| {
                deltas
                    .then(move |delta| async move {
                        tokio::time::sleep(pace).await;
                        delta
                    })
                    .map(move |delta| match delta {
                        Ok(ModelDelta::ToolCall(mut call)) => {
                            if let Some(id) = &mut call.id {
                                *id = format!("{id}_{n}");
                            }
                            Ok(ModelDelta::ToolCall(call))
                        }
                        other => other,
                    })
                    .boxed()
            }))
        }
    }

    pub async fn serve(
        db: Db,
        port: u16,
        runs: std::path::PathBuf,
        pace: Duration,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let agent = Agent::new(Replay { pace }, toolbox(db))
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
            (agent.store(store.clone()), store)
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
