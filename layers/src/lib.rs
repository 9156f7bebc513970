//! # toolstack-layers
//!
//! Stream-aware tower middleware for [`toolstack`] tools and models.
//!
//! A tool's response is a stream, and its work goes on after the response
//! future resolves; the layers here watch the stream, not only the future:
//! a timeout can fire between items, a retry never duplicates an emitted
//! item, a concurrency permit lives as long as the stream.
//!
//! Every layer is an ordinary [`tower_layer::Layer`]: it stacks in a
//! `tower::ServiceBuilder` (also through [`ServiceBuilderExt`], whose
//! methods are all `stream_*`), is `Clone` when the inner service is, and
//! answers with [`ToolError`](toolstack::ToolError).
//!
//! | layer | what it does to a call |
//! |---|---|
//! | [`trace`] | one span per call with the GenAI attributes, for the stream's whole life |
//! | [`timeout`] | deadline, first-item and idle bounds; one typed error, then the end |
//! | [`retry`] | tries again only before the first item; backoff, budget, idempotency |
//! | [`rate_limit`] (feature `rate-limit`) | shared, keyed quotas; wait or reject; one quota across processes in Redis (feature `redis`) |
//! | [`spend`] | model calls: token and cost limits per run, per caller, per UTC window, at a price table; refused before the model is called; in memory or in Redis (feature `redis`) |
//! | [`concurrency`] | a permit held as long as the stream |
//! | [`catch_panic`] | a panic anywhere becomes a `Panicked` error |
//! | [`validate`] (feature `validate`) | arguments checked against the tool's schema first |
//! | [`approval`] | asks an approver before a call runs: allow, deny with a reason the model reads, or other arguments |
//! | [`cache`] (feature `cache`) | results of read-only or idempotent tools kept and replayed; one run per key at a time; in memory or in Redis (feature `redis`) |
//! | [`budget`] | caps what reaches the model (items, bytes, ≈ tokens): head and tail kept, the cut said in words; the whole output kept for a `read_tool_result` tool (in memory, SQLite with feature `sqlite`, Redis) |
//! | [`coalesce`] | merges runs of small text items, at most one per window |
//! | [`repair`] | almost-JSON arguments repaired before they are refused (a tool name's case or alias is the toolbox's to repair: [`Toolbox::repair_names`](toolstack::Toolbox::repair_names)) |
//!
//! To send the spans to an OpenTelemetry collector, see `otel` (feature
//! `otel`): `otel::init_from_env()` at start, configured by the standard
//! `OTEL_*` variables.
//!
//! ## Tools and models
//!
//! A model is a service too — `Service<ChatRequest>` answering with a
//! stream of `Result<ModelDelta, ToolError>` (see [`toolstack::model`]) —
//! and the trace, timeout, retry, rate-limit, concurrency-limit and
//! catch-panic layers apply to it as they do to tools: the deltas are the
//! items. What a layer needs of a request or an item comes through the
//! [`Request`] and [`Output`] traits (a [`CallKind`] says which of the two a
//! call is), implemented for
//! [`ToolRequest`](toolstack::ToolRequest) /
//! [`ToolOutput`](toolstack::ToolOutput) and for
//! [`ChatRequest`](toolstack::model::ChatRequest) /
//! [`ModelDelta`](toolstack::model::ModelDelta). Validation is for tools
//! only.
//!
//! ```
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use toolstack::agent::{Agent, AgentEvent};
//! use toolstack::model::{Message, ScriptedModel, Turn};
//! use toolstack::Toolbox;
//! use toolstack_layers::retry::RetryPolicy;
//! use toolstack_layers::timeout::TimeoutLayer;
//! use toolstack_layers::ServiceBuilderExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let model = tower::ServiceBuilder::new()
//!     .stream_trace()                        // span `chat {model}`, gen_ai.operation.name = chat
//!     .stream_retry(RetryPolicy::default())  // only before the first delta
//!     .stream_timeout(TimeoutLayer::new()
//!         .first_item(Duration::from_secs(30))
//!         .idle(Duration::from_secs(10)))  // between deltas
//!     .stream_concurrency_limit(4)           // permit held while the answer streams
//!     .service(ScriptedModel::new([Turn::new().text("Hello!")]));
//! let agent = Agent::new(model, Toolbox::new()).model_name("scripted");
//! let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
//! assert!(matches!(events.last(), Some(AgentEvent::Done(_))));
//! # }
//! ```
//!
//! ## The tool's description
//!
//! Layers that need to know the tool — [`retry`] asks whether it is
//! idempotent, [`validate`] checks the arguments against its schema — read
//! its description from the request ([`ToolRequest::info`]), which the
//! [`Toolbox`](toolstack::Toolbox) (through its [`BoxTool`](toolstack::BoxTool)s)
//! sets at dispatch. So any tower layer, ours or tower's own, can sit
//! anywhere in a tool's stack, and no layer has to forward a description:
//! put layered tools in a toolbox with
//! [`Toolbox::layered`](toolstack::Toolbox::layered) (one tool) or
//! [`Toolbox::layer`](toolstack::Toolbox::layer) (every tool).
//!
//! [`ToolRequest::info`]: toolstack::ToolRequest::info

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod approval;
pub mod budget;
mod builder;
#[cfg(feature = "cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
pub mod cache;
mod call_context;
pub mod catch_panic;
pub mod coalesce;
pub mod concurrency;
pub mod guardrail;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
#[cfg(feature = "rate-limit")]
#[cfg_attr(docsrs, doc(cfg(feature = "rate-limit")))]
pub mod rate_limit;
// What the Redis stores (the cache's, the rate limit's, the spend
// limit's, the budget's) share.
#[cfg(feature = "redis")]
mod redis;
pub mod repair;
mod request;
pub mod retry;
mod shared_store;
pub mod spend;
mod text;
pub mod timeout;
pub mod trace;
#[cfg(feature = "validate")]
#[cfg_attr(docsrs, doc(cfg(feature = "validate")))]
pub mod validate;

pub use builder::ServiceBuilderExt;
pub use request::{CallKind, Output, Request};
