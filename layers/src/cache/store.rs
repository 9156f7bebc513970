//! What a cache keeps and where: [`Cached`], [`CacheStore`], the key's bound.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use toolstack::ToolOutput;

/// The longest key cached: the name, the caller and the canonical
/// arguments.
pub const MAX_KEY_BYTES: usize = 4096;

/// A cached result: its items, and when it was stored.
#[derive(Clone, Debug)]
pub struct Cached {
    /// The stream's items, in order.
    pub items: Arc<[ToolOutput]>,
    /// When it was stored.
    pub stored_at: SystemTime,
}

impl Cached {
    pub(crate) fn bytes(&self) -> usize {
        self.items.iter().map(ToolOutput::byte_len).sum()
    }
}

/// Where a [`Cache`](super::Cache) keeps results: an in-process map
/// ([`MemoryCacheStore`](super::MemoryCacheStore)), or one shared by
/// processes.
pub trait CacheStore: Send + Sync + 'static {
    /// The result stored under `key`, if there is one and it is fresh.
    fn get(&self, key: &str) -> BoxFuture<'static, Option<Cached>>;
    /// Stores `value` under `key` (a store may refuse or evict it).
    fn put(&self, key: String, value: Cached) -> BoxFuture<'static, ()>;
}
