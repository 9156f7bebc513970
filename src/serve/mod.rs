//! Serving a [`Toolbox`](crate::Toolbox) to clients outside the process,
//! and using other servers' tools, each transport behind its own feature.
//!
//! * `http` (feature `http`) — an axum router: list the tools, call one with
//!   its output streamed as server-sent events.
//! * `ai_sdk` (feature `http`) — an [`Agent`](crate::agent::Agent) in the
//!   Vercel AI SDK's UI message stream protocol, for `useChat` front ends.
//! * `mcp` (feature `mcp`) — the Model Context Protocol with rmcp: a toolbox
//!   as an MCP server (stdio, streamable HTTP), remote MCP tools as local
//!   tool services.

#[cfg(feature = "http")]
pub mod ai_sdk;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
