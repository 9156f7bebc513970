//! Caches the results of tools that are safe to cache.
//!
//! A tool annotated read-only or idempotent
//! ([`ToolAnnotations`](toolstack::ToolAnnotations)) answers the same
//! arguments with the same result for a while; [`Cache`] keeps that
//! result and replays it:
//!
//! * **The key** is the tool's name, its arguments in their canonical form
//!   ([`toolstack::arguments::canonical`]: object keys sorted, no
//!   whitespace, numbers as JavaScript writes them — `{"b":1, "a":2.0}` and
//!   `{ "a": 2, "b": 1 }` are one key), and, when
//!   [`caller_key`](CacheLayer::caller_key) says so, the caller (from the
//!   request's extensions) — so one user's result never reaches another.
//!   Arguments that are not JSON, or whose key is longer than 4 KiB, are
//!   not cached.
//! * **Only complete, successful results are kept**: a stream that ends
//!   in an error, or is dropped before its end, or is larger than
//!   [`max_entry_bytes`](CacheLayer::max_entry_bytes), is not.
//! * **Single flight**: concurrent calls with one key run the tool once;
//!   the others wait for its result and replay it (if it fails, each runs
//!   the tool itself).
//! * **A hit is marked**: its stream begins with a progress item "cached
//!   result, N s old" (a UI shows it; the model does not read progress),
//!   the call's span records `toolstack.cache = "hit"`, and a `tracing`
//!   event says so.
//! * A tool not annotated as safe to cache is never cached, unless
//!   [`cache_all`](CacheLayer::cache_all) says so. The annotations come
//!   with the request, which a [`Toolbox`](toolstack::Toolbox) fills: put
//!   the layer in one ([`Toolbox::layered`](toolstack::Toolbox::layered),
//!   [`Toolbox::layer`](toolstack::Toolbox::layer)).
//!
//! The store is pluggable ([`CacheStore`]): [`MemoryCacheStore`] (moka,
//! bounded in bytes, with a time to live) in process, and, with the
//! `redis` feature, `RedisCacheStore`, shared by every process that uses
//! the same Redis and key prefix (entries expire in Redis; a Redis that
//! does not answer is a miss, never an error).
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use toolstack::{tool, ToolAnnotations, ToolError, ToolRequest, ToolResult, Toolbox};
//! use toolstack_layers::cache::CacheLayer;
//! use tower::ServiceExt;
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct City { name: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let runs = Arc::new(AtomicUsize::new(0));
//! let counter = runs.clone();
//! let weather = tool::from_fn("weather", move |c: City| {
//!     counter.fetch_add(1, Ordering::SeqCst);
//!     async move { Ok::<_, ToolError>(format!("sunny in {}", c.name)) }
//! })
//! .with_annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() });
//! // In a toolbox, which gives the layer the tool's annotations.
//! let tools = Toolbox::new().layered(weather, CacheLayer::in_memory(16 << 20, Duration::from_secs(60)));
//! for args in [r#"{"name": "Oslo"}"#, r#"{ "name":"Oslo" }"#] {
//!     let stream = tools.clone().oneshot(ToolRequest::new("weather", args)).await?;
//!     assert_eq!(ToolResult::collect(stream).await.into_text(), "sunny in Oslo");
//! }
//! assert_eq!(runs.load(Ordering::SeqCst), 1);
//! # Ok(()) }
//! ```

mod flight;
mod future;
mod layer;
mod memory;
mod service;
mod store;

pub use self::future::ResponseFuture;
pub use self::layer::CacheLayer;
pub use self::memory::MemoryCacheStore;
pub use self::service::Cache;
pub use self::store::{CacheStore, Cached, MAX_KEY_BYTES};
#[cfg(feature = "redis")]
mod encoding;
#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisCacheStore;

/// Renamed to [`MemoryCacheStore`]: the agent's run store and the
/// budget's output store have a `MemoryStore` too.
#[deprecated(note = "renamed to `MemoryCacheStore`")]
pub type MemoryStore = MemoryCacheStore;

/// Renamed to [`RedisCacheStore`]: the agent's run store and the budget's
/// output store have a `RedisStore` too.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[deprecated(note = "renamed to `RedisCacheStore`")]
pub type RedisStore = RedisCacheStore;
