//! The assistant example's own pieces (`examples/assistant.rs`), so that
//! the example shows toolstack and little else: an in-memory SQLite
//! database and its three tools (search the schema, show a table, execute
//! SQL with its rows streamed and progress reported), the scripted model's
//! turns (and, for the web page, the same script paced like a real
//! model), and the terminal: the person asked to approve a write, and the
//! run's events printed as they come.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use toolstack::agent::AgentEvent;
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, BoxTool, Progress, ToolAnnotations, ToolContext, ToolError, ToolOutput};

/// The example's database, shared by its tools.
pub type Db = Arc<Mutex<Connection>>;

const PROGRESS_EVERY: u64 = 250;

/// An in-memory database of 200 customers and 3,000 orders (the same
/// every time).
pub fn database() -> rusqlite::Result<Connection> {
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
pub fn writes(sql: &str) -> bool {
    let sql = sql.to_uppercase();
    ["INSERT", "UPDATE", "DELETE", "DROP"].iter().any(|w| {
        sql.split(|c: char| !c.is_ascii_alphabetic())
            .any(|word| word == *w)
    })
}

/// `search_schema`: tables and columns whose names contain the query.
pub fn search_schema_tool(db: Db) -> BoxTool {
    BoxTool::new(
        tool::from_fn("search_schema", move |args: SearchSchema| {
            let db = db.clone();
            async move { search_schema(&db, &args.query) }
        })
        .with_description("Search the database schema: tables and columns matching a name.")
        .with_annotations(ToolAnnotations::new().read_only()),
    )
}

/// `show_table`: a table's first rows.
pub fn show_table_tool(db: Db) -> BoxTool {
    BoxTool::new(
        tool::from_fn("show_table", move |args: ShowTable| {
            let db = db.clone();
            async move { show_table(&db, &args.table, args.limit.unwrap_or(5)) }
        })
        .with_description("Show the first rows of a table.")
        .with_annotations(ToolAnnotations::new().read_only()),
    )
}

/// `execute_sql`: one statement, its rows streamed as they are read, with
/// progress every 250 rows; marked destructive (it may write).
pub fn execute_sql_tool(db: Db) -> BoxTool {
    BoxTool::new(
        tool::from_stream_with_context("execute_sql", move |args: ExecuteSql, ctx: ToolContext| {
            tokio_stream::wrappers::ReceiverStream::new(execute_sql(db.clone(), args.sql, ctx))
        })
        .with_description(
            "Run one SQL statement; rows stream out as they are read. \
             Statements that write need the user's approval.",
        )
        .with_annotations(ToolAnnotations::new().destructive(true)),
    )
}

/// What the toolbox's approval layer does when the call carries no
/// approver of its own (the terminal and the browser each give one).
pub fn nobody_to_ask(_: &ApprovalRequest) -> impl std::future::Future<Output = Decision> {
    std::future::ready(Decision::deny(
        "nobody was there to approve a write; answer from what you have read",
    ))
}

/// A call waiting for the person at the terminal, and where the answer goes.
pub type Ask = (ApprovalRequest, oneshot::Sender<Decision>);

/// The terminal's approver: it hands each request to the console, which
/// asks once it has printed what came before it (the model's text, the
/// call, the other calls' output) — the person sees the call, then is
/// asked.
pub fn terminal_approver() -> (CallerApprover, mpsc::UnboundedReceiver<Ask>) {
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
                if n.is_multiple_of(PROGRESS_EVERY) {
                    report(n);
                }
            }
            if !n.is_multiple_of(PROGRESS_EVERY) && total.is_some() {
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

/// The scripted model's turns: find the orders, look, query twice, try
/// a write, answer.
pub fn turns() -> Vec<Turn> {
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

/// The scripted model: [`turns`].
pub fn script() -> ScriptedModel {
    ScriptedModel::new(turns())
}

/// The script again for every question, for the web page: the turn is
/// chosen by how many answers the model has given since the user's last
/// message, each delta `pace` after the last, as a real model's would.
#[derive(Clone)]
pub struct PacedScript {
    pace: Duration,
}

impl PacedScript {
    /// The script, a delta every `pace`.
    pub fn new(pace: Duration) -> Self {
        PacedScript { pace }
    }
}

impl tower::Service<ChatRequest> for PacedScript {
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

/// The terminal: prints a run's events as they come, and asks the person
/// about each write once its call is printed.
pub struct Console {
    out: std::io::Stdout,
    /// Calls whose request is printed, and those whose approver waits: a
    /// call is asked about once it is in both.
    printed: Vec<String>,
    waiting: Vec<Ask>,
    /// Rows that reached the model, and every row read (the budget tap's).
    streamed_rows: u64,
    rows_read: Arc<AtomicU64>,
}

impl Console {
    /// A console; `rows_read` is counted by a budget tap.
    pub fn new(rows_read: Arc<AtomicU64>) -> Self {
        Console {
            out: std::io::stdout(),
            printed: Vec::new(),
            waiting: Vec::new(),
            streamed_rows: 0,
            rows_read,
        }
    }

    /// A write waits for the person (from [`terminal_approver`]).
    pub async fn asked(&mut self, ask: Ask) {
        self.waiting.push(ask);
        ask_the_printed(&mut self.printed, &mut self.waiting).await;
    }

    /// Prints one event of the run.
    pub async fn event(&mut self, event: AgentEvent) -> std::io::Result<()> {
        if let AgentEvent::ApprovalRequested { call_id, .. } = &event {
            self.printed.push(call_id.clone());
        }
        let asking = matches!(event, AgentEvent::ApprovalRequested { .. });
        match event {
            AgentEvent::TextDelta(text) => {
                print!("{text}");
                self.out.flush()?;
            }
            AgentEvent::ReasoningDelta(thought) => {
                print!("\x1b[2m{thought}\x1b[0m");
                self.out.flush()?;
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
                self.out.flush()?;
            }
            AgentEvent::ToolOutput {
                output: ToolOutput::Json { .. },
                ..
            } => self.streamed_rows += 1,
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
            } => println!("\n  ? {name} waits for approval: {arguments}"),
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
                    self.rows_read.load(Ordering::Relaxed),
                    self.streamed_rows
                )
            }
            _ => {}
        }
        if asking {
            ask_the_printed(&mut self.printed, &mut self.waiting).await;
        }
        Ok(())
    }
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
