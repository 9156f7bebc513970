use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use governor::Quota;
use tower_layer::Layer;

use super::limiter::{Global, Limiter, PerCaller, PerTool};
use super::mode::Mode;
use super::shared::SharedStore;
use super::RateLimit;

/// Applies a shared, keyed rate limit to tool or model calls; see the
/// [module docs](super).
///
/// The quota's state is created with the layer: every [`RateLimit`] this
/// layer produces, every clone of those services and every clone of the
/// layer draws from the same buckets. For independent quotas, build
/// independent layers.
///
/// Calls over the limit wait by default; [`reject`](Self::reject) makes
/// them fail fast instead.
///
/// With the `redis` feature, `redis` moves the buckets into Redis, where
/// every process that uses the same Redis and key prefix shares them.
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<dyn Limiter>,
    // Where the buckets live when processes share them; `limiter` is then
    // the fallback of a store that fails open.
    store: Option<Arc<dyn SharedStore>>,
    quota: Quota,
    mode: Mode,
}

impl RateLimitLayer {
    fn with(limiter: impl Limiter + 'static, quota: Quota) -> Self {
        RateLimitLayer {
            limiter: Arc::new(limiter),
            store: None,
            quota,
            mode: Mode::Wait { max: None },
        }
    }

    /// One quota for all calls, whatever the tool (or model) or caller.
    pub fn global(quota: Quota) -> Self {
        Self::with(Global::new(quota), quota)
    }

    /// One quota per tool name (the name in the request), so that a busy
    /// tool does not use up the quota of the others when the layer wraps a
    /// whole [`Toolbox`](toolstack::Toolbox). Over a model, one quota per
    /// model named in the request ([`Request::name`](crate::Request::name);
    /// requests that name none share one).
    ///
    /// Over a toolbox, names the model made up get buckets too (the call
    /// then fails as not found); see [`retain_recent`](Self::retain_recent).
    pub fn per_tool(quota: Quota) -> Self {
        Self::with(PerTool::new(quota), quota)
    }

    /// One quota per caller, the caller being the value of type `K` in the
    /// request's extensions (say, a user id put there by an auth layer).
    ///
    /// Requests without a `K` all share one more bucket, the "anonymous"
    /// one, with the same quota.
    pub fn per_caller<K>(quota: Quota) -> Self
    where
        K: Clone + Hash + Eq + Send + Sync + 'static,
    {
        Self::with(PerCaller::<K>::new(quota), quota)
    }

    /// Calls over the limit wait until their bucket allows them (the
    /// default).
    ///
    /// Waiting calls are not queued: each one checks its bucket again when
    /// its wait is over, and the first to check goes first. A call dropped
    /// while it waits has taken nothing from the quota.
    pub fn wait(mut self) -> Self {
        self.mode = Mode::Wait { max: None };
        self
    }

    /// Calls over the limit wait, but at most `max`: a call whose bucket
    /// would make it wait longer fails at once with
    /// [`ErrorKind::RateLimited`](toolstack::ErrorKind::RateLimited)
    /// and its `retry_after` — *"would wait 2000 ms for the quota of tool
    /// `search`, more than the 500 ms a call may wait; the tool never
    /// started"* — so the caller (a retry above, the model) decides, and a
    /// call never sits silent behind a long quota. Retry counts it as
    /// refused before the tool ran.
    pub fn wait_at_most(mut self, max: Duration) -> Self {
        self.mode = Mode::Wait { max: Some(max) };
        self
    }

    /// Calls over the limit fail at once with
    /// [`ErrorKind::RateLimited`](toolstack::ErrorKind::RateLimited), whose
    /// `retry_after` says when the bucket will allow a call again.
    ///
    /// The mode belongs to this layer value; a clone set to the other mode
    /// still shares the quota.
    pub fn reject(mut self) -> Self {
        self.mode = Mode::Reject;
        self
    }

    /// Keeps the buckets in Redis, shared by every process (and every
    /// layer) that uses the same Redis and key prefix: the quota is then
    /// one for all of them, taken atomically on the Redis server's clock.
    /// The keys ([`global`](Self::global), [`per_tool`](Self::per_tool),
    /// [`per_caller`](Self::per_caller)), the quota and the mode stay this
    /// layer's; see [`RedisLimiter`](super::RedisLimiter) for the key
    /// names, the timeouts and what happens when Redis does not answer.
    ///
    /// Every call then takes a round trip to Redis before it starts.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(mut self, redis: super::RedisLimiter) -> Self {
        self.store = Some(Arc::new(redis.into_store(self.quota)));
        self
    }

    /// The quota of each bucket.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Forgets the buckets of tools or callers that have been idle long
    /// enough to be full again, which is the same as never having been seen.
    ///
    /// Buckets are otherwise kept for as long as the layer lives, one small
    /// entry per distinct tool name or caller; when names or callers come
    /// from an open set, call this now and then (say, from a timer). It does
    /// nothing for a [`global`](Self::global) limit. Buckets kept in Redis
    /// (feature `redis`) need none of this: their keys expire once the
    /// buckets are full again.
    pub fn retain_recent(&self) {
        self.limiter.retain_recent();
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::from_parts(
            inner,
            Arc::clone(&self.limiter),
            self.store.clone(),
            self.mode,
        )
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("store", &self.store)
            .field("mode", &self.mode)
            .finish()
    }
}
