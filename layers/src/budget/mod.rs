//! Caps what one call puts in the model's context: items, bytes, or an
//! approximate token count.
//!
//! A tool that answers 3,000 rows fills a model's context with them. Under
//! [`Budget`], a call's output keeps its **head** and its **tail** and
//! says, where the middle was, exactly what was cut, in words the model
//! can act on:
//!
//! ```text
//! [… 2,811 items (183,204 bytes) omitted here: the output was over its budget of 50 items.
//!  Ask for less — narrow the query, filter, or ask for a page.]
//! ```
//!
//! * **Streaming stays streaming.** The head passes as it comes, never
//!   held; once the head is full, items go into a bounded tail (by default
//!   a fifth of the budget), the oldest of which are cut as newer ones
//!   come. At the end come the notice and the tail. Memory is bounded by
//!   the budget, whatever the tool sends.
//! * A text item that does not fit is cut inside (at a character
//!   boundary), so a single huge text keeps its beginning and its end.
//!   Other items (JSON, images…) are kept or cut whole.
//! * Progress is not output: it passes, uncounted. An error ends the
//!   stream as usual, after the notice and the tail.
//! * [`BudgetLayer::notice`] words the notice for a tool ("… rows
//!   omitted"); [`Cut`] says what was cut.
//!
//! **The whole output, for a consumer that wants it** (a UI, a file): put
//! a [`Tap`] in the request's extensions — it sees every item as it
//! passes the budget, the cut ones included, before the cut.
//!
//! ```
//! use futures_util::{stream, StreamExt};
//! use toolstack::{tool, ToolError, ToolOutput, ToolRequest, ToolResult};
//! use toolstack_layers::budget::BudgetLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let rows = tool::from_stream("rows", |_: serde_json::Value| {
//!     stream::iter((1..=100).map(|i| Ok::<_, ToolError>(ToolOutput::text(format!("row {i}")))))
//! });
//! let tool = ServiceBuilder::new()
//!     .layer(BudgetLayer::new().max_items(10))
//!     .service(rows);
//! let result = ToolResult::collect(tool.oneshot(ToolRequest::new("rows", "{}")).await?).await;
//! // The model reads the items joined by newlines: 8 rows, the notice, 2 rows.
//! let text = result.into_text();
//! assert!(text.starts_with("row 1\nrow 2\n"));
//! assert!(text.contains("row 8\n[… 90 items"));
//! assert!(text.ends_with("row 99\nrow 100"));
//! # Ok(()) }
//! ```
//!
//! ## Keeping the whole output
//!
//! A cut need not lose the middle: with [`BudgetLayer::keep`] the budget
//! keeps the whole output of a call it cuts in an [`OutputStore`], under
//! an unpredictable handle, and the notice tells the model how to read it
//! with the [`read_tool_result`] tool (add that tool to the toolbox, over
//! the same store):
//!
//! ```text
//! [… 90 items (539 bytes) omitted here: the output was over its budget of 10 items.
//!  The whole output (691 bytes) is kept for 1h: to read the omitted part (bytes 48 to 677),
//!  call read_tool_result with {"handle":"3f9c…","offset":48} (up to 8,000 bytes a call;
//!  each answer says where the next page starts).]
//! ```
//!
//! * **What is kept** is the output as a model reads it: the items' texts
//!   joined by newlines — text as it is, JSON as its JSON text, an image or
//!   audio clip as its MIME type, a resource as its text or URI (their
//!   bytes are not kept); progress is not output and is not kept. Offsets
//!   count bytes of that text.
//! * **Bounded**: the text is gathered while the call streams, at most the
//!   store's [`max_output_bytes`](OutputStore::max_output_bytes) of it
//!   (1 MiB by default); beyond that the kept copy is the output's
//!   beginning, and the notice says how much of it is kept. A call that is
//!   not cut is not kept (its gathered text is dropped at its end).
//! * **Expiring**: each store keeps an output for its time to live (the
//!   notice says how long); [`MemoryOutputStore`] holds at most its total
//!   bytes, the oldest dropped first. Stores: [`MemoryOutputStore`] in the
//!   process, `SqliteOutputStore` (feature `sqlite`) in a file,
//!   `RedisOutputStore` (feature `redis`) shared by processes.
//! * **A store that fails never fails the call**: the cut stands, the
//!   notice says the output could not be kept, a `tracing` warning says
//!   why. A store has [`STORE_TIMEOUT`] (5 s) to answer, and a panic in it
//!   is caught.
//! * [`Cut::kept`] tells a notice of your own where the output went
//!   ([`Kept`]: the handle, the omitted range, how much is kept).
//!
//! ```
//! use std::time::Duration;
//! use futures_util::stream;
//! use toolstack::{tool, ToolError, ToolOutput, ToolRequest, ToolResult, Toolbox};
//! use toolstack_layers::budget::{read_tool_result, BudgetLayer, MemoryOutputStore};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let rows = tool::from_stream("rows", |_: serde_json::Value| {
//!     stream::iter((1..=100).map(|i| Ok::<_, ToolError>(ToolOutput::text(format!("row {i}")))))
//! });
//! let kept = MemoryOutputStore::new(16 << 20, Duration::from_secs(3600));
//! let tools = Toolbox::new()
//!     .layered(rows, BudgetLayer::new().max_items(10).keep(kept.clone()))
//!     .tool(read_tool_result(kept));
//!
//! let cut = tools.clone().oneshot(ToolRequest::new("rows", "{}")).await?;
//! let text = ToolResult::collect(cut).await.into_text();
//! // The notice gives the arguments to read the omitted part with.
//! let from = text.find("{\"handle\"").unwrap();
//! let args = text[from..from + text[from..].find('}').unwrap() + 1].to_owned();
//!
//! let page = tools.oneshot(ToolRequest::new("read_tool_result", args)).await?;
//! let page = ToolResult::collect(page).await.into_text();
//! assert!(page.starts_with("row 9\nrow 10\n"));
//! assert!(page.ends_with("row 100\n[read_tool_result: bytes 48 to 691 of 691: the end of the output.]"));
//! # Ok(()) }
//! ```

