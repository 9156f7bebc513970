//! [`McpClient`] and [`McpTool`]: a remote MCP server's tools as local
//! tool services.

#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

mod builder;
mod child;
mod connection;
mod error;
mod handler;
mod list;
mod progress;
mod tap;
mod tool;

pub use builder::{McpClientBuilder, DEFAULT_MAX_INPUT_ROUNDS};
pub use connection::{McpClient, MAX_INPUT_REQUESTS};
pub use tool::McpTool;
