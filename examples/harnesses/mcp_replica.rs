//! One replica of an MCP tool server, for the balanced toolbox
//! (`mcp::balance`): the scale-out example and tests start several.
//!
//! ```text
//! REPLICA_ID=r1 RECORD_FILE=/tmp/r1.log cargo run --features mcp --example mcp_replica -- --port 0
//! ```
//!
//! Prints `listening on http://127.0.0.1:PORT/mcp` once it listens, then
//! serves (stateless 2026-07-28 requests or sessions) two tools:
//!
//! * `echo {text}` — read-only (so idempotent): answers `{replica, text}`;
//! * `record {key}` — not idempotent: appends `key` to `RECORD_FILE` (one
//!   line each; the tests read the files to prove no call ran twice) and
//!   answers `{replica, key}`.
//!
//! With `EXTRA_TOOL=1` it also serves `extra`, so its tool list differs
//! from the others' (a balanced toolbox must refuse it).

use std::io::Write;
use std::sync::{Arc, Mutex};

use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::McpServer;
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// Anything.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Record {
    /// A key unique to the call: it is written once per run of the tool.
    key: String,
}

const USAGE: &str = "\
Usage: REPLICA_ID=r1 RECORD_FILE=/tmp/r1.log mcp_replica [--port N]
  (cargo run --features mcp --example mcp_replica -- ...)

One replica of an MCP tool server (echo, record) on 127.0.0.1, for the
scale-out proof and tests.
  --port N     the port (0: any free one; printed once it listens)
  -h, --help   this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let replica: Arc<str> = std::env::var("REPLICA_ID")
        .unwrap_or_else(|_| "replica".into())
        .into();
    let file = match std::env::var_os("RECORD_FILE") {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => None,
    };
    let file = Arc::new(Mutex::new(file));
    let id = Arc::clone(&replica);
    let echo = tool::from_fn("echo", move |Echo { text }| {
        let replica = Arc::clone(&id);
        async move { Ok::<_, ToolError>(serde_json::json!({ "replica": &*replica, "text": text })) }
    })
    .with_description("Echoes the text, naming the replica that answered.")
    .with_annotations(ToolAnnotations::new().read_only());
    let id = Arc::clone(&replica);
    let record = tool::from_fn("record", move |Record { key }| {
        let (replica, file) = (Arc::clone(&id), Arc::clone(&file));
        async move {
            if let Some(file) = file
                .lock()
                .map_err(|_| ToolError::failed("poisoned"))?
                .as_mut()
            {
                writeln!(file, "{key}")
                    .map_err(|e| ToolError::failed(format!("cannot record: {e}")))?;
            }
            Ok::<_, ToolError>(serde_json::json!({ "replica": &*replica, "key": key }))
        }
    })
    .with_description("Records the key once per run and names the replica.");
    let mut tools = Toolbox::new().tool(echo).tool(record);
    if std::env::var_os("EXTRA_TOOL").is_some() {
        tools = tools.tool(
            tool::from_fn("extra", |_: serde_json::Value| async {
                Ok::<_, ToolError>("extra")
            })
            .with_description("Only on this replica."),
        );
    }
    let args: Vec<String> = std::env::args().collect();
    let port = args
        .iter()
        .position(|a| a == "--port")
        .and_then(|at| args.get(at + 1))
        .map_or(Ok(8100), |p| p.parse::<u16>())?;
    let mcp = McpServer::new(tools).into_http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", mcp);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    std::io::stdout().flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}
