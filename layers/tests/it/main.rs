//! The integration tests of this crate, as one binary: one link, and the
//! generic code they share compiled once. A test that needs a process of
//! its own (a panic hook, a global subscriber, environment variables)
//! stays a file of its own beside this folder.

#[cfg(feature = "redis")]
#[path = "../support/redis.rs"]
mod redis_server;
#[path = "../support/mod.rs"]
mod support;

mod approval;
mod budget;
mod budget_keep;
mod cache;
mod catch_panic;
mod coalesce;
mod concurrency;
mod fuse_after_error;
mod fuzz_regressions;
mod guardrail;
mod interop;
mod model_layers;
mod polled_after_completion;
mod rate_limit;
#[cfg(feature = "redis")]
mod redis_budget_keep;
#[cfg(all(feature = "redis", feature = "cache"))]
mod redis_cache;
#[cfg(all(feature = "redis", feature = "rate-limit"))]
mod redis_rate_limit;
#[cfg(feature = "redis")]
mod redis_spend;
mod repair;
mod retry;
mod saturated_truth;
mod saturation;
mod spend;
mod spend_agent;
mod spend_max_tokens;
mod spend_stream;
mod timeout;
mod trace;
#[cfg(feature = "opentelemetry")]
mod trace_across_mcp;
mod validate;
