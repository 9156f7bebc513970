//! # toolstack
//!
//! Every AI-agent tool is a [`tower::Service`](tower_service::Service)
//! whose response is a **stream** of [`ToolOutput`] items.
//!
//! * [`ToolRequest`] — call id, tool name, the raw JSON arguments as the
//!   model sent them, and `http::Extensions` for per-call data.
//! * [`ToolOutput`] — text, structured JSON, image/audio/resource content,
//!   progress; [`ToolError`] — a kind, a message, a model-facing JSON form;
//!   [`ToolResult`] — a finished stream, collected.
//! * [`tool`] — tools from typed async functions and from functions that
//!   return streams; the input JSON Schema comes from the argument type.
//! * [`Toolbox`] — tools by name, itself a tool; per-caller visibility.
//! * `http` (feature `http`) — a toolbox as an axum router (list the tools,
//!   call one with its output streamed as server-sent events), and an
//!   agent as the Vercel AI SDK's chat endpoint (`http::ai_sdk`).
//! * `mcp` (feature `mcp`) — the Model Context Protocol (rmcp): a toolbox
//!   as an MCP server, remote MCP tools as local tool services, a toolbox
//!   balanced over replicas.
//!
//! Because a tool is a tower service, tower's `ServiceBuilder` and layers
//! apply to it; the stream-aware layers (timeout between items, retry that
//! never duplicates an item, …) live in the `toolstack-layers` crate.
//!
//! ```
//! use futures_util::StreamExt;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use tower::ServiceExt;
//! use toolstack::{tool, Progress, ToolContext, ToolError, ToolOutput, ToolRequest, Toolbox};
//!
//! /// Count up to a number.
//! #[derive(Deserialize, JsonSchema)]
//! struct Count {
//!     /// Where to stop.
//!     to: u32,
//! }
//!
//! let count = tool::from_stream_with_context("count", |Count { to }, ctx: ToolContext| {
//!     futures_util::stream::iter(1..=to).map(move |n| {
//!         ctx.report(Progress::new(n as f64).total(to as f64));
//!         Ok::<_, ToolError>(n)
//!     })
//! });
//! let toolbox = Toolbox::new().tool(count);
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let stream = toolbox.oneshot(ToolRequest::new("count", r#"{"to":2}"#)).await.unwrap();
//! let items: Vec<ToolOutput> = stream.map(Result::unwrap).collect().await;
//! assert_eq!(items.len(), 4); // progress, 1, progress, 2
//! assert!(items[0].is_progress());
//! assert_eq!(items[1].as_json().map(toolstack::Json::value), Some(serde_json::json!(1)));
//! # }).unwrap();
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod agent;
pub mod approval;
pub mod arguments;
pub mod boxed;
pub mod embed;
pub mod error;
pub mod guardrail;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod id;
pub mod info;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
pub mod model;
pub mod output;
pub mod request;
pub mod result;
pub mod tool;
pub mod toolbox;
pub mod trace_context;

pub use boxed::{BoxTool, ToolItem, ToolStream};
pub use error::{BoxError, ErrorKind, TimeoutPhase, ToolError};
pub use info::{schema_for, strict_schema, Describe, ToolAnnotations, ToolInfo};
pub use output::{Json, Media, Progress, Resource, ToolOutput};
pub use request::ToolRequest;
pub use result::ToolResult;
pub use tool::{FnTool, ToolContext};
pub use toolbox::Toolbox;
pub use trace_context::{McpAttributes, TraceContext};

pub use schemars;

/// The README's and the guides' Rust blocks, compiled and run as doctests
/// (`cargo test --doc`), so that what a newcomer copies keeps compiling.
/// A block marked `ignore` needs a server or a key.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/tools.md")]
    struct Tools;
    #[doc = include_str!("../docs/layers.md")]
    struct Layers;
    #[doc = include_str!("../docs/agent.md")]
    struct Agent;
    #[doc = include_str!("../docs/http.md")]
    struct Http;
    #[doc = include_str!("../docs/mcp.md")]
    struct Mcp;
    #[doc = include_str!("../docs/durable-runs.md")]
    struct DurableRuns;
    #[doc = include_str!("../docs/scale-out.md")]
    struct ScaleOut;
    #[doc = include_str!("../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../docs/features.md")]
    struct Features;
}
