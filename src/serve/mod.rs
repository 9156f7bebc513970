//! Serving tools to other programs, and using theirs: MCP (feature `mcp`)
//! and HTTP (feature `http`).

#[cfg(feature = "mcp")]
pub mod mcp;
