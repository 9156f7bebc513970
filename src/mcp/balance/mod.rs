//! One remote toolbox over N replicas of an MCP tool server: calls spread
//! with tower's own balancer (power of two choices over peak-EWMA load),
//! failed replicas ejected and probed back in.
//!
//! [`Replicas::builder()`](Replicas::builder)`.`[`connect`](ReplicasBuilder::connect) connects to each URL (streamable HTTP; stateless
//! 2026-07-28 requests by default, so any replica can take any call),
//! checks that every replica serves the same tools — names, descriptions,
//! schemas, annotations; a mismatch is an error naming the replica and the
//! tool, never a silent merge — and answers with a [`Toolbox`](crate::Toolbox) that lists
//! the tools once, and a [`Replicas`] handle to add and remove replicas at
//! run time.
//!
//! * **Balancing** is [`tower::balance::p2c::Balance`] over a
//!   [`Discover`](tower::discover::Discover) stream of the replicas, each
//!   weighed by [`PeakEwma`](tower::load::PeakEwma). The load of a call
//!   counts until its **stream ends** (not when its first response
//!   arrives), so a replica busy streaming long results weighs as busy.
//! * **Ejection** (in the spirit of Envoy's outlier detection): a call that
//!   cannot reach its replica, or whose connection breaks, ejects the
//!   replica at once; the balancer drops it. It is probed back in —
//!   connected again, its tools listed and compared — after a back-off
//!   that doubles from [`backoff`](ReplicasBuilder::backoff)'s first delay
//!   up to its ceiling (1 s to 30 s).
//! * **What a failure says**, so the existing retry layer
//!   (`toolstack-layers`' `stream_retry`, inside the toolbox) does the
//!   right thing: a call that never reached a replica (connection refused:
//!   the request was not sent) fails as
//!   [`Overloaded`](crate::ErrorKind::Overloaded) — "the tool never
//!   started", which retry repeats for any tool, on another replica. A call
//!   whose connection broke after it was sent may have run: it fails as a
//!   retryable [`Unavailable`](crate::ErrorKind::Unavailable), which retry
//!   repeats only for tools annotated idempotent or read-only. With no
//!   replica ready within [`ready_timeout`](ReplicasBuilder::ready_timeout)
//!   (5 s), a call fails as `Overloaded` without being sent.
//!
//! ```no_run
//! use toolstack::mcp::balance::Replicas;
//!
//! # async fn demo() -> Result<(), toolstack::ToolError> {
//! let (tools, replicas) = Replicas::builder()
//!     .connect(["http://10.0.0.1:8000/mcp", "http://10.0.0.2:8000/mcp"])
//!     .await?;
//! replicas.add("http://10.0.0.3:8000/mcp").await?; // at run time
//! let toolbox = toolstack::Toolbox::new().merge(tools);
//! # let _ = toolbox; Ok(()) }
//! ```
//!
//! * `builder`: [`ReplicasBuilder`], and the connection of the first
//!   replicas;
//! * `replicas`: [`Replicas`], the handle that adds and removes replicas;
//! * `set`: the replica set behind it — each replica connected and its
//!   tools compared, called, ejected when its connection fails, probed
//!   back in;
//! * `balanced`: the balancer over the set, as the toolbox's tools.

mod balanced;
mod builder;
mod replicas;
mod set;

pub use builder::{ReplicasBuilder, DEFAULT_BACKOFF, DEFAULT_READY_TIMEOUT};
pub use replicas::Replicas;
pub use set::ReplicaState;