mod elided;
mod future;
mod keeper;
mod layer;
mod notice;
mod read_tool;
mod service;
mod store;
mod stream;

use std::fmt;
use std::sync::Arc;

pub use self::elided::ElidedOutputs;
pub use self::future::ResponseFuture;
pub use self::layer::BudgetLayer;
pub use self::notice::{Cut, Kept, KeptOutput};
pub use self::read_tool::{read_tool_result, DEFAULT_PAGE_BYTES, MAX_PAGE_BYTES, READ_TOOL_NAME};
pub use self::service::Budget;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::store::RedisOutputStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use self::store::SqliteOutputStore;
pub use self::store::STORE_TIMEOUT;
pub use self::store::{
    Chunk, MemoryOutputStore, OutputStore, OutputStoreError, WholeOutput, DEFAULT_MAX_OUTPUT_BYTES,
};
pub use self::stream::Budgeted;

/// Renamed to [`MemoryOutputStore`]: the agent's run store and the cache
/// have a `MemoryStore` too.
#[deprecated(note = "renamed to `MemoryOutputStore`")]
pub type MemoryStore = MemoryOutputStore;

/// Renamed to [`RedisOutputStore`]: the agent's run store and the cache
/// have a `RedisStore` too.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[deprecated(note = "renamed to `RedisOutputStore`")]
pub type RedisStore = RedisOutputStore;

/// Renamed to [`SqliteOutputStore`]: the agent's run store has a
/// `SqliteStore` too.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
#[deprecated(note = "renamed to `SqliteOutputStore`")]
pub type SqliteStore = SqliteOutputStore;

/// Renamed to [`OutputStoreError`]: the agent's run store has a
/// `StoreError` too.
#[deprecated(note = "renamed to `OutputStoreError`")]
pub type StoreError = OutputStoreError;

/// About how many bytes a token is (for [`BudgetLayer::max_tokens`]).
pub const BYTES_PER_TOKEN: usize = 4;

/// Sees every item of a call as it passes the budget, the cut ones
/// included: put one in the request's extensions (a UI, a log file). It
/// is called on the item before the cut, on the poll that yields it.
pub struct Tap<T> {
    see: Arc<dyn Fn(&T) + Send + Sync>,
}

impl<T> Tap<T> {
    /// A tap that calls `see` with every item.
    pub fn new(see: impl Fn(&T) + Send + Sync + 'static) -> Self {
        Tap { see: Arc::new(see) }
    }

    pub(crate) fn see(&self, item: &T) {
        (self.see)(item);
    }
}

impl<T> Clone for Tap<T> {
    fn clone(&self) -> Self {
        Tap {
            see: self.see.clone(),
        }
    }
}

impl<T> fmt::Debug for Tap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tap").finish_non_exhaustive()
    }
}
