//! The example's in-memory SQLite database (200 customers, 3,000 orders)
//! and its three tools: search the schema, show a table, execute SQL with
//! its rows streamed and progress reported.

use std::sync::{Arc, Mutex};

use rusqlite::types::ValueRef;
use rusqlite::Connection;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use toolstack::{tool, BoxTool, Progress, ToolAnnotations, ToolContext, ToolError};

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
