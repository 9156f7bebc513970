//! [`MemoryCacheStore`]: the in-process store (moka), bounded in bytes.

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::store::{CacheStore, Cached};

/// An in-process [`CacheStore`] (moka): bounded in bytes (keys and items),
/// entries dropped a time to live after they were stored.
///
/// Freshness is decided on tokio's clock (so a test can pause it); moka's
/// own time to live, on the system clock, frees the memory of entries
/// nobody asks for again.
#[derive(Clone)]
pub struct MemoryCacheStore {
    cache: moka::sync::Cache<String, (Cached, tokio::time::Instant)>,
    ttl: Duration,
}

impl MemoryCacheStore {
    /// At most `max_bytes` of keys and results, each kept for `ttl`.
    pub fn new(max_bytes: u64, ttl: Duration) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(
                |key: &String, (value, _): &(Cached, tokio::time::Instant)| {
                    u32::try_from(key.len() + value.bytes()).unwrap_or(u32::MAX)
                },
            )
            .time_to_live(ttl)
            .build();
        MemoryCacheStore { cache, ttl }
    }

    /// How many results are stored (after pending evictions run).
    pub fn len(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CacheStore for MemoryCacheStore {
    fn get(&self, key: &str) -> BoxFuture<'static, Option<Cached>> {
        let hit = match self.cache.get(key) {
            Some((cached, stored)) if stored.elapsed() < self.ttl => Some(cached),
            Some(_) => {
                self.cache.invalidate(key);
                None
            }
            None => None,
        };
        Box::pin(std::future::ready(hit))
    }

    fn put(&self, key: String, value: Cached) -> BoxFuture<'static, ()> {
        self.cache.insert(key, (value, tokio::time::Instant::now()));
        Box::pin(std::future::ready(()))
    }
}

impl fmt::Debug for MemoryCacheStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryCacheStore")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}
