//! A toolbox served over MCP, on stdio or streamable HTTP.
//!
//! ```text
//! cargo run --features mcp --example mcp_server -- --stdio   # for an MCP host that spawns it
//! cargo run --features mcp --example mcp_server              # http://127.0.0.1:8000/mcp
//! ```
//!
//! Over HTTP the endpoint sits behind a bearer-token check that maps the
//! token to a caller: `Authorization: Bearer guest-token` sees `add` and
//! `count`; `Bearer admin-token` also sees `shutdown_reactor`. The
//! toolbox's resolver reads the caller from the HTTP request's extensions,
//! so one server shows each caller its own tools.
//!
//! Try it with the MCP Inspector (`npx @modelcontextprotocol/inspector`),
//! or with toolstack's own client:
//! `McpClient::connect(StreamableHttpClientTransport::from_config(
//! StreamableHttpClientTransportConfig::with_uri(url).auth_header("admin-token")))`.

use std::time::Duration;

use axum::middleware;
use futures_util::stream::{self, StreamExt};
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::McpServer;
use toolstack::{tool, Progress, ToolAnnotations, ToolError, ToolOutput, Toolbox};
use toolstack_demo::auth::{require_bearer, Tokens};

/// Who is calling, put in the request's extensions by the auth check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Guest,
    Admin,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Count {
    /// Count from 1 up to this number (at most 1000).
    to: u32,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Shutdown {
    /// Why.
    reason: String,
}

fn toolbox() -> Toolbox {
    Toolbox::new()
        .tool(
            tool::from_fn("add", |Add { a, b }| async move {
                a.checked_add(b)
                    .ok_or_else(|| ToolError::invalid_arguments("the sum overflows an i64"))
            })
            .with_description("Adds two integers")
            .with_annotations(ToolAnnotations::new().read_only()),
        )
        .tool(
            tool::from_stream("count", |Count { to }| {
                let to = to.min(1000);
                stream::iter(1..=to).then(move |i| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let progress = Progress::new(i.into())
                        .total(to.into())
                        .message(format!("counted {i}"));
                    Ok::<_, ToolError>(if i == to {
                        ToolOutput::text(format!("counted to {to}"))
                    } else {
                        ToolOutput::progress(progress)
                    })
                })
            })
            .with_description("Counts slowly, reporting progress")
            .with_annotations(ToolAnnotations::new().read_only()),
        )
        .tool(
            tool::from_fn("shutdown_reactor", |Shutdown { reason }| async move {
                Ok::<_, ToolError>(format!("reactor shut down ({reason})"))
            })
            .with_description("Admins only")
            .with_annotations(ToolAnnotations::new().destructive(true)),
        )
        // Guests do not see the admin tool. Over stdio there is no token:
        // the local user who started the server sees everything.
        .resolver(|info: &toolstack::ToolInfo, ext: &http::Extensions| {
            ext.get::<Caller>() != Some(&Caller::Guest) || info.name() != "shutdown_reactor"
        })
}

/// The bearer tokens and who they stand for.
const TOKENS: Tokens<Caller> = &[
    ("admin-token", Caller::Admin),
    ("guest-token", Caller::Guest),
];

const USAGE: &str = "\
Usage: cargo run --features mcp --example mcp_server [-- --stdio]

A toolbox served over MCP: streamable HTTP on 127.0.0.1:8000/mcp (PORT to
change it) behind a bearer token (guest-token, admin-token), or stdio.
  --stdio      serve on stdin/stdout, for a host that spawns it
  -h, --help   this text
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if toolstack_demo::help(USAGE) {
        return Ok(());
    }
    let server = McpServer::new(toolbox()).with_server_info("toolstack-example", "0.1.0");
    if std::env::args().any(|a| a == "--stdio") {
        server.serve_stdio().await?;
        return Ok(());
    }
    let port = std::env::var("PORT").unwrap_or_else(|_| "8000".into());
    let addr = format!("127.0.0.1:{port}");
    let mcp = server.into_http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(
            TOKENS,
            require_bearer::<Caller>,
        ))
        .route("/health", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("MCP over streamable HTTP on http://{addr}/mcp (Bearer guest-token or admin-token)");
    axum::serve(listener, app).await?;
    Ok(())
}
