//! [`RedisCacheStore`]: cached results in Redis, shared by processes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::RedisError;
use sha2::{Digest, Sha256};

use super::encoding::{decode, encode};
use super::{CacheStore, Cached};
use crate::redis::{Health, RedisSettings};
use crate::shared_store::push_hex;

/// A [`CacheStore`] in Redis: every process whose [`CacheLayer`] uses the
/// same Redis and key prefix replays the results any of them stored.
///
/// ```no_run
/// use std::time::Duration;
///
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use toolstack_layers::cache::{CacheLayer, RedisCacheStore};
///
/// # async fn run() -> redis::RedisResult<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let config = ConnectionManagerConfig::new()
///     .set_connection_timeout(Some(Duration::from_millis(250)))
///     .set_response_timeout(Some(Duration::from_millis(250)))
///     .set_number_of_retries(1);
/// let manager = ConnectionManager::new_with_config(client, config).await?;
/// // Results kept for ten minutes, shared by every process with this prefix.
/// let cache = CacheLayer::new(
///     RedisCacheStore::new(manager, Duration::from_secs(600)).prefix("myapp:cache"),
/// );
/// # let _ = cache;
/// # Ok(()) }
/// ```
///
/// * **Keys**: `{prefix}:{sha256}` — the SHA-256, in hex, of the cache
///   key (the tool, the caller when the layer keys by caller, and the
///   canonical arguments), so every key has the same short length and no
///   caller's arguments can name another's entry.
/// * **Values**: a small versioned binary (a version byte, the time it
///   was stored, then each item as a tag, a length and its bytes — text
///   and JSON as they are, nothing escaped), stored with
///   `SET key value PX ttl`: Redis drops an entry once its time to live is
///   over.
/// * **Bounded**: a result whose stored form is larger than
///   [`max_entry_bytes`](Self::max_entry_bytes) (2 MiB unless set) is not
///   stored, and at most that many bytes are read back (`GETRANGE`); a
///   value larger than that, of another version or malformed reads as a
///   miss, never as an error or a panic.
/// * **Never in the way**: a command that fails or gets no answer within
///   the [`timeout`](Self::timeout) (250 ms unless set) is a miss on a
///   lookup and nothing on a store; the call runs as if uncached, and a
///   `tracing` warning (`toolstack.cache.store = "redis"`) says why. After
///   Redis could not be reached, it is left alone for
///   [`recheck_after`](Self::recheck_after) (1 s unless set) — lookups are
///   misses at once — and then one lookup tries it again.
///
/// [`CacheLayer`]: super::CacheLayer
#[derive(Clone)]
pub struct RedisCacheStore {
    settings: RedisSettings,
    ttl: Duration,
    max_entry_bytes: usize,
    health: Arc<Health>,
}

impl RedisCacheStore {
    /// Results in the Redis that `manager` connects to, each kept for
    /// `ttl`, under the prefix `toolstack:cache`.
    pub fn new(manager: ConnectionManager, ttl: Duration) -> Self {
        RedisCacheStore {
            settings: RedisSettings::new(manager, "toolstack:cache"),
            ttl,
            max_entry_bytes: 2 << 20,
            health: Arc::new(Health::new()),
        }
    }

    /// The prefix of every key: layers, in any process, that use the same
    /// Redis and prefix share their results.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = Arc::from(prefix.into());
        self
    }

    /// The largest stored form of a result that is stored, or read back
    /// (default 2 MiB). The [`CacheLayer`](super::CacheLayer)'s own bound
    /// counts the items' bytes before this one is asked.
    pub fn max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes;
        self
    }

    /// How long a lookup or a store waits for Redis (default 250 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// How long Redis is left alone after it could not be reached
    /// (default 1 s).
    pub fn recheck_after(mut self, pause: Duration) -> Self {
        self.settings.recheck_after = pause;
        self
    }

    /// The Redis key of the cache key `key`.
    fn redis_key(&self, key: &str) -> String {
        let prefix = &self.settings.prefix;
        let mut out = String::with_capacity(prefix.len() + 65);
        out.push_str(prefix);
        out.push(':');
        push_hex(&mut out, &Sha256::digest(key.as_bytes()));
        out
    }
}

