//! [`MemoryOutputStore`]: kept outputs in the process.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{Chunk, OutputStore, OutputStoreError, WholeOutput, DEFAULT_MAX_OUTPUT_BYTES};

/// An in-process [`OutputStore`]: outputs kept for a time to live, at most
/// [`max_output_bytes`](Self::max_output_bytes) of each, at most
/// `max_total_bytes` of all (the oldest dropped first to make room).
/// Clones share the outputs.
///
/// Expiry is on tokio's clock (a test can pause it); an expired output is
/// never read, and its memory is freed by the next `put`.
///
/// ```
/// use std::time::Duration;
/// use toolstack_layers::budget::{BudgetLayer, MemoryOutputStore};
///
/// // 64 MiB of outputs, each kept for an hour.
/// let store = MemoryOutputStore::new(64 << 20, Duration::from_secs(3600));
/// let budget = BudgetLayer::new().max_tokens(2_000).keep(store.clone());
/// # let _ = budget;
/// ```
#[derive(Clone)]
pub struct MemoryOutputStore {
    outputs: Arc<Mutex<Outputs>>,
    ttl: Duration,
    max_output_bytes: usize,
    max_total_bytes: usize,
}

/// One output in the store: its kept text, its whole length, its expiry.
struct StoredOutput {
    text: Arc<[u8]>,
    output_bytes: usize,
    expires: Instant,
}

#[derive(Default)]
struct Outputs {
    by_handle: HashMap<String, StoredOutput>,
    // Handles, the oldest first: with one time to live, also the first to
    // expire.
    order: VecDeque<String>,
    bytes: usize,
}

impl Outputs {
    fn remove_oldest(&mut self) {
        if let Some(handle) = self.order.pop_front() {
            if let Some(kept) = self.by_handle.remove(&handle) {
                self.bytes -= weight(&handle, &kept.text);
            }
        }
    }
}

fn weight(handle: &str, text: &[u8]) -> usize {
    handle.len() + text.len()
}

impl MemoryOutputStore {
    /// At most `max_total_bytes` of outputs, each kept for `ttl`, each at
    /// most 1 MiB ([`DEFAULT_MAX_OUTPUT_BYTES`]) or `max_total_bytes` if
    /// smaller.
    pub fn new(max_total_bytes: usize, ttl: Duration) -> Self {
        MemoryOutputStore {
            outputs: Arc::default(),
            ttl,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES.min(max_total_bytes),
            max_total_bytes,
        }
    }

    /// Keeps at most `bytes` of one output (never more than the whole
    /// store holds).
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes.min(self.max_total_bytes);
        self
    }

    /// How many outputs are kept (the expired ones included, until the
    /// next `put` frees them).
    pub fn len(&self) -> usize {
        self.lock().by_handle.len()
    }

    /// Whether no output is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes kept: the outputs' texts and their handles.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Outputs> {
        self.outputs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl OutputStore for MemoryOutputStore {
    fn put(
        &self,
        handle: &str,
        output: WholeOutput,
    ) -> BoxFuture<'static, Result<(), OutputStoreError>> {
        let output_bytes = output.output_bytes;
        let text: Arc<[u8]> = Arc::from(output.capped(self.max_output_bytes));
        let now = Instant::now();
        let mut outputs = self.lock();
        while let Some(oldest) = outputs.order.front() {
            let expired = outputs
                .by_handle
                .get(oldest)
                .is_none_or(|kept| kept.expires <= now);
            if !expired && outputs.bytes + weight(handle, &text) <= self.max_total_bytes {
                break;
            }
            outputs.remove_oldest();
        }
        outputs.bytes += weight(handle, &text);
        let kept = StoredOutput {
            text,
            output_bytes,
            expires: now + self.ttl,
        };
        if let Some(old) = outputs.by_handle.insert(handle.to_owned(), kept) {
            // The same handle again (handles are unique; a caller's own).
            outputs.bytes -= weight(handle, &old.text);
            outputs.order.retain(|h| h != handle);
        }
        outputs.order.push_back(handle.to_owned());
        Box::pin(std::future::ready(Ok(())))
    }

    fn read(
        &self,
        handle: &str,
        offset: usize,
        len: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>> {
        let found = {
            let outputs = self.lock();
            outputs
                .by_handle
                .get(handle)
                .filter(|kept| kept.expires > Instant::now())
                .map(|kept| (Arc::clone(&kept.text), kept.output_bytes))
        };
        let chunk = found.map(|(text, output_bytes)| Chunk::of(&text, offset, len, output_bytes));
        Box::pin(std::future::ready(Ok(chunk)))
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }
}

impl fmt::Debug for MemoryOutputStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryOutputStore")
            .field("ttl", &self.ttl)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("max_total_bytes", &self.max_total_bytes)
            .finish_non_exhaustive()
    }
}
