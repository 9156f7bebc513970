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
//! The store is pluggable ([`CacheStore`]): [`MemoryStore`] (moka, bounded
//! in bytes, with a time to live) in process, and, with the `redis`
//! feature, `RedisStore`, shared by every process that uses the same Redis
//! and key prefix (entries expire in Redis; a Redis that does not answer is
//! a miss, never an error).
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

#[cfg(feature = "redis")]
mod encoding;
#[cfg(feature = "redis")]
mod redis;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisStore;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::stream;
use http::Extensions;
use pin_project_lite::pin_project;
use tokio::sync::watch;
use toolstack::{Progress, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest, ToolStream};
use tower_layer::Layer;
use tower_service::Service;

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
    fn bytes(&self) -> usize {
        self.items.iter().map(ToolOutput::byte_len).sum()
    }
}

/// Where a [`Cache`] keeps results: an in-process map ([`MemoryStore`]),
/// or one shared by processes.
pub trait CacheStore: Send + Sync + 'static {
    /// The result stored under `key`, if there is one and it is fresh.
    fn get(&self, key: &str) -> BoxFuture<'static, Option<Cached>>;
    /// Stores `value` under `key` (a store may refuse or evict it).
    fn put(&self, key: String, value: Cached) -> BoxFuture<'static, ()>;
}

/// An in-process [`CacheStore`] (moka): bounded in bytes (keys and items),
/// entries dropped a time to live after they were stored.
///
/// Freshness is decided on tokio's clock (so a test can pause it); moka's
/// own time to live, on the system clock, frees the memory of entries
/// nobody asks for again.
#[derive(Clone)]
pub struct MemoryStore {
    cache: moka::sync::Cache<String, (Cached, tokio::time::Instant)>,
    ttl: Duration,
}

impl MemoryStore {
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
        MemoryStore { cache, ttl }
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

impl CacheStore for MemoryStore {
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

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

type CallerKey = Arc<dyn Fn(&Extensions) -> Option<String> + Send + Sync>;

/// Caches tool results: see the [module docs](self).
#[derive(Clone)]
pub struct CacheLayer {
    store: Arc<dyn CacheStore>,
    caller: Option<CallerKey>,
    all: bool,
    max_entry_bytes: usize,
    flights: Arc<Flights>,
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
        Self::new(MemoryStore::new(max_bytes, ttl))
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
    fn key(&self, request: &ToolRequest) -> Option<String> {
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
struct Flights {
    running: Mutex<HashMap<String, watch::Receiver<Flight>>>,
}

/// How a running call ended, for those waiting on it.
#[derive(Clone)]
enum Flight {
    Running,
    Stored(Cached),
    Failed,
}

impl<S> Layer<S> for CacheLayer {
    type Service = Cache<S>;

    fn layer(&self, inner: S) -> Cache<S> {
        Cache {
            inner,
            config: self.clone(),
        }
    }
}

/// A tool whose results are cached; see the [module docs](self).
#[derive(Clone)]
pub struct Cache<S> {
    inner: S,
    config: CacheLayer,
}

impl<S> Cache<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Cache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St> Service<ToolRequest> for Cache<S>
where
    S: Service<ToolRequest, Response = St> + Clone + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    type Response = ToolStream;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let Some(key) = self.config.key(&request) else {
            return ResponseFuture {
                state: State::Pass {
                    future: self.inner.call(request),
                },
            };
        };
        // The ready service goes with the call; a clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        ResponseFuture {
            state: State::Cached {
                future: Box::pin(cached_call(inner, request, key, config)),
            },
        }
    }
}

pin_project! {
    /// The response future of [`Cache`]: the tool's own for a call that is
    /// not cached, else the lookup and the call.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Pass { #[pin] future: F },
        Cached { future: BoxFuture<'static, Result<ToolStream, ToolError>> },
    }
}

impl<F, St, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    type Output = Result<ToolStream, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Pass { future } => future
                .poll(cx)
                .map(|r| r.map(ToolStream::new).map_err(Into::into)),
            StateProj::Cached { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cache::ResponseFuture")
    }
}