impl CacheStore for RedisCacheStore {
    fn get(&self, key: &str) -> BoxFuture<'static, Option<Cached>> {
        if !self.health.should_ask(self.settings.recheck_after) {
            tracing::debug!(
                toolstack.cache.store = "redis",
                "the cache's store was unreachable a moment ago; a miss"
            );
            return Box::pin(std::future::ready(None));
        }
        let key = self.redis_key(key);
        let mut manager = self.settings.manager.clone();
        let (timeout, pause) = (self.settings.timeout, self.settings.recheck_after);
        let max = self.max_entry_bytes;
        let health = Arc::clone(&self.health);
        Box::pin(async move {
            // Bytes 0 to `max` (inclusive): one more than may be read, so
            // that a larger value shows as larger, without reading it all.
            let end = i64::try_from(max).unwrap_or(i64::MAX);
            let mut range = redis::cmd("GETRANGE");
            range.arg(&key).arg(0).arg(end);
            let answer = tokio::time::timeout(timeout, range.query_async::<Vec<u8>>(&mut manager));
            let bytes = match answer.await {
                Ok(Ok(bytes)) => {
                    health.reachable();
                    bytes
                }
                Ok(Err(err)) => {
                    failed(&health, pause, &err, MISS);
                    return None;
                }
                Err(_) => {
                    timed_out(&health, pause, timeout, MISS);
                    return None;
                }
            };
            // A key that is not there reads as the empty string.
            if bytes.is_empty() {
                return None;
            }
            if bytes.len() > max {
                tracing::warn!(
                    toolstack.cache.store = "redis",
                    max_entry_bytes = max,
                    "a stored result is larger than the store reads; treated as a miss"
                );
                return None;
            }
            match decode(&bytes) {
                Ok(cached) => Some(cached),
                Err(why) => {
                    tracing::warn!(
                        toolstack.cache.store = "redis",
                        why = %why,
                        "a stored result could not be read; treated as a miss"
                    );
                    None
                }
            }
        })
    }

    fn put(&self, key: String, value: Cached) -> BoxFuture<'static, ()> {
        let Some(bytes) = encode(&value).filter(|bytes| bytes.len() <= self.max_entry_bytes) else {
            tracing::debug!(
                toolstack.cache.store = "redis",
                max_entry_bytes = self.max_entry_bytes,
                "result too large for the store; not stored"
            );
            return Box::pin(std::future::ready(()));
        };
        let (timeout, pause) = (self.settings.timeout, self.settings.recheck_after);
        if !self.health.should_ask(pause) {
            return Box::pin(std::future::ready(()));
        }
        let key = self.redis_key(&key);
        let mut manager = self.settings.manager.clone();
        let ttl = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let health = Arc::clone(&self.health);
        Box::pin(async move {
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(bytes).arg("PX").arg(ttl);
            match tokio::time::timeout(timeout, set.query_async::<()>(&mut manager)).await {
                Ok(Ok(())) => health.reachable(),
                Ok(Err(err)) => failed(&health, pause, &err, NOT_STORED),
                Err(_) => timed_out(&health, pause, timeout, NOT_STORED),
            }
        })
    }
}

const MISS: &str = "the cache's store failed; the call runs uncached";
const NOT_STORED: &str = "the cache's store failed; the result is not stored";

fn failed(health: &Health, pause: Duration, err: &RedisError, outcome: &'static str) {
    health.failed(err, pause);
    tracing::warn!(toolstack.cache.store = "redis", error = %err, "{outcome}");
}

fn timed_out(health: &Health, pause: Duration, timeout: Duration, outcome: &'static str) {
    health.unreachable(pause);
    tracing::warn!(
        toolstack.cache.store = "redis",
        timeout_ms = timeout.as_millis(),
        "{outcome} (no answer in time)"
    );
}

impl fmt::Debug for RedisCacheStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCacheStore")
            .field("prefix", &self.settings.prefix)
            .field("ttl", &self.ttl)
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("timeout", &self.settings.timeout)
            .field("recheck_after", &self.settings.recheck_after)
            .finish_non_exhaustive()
    }
}
