//! # toolstack-demo
//!
//! The demo code that toolstack's examples show and its tests exercise,
//! kept in one crate so that both use it as a dependency (a test pins
//! exactly what an example runs):
//!
//! | module | what | shown by | pinned by |
//! |---|---|---|---|
//! | [`add`] | the `add` tool's arguments and function, and the hand-written call | — | the benches of both crates |
//! | `assistant` (feature `assistant`) | the assistant's SQLite database and tools, its script (paced for the web page), the terminal's approver and printer | `examples/assistant.rs` | `tests/it/assistant_web.rs` |
//! | [`catalogue`] | 325 tools as merged MCP servers list them, and 205 queries a user would ask | — | `tests/it/tool_search.rs`, the `tool_search` bench group |
//! | [`tools`] | the seed's demo tools: weather, calculator, clock, a file's lines, a counter | `examples/tour.rs` | `tests/it/seed_tools.rs` |
//! | `http` (feature `http`) | a toolbox over HTTP behind bearer auth, with per-caller visibility | `examples/http_server.rs` | `tests/it/http.rs` |
//! | [`redis_server`] | a `redis-server` of a proof's own (started, killed, restarted — empty, or from its append-only file) | `examples/proofs/shared_quota.rs`, `examples/proofs/durable_runs/` | `tests/it/shared_quota.rs`, `tests/it/durable_runs.rs` |
//! | [`restate_server`] | a `restate-server` of a test's own (free ports, a data directory; started, killed, restarted on it; deployments registered) | — | `tests/it/restate_server.rs` |
//!
//! Not published; nothing here is toolstack's API.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod add;
#[cfg(feature = "assistant")]
pub mod assistant;
#[cfg(feature = "auth")]
pub mod auth;
pub mod catalogue;
#[cfg(feature = "http")]
pub mod http;
pub mod redis_server;
pub mod restate_server;
pub mod tools;

/// `--help` (or `-h`) among the process's arguments: prints `usage` and
/// says so, for an example to return without running anything.
pub fn help(usage: &str) -> bool {
    let asked = std::env::args().any(|a| a == "--help" || a == "-h");
    if asked {
        print!("{usage}");
    }
    asked
}