/// `cached`'s items as a stream, marked as a hit.
fn replay(cached: Cached) -> ToolStream {
    let age = cached.stored_at.elapsed().unwrap_or_default().as_secs();
    // On the call's span (the trace layer's `execute_tool` declares it).
    tracing::Span::current().record("toolstack.cache", "hit");
    tracing::info!(cache = "hit", age_s = age, "tool result from the cache");
    let mark = ToolOutput::progress(
        Progress::new(1.0)
            .total(1.0)
            .message(format!("cached result, {age} s old")),
    );
    let items: Vec<ToolItem> = std::iter::once(Ok(mark))
        .chain(cached.items.iter().cloned().map(Ok))
        .collect();
    ToolStream::new(stream::iter(items))
}

async fn cached_call<S, St>(
    mut inner: S,
    request: ToolRequest,
    key: String,
    config: CacheLayer,
) -> Result<ToolStream, ToolError>
where
    S: Service<ToolRequest, Response = St> + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    if let Some(hit) = config.store.get(&key).await {
        return Ok(replay(hit));
    }
    // One call per key at a time: lead it, or wait for its leader.
    let lead = {
        let mut running = config
            .flights
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match running.get(&key) {
            Some(flight) => Err(flight.clone()),
            None => {
                let (tx, rx) = watch::channel(Flight::Running);
                running.insert(key.clone(), rx);
                Ok(tx)
            }
        }
    };
    let leader = match lead {
        Ok(tx) => Leader {
            tx,
            key: key.clone(),
            flights: config.flights.clone(),
        },
        Err(mut flight) => {
            let outcome = flight
                .wait_for(|f| !matches!(f, Flight::Running))
                .await
                .map(|f| f.clone());
            if let Ok(Flight::Stored(cached)) = outcome {
                return Ok(replay(cached));
            }
            // The leader failed or was dropped: run it ourselves, uncached.
            let stream = inner.call(request).await.map_err(Into::into)?;
            return Ok(ToolStream::new(stream));
        }
    };
    let stream = match inner.call(request).await {
        Ok(stream) => stream,
        Err(err) => {
            drop(leader);
            return Err(err.into());
        }
    };
    Ok(ToolStream::new(Recording {
        inner: Box::pin(stream),
        items: Vec::new(),
        bytes: 0,
        keep: true,
        leader: Some(leader),
        store: config.store.clone(),
        max_bytes: config.max_entry_bytes,
    }))
}

/// The call that runs for a key: when it ends (or is dropped) its
/// followers are told how.
struct Leader {
    tx: watch::Sender<Flight>,
    key: String,
    flights: Arc<Flights>,
}

impl Leader {
    fn finish(self, flight: Flight) {
        self.tx.send_replace(flight);
        // Drop runs the rest.
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if matches!(*self.tx.borrow(), Flight::Running) {
            self.tx.send_replace(Flight::Failed);
        }
        self.flights
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// The leader's stream: passes its items on and keeps a copy, stored when
/// the stream ends well.
struct Recording<St> {
    inner: Pin<Box<St>>,
    items: Vec<ToolOutput>,
    bytes: usize,
    keep: bool,
    leader: Option<Leader>,
    store: Arc<dyn CacheStore>,
    max_bytes: usize,
}

impl<St: Stream<Item = ToolItem>> Stream for Recording<St> {
    type Item = ToolItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(item))) => {
                if this.keep {
                    this.bytes += item.byte_len();
                    if this.bytes > this.max_bytes {
                        // Too large to keep: stream on, store nothing.
                        this.keep = false;
                        this.items = Vec::new();
                    } else if !matches!(item, ToolOutput::Progress(_)) {
                        this.items.push(item.clone());
                    }
                }
                Poll::Ready(Some(Ok(item)))
            }
            Poll::Ready(Some(Err(err))) => {
                // An error: nothing is stored, and the followers run.
                this.keep = false;
                this.leader.take();
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                if let Some(leader) = this.leader.take() {
                    if this.keep {
                        let cached = Cached {
                            items: std::mem::take(&mut this.items).into(),
                            stored_at: SystemTime::now(),
                        };
                        // The store's write runs on; the stream ends now.
                        let put = this.store.put(leader.key.clone(), cached.clone());
                        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                            runtime.spawn(put);
                        }
                        leader.finish(Flight::Stored(cached));
                    }
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
