//! MCP (the Model Context Protocol) with the official `rmcp` SDK: serve a
//! [`Toolbox`](crate::Toolbox) to MCP clients, and use a remote server's
//! tools as local tool services.
//!
//! **Serving.** [`McpServer`] answers `tools/list` with the toolbox's
//! [`ToolInfo`](crate::ToolInfo)s (input and output schema, annotations),
//! filtered by the toolbox's resolver for the caller, and runs `tools/call`
//! through the tool's stream:
//!
//! | tool stream | MCP |
//! |---|---|
//! | text, image, audio, resource items | content blocks, in order |
//! | a JSON item | `structuredContent` (and a text copy in `content`); rmcp drops a non-object value for protocol revisions that require an object |
//! | progress items | `notifications/progress`, when the request has a progress token |
//! | a [`ToolError`](crate::ToolError) | a result with `isError: true` and the model-facing error JSON |
//! | an unknown or hidden tool | a protocol error (`-32602`), as the spec says, with `data: {"kind": "not_found"}` |
//! | `arguments` over 1 MiB as JSON ([`McpServer::max_argument_bytes`]) | an `invalid_arguments` error result; the tool is not called |
//! | `notifications/cancelled` | the stream is dropped, which cancels the tool; the request gets no response, as the spec says |
//!
//! Tools that want to log to the client find a [`ClientLog`] in their
//! request's extensions, and tools that ask the client back (sampling,
//! elicitation) find the session's `rmcp::Peer<RoleServer>` there. Transports: stdio ([`McpServer::serve_stdio`]) and
//! streamable HTTP ([`McpServer::into_http_service`], a tower service to
//! mount in an axum app); the HTTP request's extensions reach the resolver.
//!
//! **Using remote tools.** [`McpClient`] connects to a server (a child
//! process over stdio, streamable HTTP, or any rmcp transport) and turns
//! each remote tool into an [`McpTool`]: a `Service<ToolRequest>` whose
//! stream carries the server's progress notifications as progress items,
//! then the result; dropping the stream sends `notifications/cancelled`.
//!
//! **Telemetry.** The server makes a span (kind server) for every request
//! it answers — `tools/call {tool}`, `prompts/get {prompt}`,
//! `resources/read`, `initialize`… — and the client one (kind client) for
//! the handshake, `tools/list` and each `tools/call`, with the attributes
//! of the OpenTelemetry MCP conventions, the client's context sent in
//! `_meta` and continued by the server's span; with the `opentelemetry`
//! feature they
//! record `mcp.client.operation.duration` / `mcp.server.operation.duration`
//! (buckets [`OPERATION_DURATION_BUCKETS`]) on the global meter provider.
//! See `docs/observability.md`.
//!
//! ```
//! use toolstack::mcp::{McpClient, McpServer};
//! use toolstack::{tool, ToolError, Toolbox};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! #[derive(serde::Serialize)]
//! struct Sum { sum: i64 }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let toolbox = Toolbox::new()
//!     .tool(tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(Sum { sum: a + b }) }));
//!
//! // An in-memory connection; stdio and streamable HTTP work the same way.
//! let (server_io, client_io) = tokio::io::duplex(4096);
//! tokio::spawn(async move {
//!     use rmcp::ServiceExt;
//!     let running = McpServer::new(toolbox).serve(server_io).await?;
//!     running.waiting().await?;
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! });
//!
//! let remote = McpClient::connect(client_io).await?.toolbox().await?;
//! let result = toolstack::ToolResult::collect(
//!     tower::ServiceExt::oneshot(remote, toolstack::ToolRequest::new("add", r#"{"a":2,"b":3}"#)).await?,
//! ).await;
//! assert_eq!(result.structured_content(), Some(serde_json::json!({"sum": 5})), "{result:?}");
//! # Ok::<_, ToolError>(()) }).unwrap();
//! ```

pub mod balance;
mod call;
mod client;
pub mod convert;
mod input;
mod log;
mod server;
mod telemetry;

pub use call::TaskSupport;

/// The `_meta` key that ties a message to its task (MCP 2025-11-25).
pub(crate) const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";
pub use client::{
    McpClient, McpClientBuilder, McpTool, DEFAULT_MAX_INPUT_ROUNDS, MAX_INPUT_REQUESTS,
};
pub use input::ClientInput;
pub use log::ClientLog;
pub use rmcp;
pub use server::{McpHttpResponse, McpHttpService, McpServer, ToolsOnly};
pub use telemetry::OPERATION_DURATION_BUCKETS;
