//! Retries that never duplicate an emitted item.
//!
//! [`Retry`] tries a call again when it fails to open, or when its stream
//! fails **before its first item**. Once an item (progress included) has
//! reached the consumer, a later error passes through untouched: retrying
//! then would emit that item twice.
//!
//! What is retried is set by a [`RetryPolicy`]: at most `max_attempts`
//! attempts, only retryable errors by default, exponential backoff with
//! jitter, a rate limit's retry-after honoured, and an optional shared
//! [`RetryBudget`] (such as tower's [`TpsBudget`]) that keeps retries a
//! bounded fraction of the calls — tower's `Budget` trait, named for what
//! it budgets here, since [`budget`](crate::budget) is the output budget.
//! A tool whose annotations do not say it is idempotent is not retried once the call reached it — only when the error shows the call
//! was refused before the tool ran (rate limited, overloaded, or the inner
//! service failing `poll_ready`) — unless the policy allows it.
//!
//! Over a model (`Service<ChatRequest>`) the same holds for its deltas: a
//! call that fails to open, or whose stream fails before the first delta,
//! is tried again; once a delta has reached the agent, an error passes
//! through. A model call is idempotent ([`Inferred`]), so it is retried
//! whenever the error is retryable: an unavailable endpoint, a rate limit
//! (after its retry-after), a timeout stacked below.
//!
//! The first attempt goes to the service made ready by `poll_ready`; each
//! retry goes to a clone, made ready again after the backoff.
//!
//! An attempt refused for capacity — a permit or a quota not granted
//! within its bounded wait — counts against `max_attempts`: the policy
//! bounds the attempts, whatever became of them, so a call without a
//! deadline cannot wait forever. A call that ends before the policy's last
//! attempt says why after its error, and one whose deadline passes is never
//! tried again (no attempt starts after it):
//!
//! | how the call ends | its error |
//! |---|---|
//! | every attempt made, the last one ran | the last error, then `; 3 attempts: 2 ran, 1 was refused for capacity` when some were refused |
//! | the backoff would pass the deadline | `…; not tried again: its backoff of 4ms would pass the deadline of 400ms` |
//! | the retry-after is longer than `max_retry_after` | `…; not tried again: its retry-after of 120s is longer than the 10s the retry policy waits` |
//! | the retry budget is spent | `…; not tried again: the retry budget is spent` |
//! | a later attempt refused by this stack's admission | the error of the attempt that ran (its kind), then `; it was tried again, and that attempt was refused: …` |
//! | a later attempt refused by the service itself (an endpoint's 429) | the same message, of the refusal's kind (`RateLimited`, with its retry-after) |
//! | refused every time | `refused for capacity 3 times; the tool never started (the last refusal: …)` |
//!
//! (`…` is the error the call ends with; the whole table is in
//! `docs/layers.md`.)
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use toolstack::{tool, ToolAnnotations, ToolError, ToolRequest, TimeoutPhase, Toolbox};
//! use toolstack_layers::retry::{RetryLayer, RetryPolicy};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Args {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! tokio::time::pause();
//! let calls = Arc::new(AtomicUsize::new(0));
//! let counter = calls.clone();
//! let flaky = tool::from_fn("flaky", move |_: Args| {
//!     let n = counter.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         if n == 0 {
//!             Err(ToolError::timeout(TimeoutPhase::FirstItem, "upstream was slow"))
//!         } else {
//!             Ok("fine")
//!         }
//!     }
//! })
//! .with_annotations(ToolAnnotations::new().read_only());
//!
//! // The toolbox hands the tool's description (read-only, so safe to repeat)
//! // to the retry in the request.
//! let tools = Toolbox::new().layered(
//!     flaky,
//!     ServiceBuilder::new().layer(RetryLayer::new(
//!         RetryPolicy::new().backoff(Duration::from_millis(10), Duration::from_secs(1)),
//!     )),
//! );
//! let stream = tools.oneshot(ToolRequest::new("flaky", "{}")).await.unwrap();
//! let items: Vec<_> = stream.collect().await;
//! assert!(items[0].is_ok());
//! assert_eq!(calls.load(Ordering::SeqCst), 2);
//! # }
//! ```
//!
//! # Differences from tower's `Retry`
//!
//! tower's `Retry` asks a `Policy` about the response future's result —
//! for a tool, whether it failed before its first item — and so retries
//! what this one retries, given a policy; but it has no backoff, deadline
//! or idempotency of its own. [`Retry`] also retries a stream that
//! fails before its first item, never one that has emitted an item, backs
//! off with jitter, honours a rate limit's retry-after, asks whether the
//! call is idempotent ([`Idempotency`]) before repeating a call that may
//! have reached the tool, and can share tower's [`TpsBudget`].

mod attempts;
mod future;
mod idempotency;
mod layer;
mod policy;
mod service;

pub use self::future::{ResponseFuture, ResponseStream};
pub use self::idempotency::{Idempotency, Inferred};
pub use self::layer::RetryLayer;
pub use self::policy::{RetryBudget, RetryPolicy, TpsBudget};
pub use self::service::Retry;
