//! [`CacheLayer`]: what is cached, for whom, and the calls running now.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use tokio::sync::watch;
use toolstack::{ToolInfo, ToolRequest};

use super::memory::MemoryCacheStore;
use super::store::{CacheStore, Cached, MAX_KEY_BYTES};

pub(crate) type CallerKey = Arc<dyn Fn(&Extensions) -> Option<String> + Send + Sync>;

/// Caches tool results: see the [module docs](super).
#[derive(Clone)]
pub struct CacheLayer {
    pub(super) store: Arc<dyn CacheStore>,
    pub(super) caller: Option<CallerKey>,
    pub(super) all: bool,
    pub(super) max_entry_bytes: usize,
    pub(super) flights: Arc<Flights>,
}

impl CacheLayer {
    /// Results kept in `store`.
    pub fn new(store: impl CacheStore) -> Self {
        CacheLayer {
            store: Arc::new(store),
            caller: None,
            all: false,
            max_entry_bytes: 1 << 20,
            flights: Arc::default(),
        }
    }

    /// Results kept in memory: at most `max_bytes`, each for `ttl`.
    pub fn in_memory(max_bytes: u64, ttl: Duration) -> Self {
        Self::new(MemoryCacheStore::new(max_bytes, ttl))
    }

    /// Keys results by caller too: `key(extensions)` is the caller's
    /// identity (a user id an auth layer put there); a call for which it
    /// says `None` is not cached.
    pub fn caller_key(
        mut self,
        key: impl Fn(&Extensions) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.caller = Some(Arc::new(key));
        self
    }

    /// Caches every tool, annotated as safe to cache or not.
    pub fn cache_all(mut self) -> Self {
        self.all = true;
        self
    }

    /// A result larger than `bytes` (default 1 MiB) is not stored.
    pub fn max_entry_bytes(mut self, bytes: usize) -> Self {
        self.max_entry_bytes = bytes;
        self
    }

    fn cacheable(&self, info: Option<&ToolInfo>) -> bool {
        self.all
            || info.is_some_and(|info| {
                let a = info.annotations();
                a.read_only_hint == Some(true) || a.idempotent_hint == Some(true)
            })
    }

    /// The key of `request`, if it is cached.
    pub(super) fn key(&self, request: &ToolRequest) -> Option<String> {
        if !self.cacheable(request.info()) {
            return None;
        }
        let caller = match &self.caller {
            Some(key) => Some(key(request.extensions())?),
            None => None,
        };
        // The value a validation above parsed, or parsed here and kept for
        // one below.
        let value = toolstack::arguments::parsed(request).ok()?;
        let arguments = request.arguments();
        let mut key = String::with_capacity(arguments.len() + request.name().len() + 8);
        key.push_str(request.name());
        key.push('\u{0}');
        if let Some(caller) = caller {
            key.push_str(&caller);
        }
        key.push('\u{0}');
        toolstack::arguments::canonical_into(value, &mut key);
        (key.len() <= MAX_KEY_BYTES).then_some(key)
    }
}

impl fmt::Debug for CacheLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheLayer")
            .field("cache_all", &self.all)
            .field("by_caller", &self.caller.is_some())
            .field("max_entry_bytes", &self.max_entry_bytes)
            .finish()
    }
}

/// Calls running now, by key: what their followers wait on.
#[derive(Default)]
pub(crate) struct Flights {
    pub(super) running: Mutex<HashMap<String, watch::Receiver<Flight>>>,
}

/// How a running call ended, for those waiting on it.
#[derive(Clone)]
pub(crate) enum Flight {
    Running,
    Stored(Cached),
    Failed,
}
