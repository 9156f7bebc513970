//! Where a budget keeps the whole outputs it cut: the [`OutputStore`]
//! trait, and its stores — [`MemoryOutputStore`] (always),
//! `SqliteOutputStore` (feature `sqlite`), `RedisOutputStore` (feature
//! `redis`).

mod memory;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use self::memory::MemoryOutputStore;
#[cfg(feature = "redis")]
pub use self::redis::RedisOutputStore;
#[cfg(feature = "sqlite")]
pub use self::sqlite::SqliteOutputStore;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use toolstack::BoxError;

/// How long a store has to keep an output, or to read a page, before the
/// budget (or [`read_tool_result`](super::read_tool_result)) gives up on
/// it. The stores' own bounds (Redis's 250 ms command timeout) are
/// shorter; this one bounds a store that hangs.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a store keeps of one output unless told otherwise: 1 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;

/// Where a [`BudgetLayer`](super::BudgetLayer) that
/// [keeps](super::BudgetLayer::keep) outputs puts them, and where
/// [`read_tool_result`](super::read_tool_result) reads them back a page at
/// a time.
///
/// An output is put once, under a handle the budget made (32 hex digits,
/// 128 unpredictable bits), and read by byte ranges. A store keeps it for
/// its [`ttl`](Self::ttl) and never more than
/// [`max_output_bytes`](Self::max_output_bytes) of it (the budget gathers
/// no more than that); it may drop it sooner to stay within its own
/// bounds (the oldest first).
pub trait OutputStore: Send + Sync + 'static {
    /// Keeps `output` under `handle` for the store's time to live.
    fn put(
        &self,
        handle: &str,
        output: WholeOutput,
    ) -> BoxFuture<'static, Result<(), OutputStoreError>>;

    /// Up to `len` bytes of the output kept under `handle`, from byte
    /// `offset` (none past its end); `None` if no output is kept under
    /// `handle` (never was, or expired).
    fn read(
        &self,
        handle: &str,
        offset: usize,
        len: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>>;

    /// How long an output is kept (the notice tells the model).
    fn ttl(&self) -> Duration;

    /// The most that is kept of one output, in bytes: a larger output
    /// keeps its beginning, and the notice says so.
    fn max_output_bytes(&self) -> usize;
}

impl<S: OutputStore + ?Sized> OutputStore for Arc<S> {
    fn put(
        &self,
        handle: &str,
        output: WholeOutput,
    ) -> BoxFuture<'static, Result<(), OutputStoreError>> {
        (**self).put(handle, output)
    }

    fn read(
        &self,
        handle: &str,
        offset: usize,
        len: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>> {
        (**self).read(handle, offset, len)
    }

    fn ttl(&self) -> Duration {
        (**self).ttl()
    }

    fn max_output_bytes(&self) -> usize {
        (**self).max_output_bytes()
    }
}

/// A cut call's output as a model reads it (its items' texts joined by
/// newlines), as the budget hands it to a store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WholeOutput {
    /// The text kept: all of the output, or its beginning (at most the
    /// store's [`max_output_bytes`](OutputStore::max_output_bytes)).
    pub text: String,
    /// The whole output's length, in bytes: more than `text.len()` when
    /// the store's cap cut the kept copy short.
    pub output_bytes: usize,
}

impl WholeOutput {
    /// `text`, the first bytes of an output `output_bytes` long (at least
    /// `text.len()`).
    pub fn new(text: String, output_bytes: usize) -> Self {
        let output_bytes = output_bytes.max(text.len());
        WholeOutput { text, output_bytes }
    }

    /// The text's bytes, at most `cap` of them (to a character boundary):
    /// a store holds a caller that gathered more to its cap.
    pub(crate) fn capped(self, cap: usize) -> Vec<u8> {
        let mut text = self.text;
        text.truncate(text.floor_char_boundary(cap));
        text.into_bytes()
    }
}

/// Bytes read from a kept output, and its lengths.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Chunk {
    /// The bytes asked for (fewer at the end of the kept text; none from
    /// an offset at or past it).
    pub bytes: Vec<u8>,
    /// How many bytes of the output are kept.
    pub kept_bytes: usize,
    /// How long the whole output was.
    pub output_bytes: usize,
}

impl Chunk {
    /// `bytes`, read from a kept text of `kept_bytes` bytes of an output
    /// `output_bytes` long.
    pub fn new(bytes: Vec<u8>, kept_bytes: usize, output_bytes: usize) -> Self {
        Chunk {
            bytes,
            kept_bytes,
            output_bytes: output_bytes.max(kept_bytes),
        }
    }

    /// The chunk of `text` (kept of an output `output_bytes` long) from
    /// `offset`, at most `len` bytes.
    pub(crate) fn of(text: &[u8], offset: usize, len: usize, output_bytes: usize) -> Self {
        let from = offset.min(text.len());
        let to = from.saturating_add(len).min(text.len());
        Chunk::new(text[from..to].to_vec(), text.len(), output_bytes)
    }
}

/// A store of kept outputs failed: it could not be reached, refused the
/// command, or did not answer in time.
#[derive(Debug)]
pub struct OutputStoreError {
    message: String,
    source: Option<BoxError>,
}

impl OutputStoreError {
    /// A failure, in words an operator can act on.
    pub fn new(message: impl Into<String>) -> Self {
        OutputStoreError {
            message: message.into(),
            source: None,
        }
    }

    /// The error that caused it.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What failed.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn panicked() -> Self {
        OutputStoreError::new("the store of kept outputs panicked")
    }

    pub(crate) fn timed_out(after: Duration) -> Self {
        OutputStoreError::new(format!(
            "the store of kept outputs did not answer within {after:?}"
        ))
    }
}

impl fmt::Display for OutputStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OutputStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// Whether `handle` is one a budget makes (32 hex digits): anything else
/// is no kept output, without asking the store (so a model's text never
/// reaches a store's keys).
pub(crate) fn is_handle(handle: &str) -> bool {
    handle.len() == 32 && handle.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Milliseconds since the Unix epoch (the SQLite store's clock).
#[cfg(feature = "sqlite")]
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `d` in milliseconds, saturating.
#[cfg(any(feature = "redis", feature = "sqlite"))]
fn ttl_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
