//! Rate limiting of tool and model calls, shared between clones and keyed
//! by tool (or model), by caller or global.
//!
//! ```
//! use std::num::NonZeroU32;
//!
//! use toolstack::{tool, ErrorKind, ToolError, ToolRequest};
//! use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let search = tool::from_fn("search", |_: serde_json::Value| async {
//!     Ok::<_, ToolError>("results")
//! });
//! // One call per minute per tool; over that, fail at once.
//! let limit = RateLimitLayer::per_tool(Quota::per_minute(NonZeroU32::MIN)).reject();
//! let search = ServiceBuilder::new().layer(limit).service(search);
//!
//! assert!(search.clone().oneshot(ToolRequest::new("search", "{}")).await.is_ok());
//! // The clone shares the quota, so the second call is refused.
//! let Err(err) = search.oneshot(ToolRequest::new("search", "{}")).await else {
//!     panic!("the second call should be rate limited");
//! };
//! assert!(matches!(err.kind(), ErrorKind::RateLimited { retry_after: Some(_) }));
//! # }
//! ```
//!
//! # Sharing
//!
//! The quota's state lives in the [`RateLimitLayer`], created with it:
//! every [`RateLimit`] service it produces, and every clone of those, draws
//! from the same buckets — unlike tower's `RateLimit`, whose clones each
//! count on their own. To give two tools separate quotas, build two layers
//! (or one [`per_tool`](RateLimitLayer::per_tool) layer).
//!
//! # Keys
//!
//! * [`global`](RateLimitLayer::global): one bucket for all calls.
//! * [`per_tool`](RateLimitLayer::per_tool): one bucket per tool name —
//!   over a model, per model named in the request
//!   ([`ChatRequest::model`](toolstack::model::ChatRequest::model)).
//! * [`per_caller::<K>`](RateLimitLayer::per_caller): one bucket per value
//!   of `K` in the request's extensions; requests without a `K` share one
//!   "anonymous" bucket.
//!
//! Each bucket has the full [`Quota`]: a burst size and a replenish rate
//! (the generic cell rate algorithm of the [`governor`] crate).
//!
//! # Over the limit
//!
//! By default a call over the limit [waits](RateLimitLayer::wait) until its
//! bucket allows it; with [`reject`](RateLimitLayer::reject) it fails at once
//! with [`ErrorKind::RateLimited`](toolstack::ErrorKind::RateLimited)
//! carrying the time until the bucket allows a call again. A call within the
//! limit goes straight to the inner service, and its response stream is
//! passed on untouched.
//!
//! Time is tokio's clock, so `tokio::time::pause` makes the limiter
//! deterministic in tests.
//!
//! # Shared by processes (feature `redis`)
//!
//! The buckets above live in the layer, in one process. With the `redis`
//! feature, `RateLimitLayer::redis(RedisLimiter::new(manager).prefix(…))`
//! keeps them in Redis instead, where every process using the same Redis
//! and prefix takes from the same quota — atomically, by a Lua script on
//! the server's clock (GCRA, as in process). Keys, quota and modes are the
//! layer's, unchanged; each call takes one round trip before it starts.
//! When Redis does not answer within its timeout, the call falls back to
//! this layer's own limiter (fail open) or fails as `Unavailable` (fail
//! closed), and a warning on its span says so. See `RedisLimiter`.
//!
//! # Models
//!
//! Over a model service (`Service<ChatRequest>`) the layer counts model
//! calls — say, to stay under a provider's requests per minute across every
//! agent run that shares the model: the extensions are the
//! [`ChatRequest`](toolstack::model::ChatRequest)'s, and a refusal message
//! names model calls ("rate limit for all model calls reached").
//!
//! # Differences from tower's `RateLimit`
//!
//! | | `tower::limit::RateLimit` | [`RateLimit`] |
//! |---|---|---|
//! | algorithm | a fixed window of `num` calls per `per` | GCRA (burst + replenish rate), from `governor` |
//! | clones | each counts on its own | share the layer's buckets |
//! | keys | one window per service | global, per tool (or model), or per caller |
//! | over the limit | `poll_ready` is pending (back-pressure on every caller) | the one call waits, or fails with `RateLimited { retry_after }`; other keys go on |
//! | across processes | no | with `redis`: one quota for every process on the same Redis and prefix |

mod clock;
mod future;
mod layer;
mod limiter;
mod mode;
#[cfg(feature = "redis")]
mod redis;
mod service;
mod shared;

pub use self::future::ResponseFuture;
pub use self::layer::RateLimitLayer;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisLimiter;
pub use self::service::RateLimit;

/// A rate limit: how many calls in a burst, and how fast that allowance
/// comes back (re-exported from [`governor`]).
pub use governor::Quota;
