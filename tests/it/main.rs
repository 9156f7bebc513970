//! The integration tests of this crate, as one binary: one link, and the
//! generic code they share compiled once. A test that needs a process of
//! its own (a panic hook, a global subscriber, environment variables)
//! stays a file of its own beside this folder.

// What several of the tests share, each declared once.
#[cfg(any(feature = "openai", feature = "anthropic"))]
#[path = "../support/http_request.rs"]
mod http_request;
#[path = "../support/process.rs"]
mod process;
#[path = "../support/proof.rs"]
mod proof;
#[cfg(feature = "redis")]
#[path = "../../layers/tests/support/redis.rs"]
mod redis_server;

mod accumulate;
mod agent;
mod agent_compaction;
mod agent_output;
mod agent_resume;
mod agent_session;
mod agent_spend_cut;
#[cfg(feature = "http")]
mod ai_sdk;
#[cfg(feature = "http")]
mod ai_sdk_client;
#[cfg(feature = "http")]
mod ai_sdk_spend_cut;
#[cfg(feature = "http")]
mod ai_sdk_store_down;
mod anthropic;
mod assistant_example;
#[cfg(feature = "http")]
mod assistant_web;
mod bad_input;
#[cfg(all(feature = "http", feature = "mcp"))]
mod bad_input_catalogue;
mod bad_input_model_deltas;
#[cfg(feature = "mcp")]
mod balance;
mod boxed_spares;
#[cfg(feature = "http")]
mod chunk_log;
mod compaction;
#[cfg(all(feature = "http", feature = "redis", feature = "sqlite"))]
mod durable_runs;
#[cfg(feature = "openai")]
mod embed_http;
#[cfg(feature = "local-embeddings")]
mod embed_local;
mod fuzz_regressions;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(feature = "mcp")]
mod mcp_input_tasks;
#[cfg(feature = "mcp")]
mod mcp_interop;
#[cfg(feature = "mcp")]
mod mcp_legacy_tasks;
mod model;
mod openai;
#[cfg(feature = "openai-tls")]
mod openai_tls;
mod record_replay;
#[cfg(feature = "restate")]
mod restate_approvals;
#[cfg(all(feature = "restate", feature = "http"))]
mod restate_chat;
#[cfg(feature = "restate")]
mod restate_events;
#[cfg(feature = "restate")]
mod restate_runs;
#[cfg(feature = "restate")]
mod restate_runs_proof;
mod restate_server;
#[cfg(feature = "restate")]
mod run_events;
mod run_store;
mod schema;
mod seed_tools;
mod shared_quota;
mod spend_limits_proof;
#[cfg(feature = "sqlite")]
mod sqlite_faults;
mod store_outage;
mod tool_search;
mod tool_search_meaning;
mod toolbox;
#[cfg(feature = "mcp")]
mod toolbox_mcp;
mod tools;
mod tower_layers;
mod zero_copy;
