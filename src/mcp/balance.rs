//! One remote toolbox over N replicas of an MCP tool server: calls spread
//! with tower's own balancer (power of two choices over peak-EWMA load),
//! failed replicas ejected and probed back in.
//!
//! [`Replicas::builder()`](Replicas::builder)`.`[`connect`](ReplicasBuilder::connect) connects to each URL (streamable HTTP; stateless
//! 2026-07-28 requests by default, so any replica can take any call),
//! checks that every replica serves the same tools — names, descriptions,
//! schemas, annotations; a mismatch is an error naming the replica and the
//! tool, never a silent merge — and answers with a [`Toolbox`] that lists
//! the tools once, and a [`Replicas`] handle to add and remove replicas at
//! run time.
//!
//! * **Balancing** is [`tower::balance::p2c::Balance`] over a
//!   [`Discover`](tower::discover::Discover) stream of the replicas, each
//!   weighed by [`PeakEwma`](tower::load::PeakEwma). The load of a call
//!   counts until its **stream ends** (not when its first response
//!   arrives), so a replica busy streaming long results weighs as busy.
//! * **Ejection** (in the spirit of Envoy's outlier detection): a call that
//!   cannot reach its replica, or whose connection breaks, ejects the
//!   replica at once; the balancer drops it. It is probed back in —
//!   connected again, its tools listed and compared — after a back-off
//!   that doubles from [`backoff`](ReplicasBuilder::backoff)'s first delay
//!   up to its ceiling (1 s to 30 s).
//! * **What a failure says**, so the existing retry layer
//!   (`toolstack-layers`' `stream_retry`, inside the toolbox) does the
//!   right thing: a call that never reached a replica (connection refused:
//!   the request was not sent) fails as
//!   [`Overloaded`](crate::ErrorKind::Overloaded) — "the tool never
//!   started", which retry repeats for any tool, on another replica. A call
//!   whose connection broke after it was sent may have run: it fails as a
//!   retryable [`Unavailable`](crate::ErrorKind::Unavailable), which retry
//!   repeats only for tools annotated idempotent or read-only. With no
//!   replica ready within [`ready_timeout`](ReplicasBuilder::ready_timeout)
//!   (5 s), a call fails as `Overloaded` without being sent.
//!
//! ```no_run
//! use toolstack::mcp::balance::Replicas;
//!
//! # async fn demo() -> Result<(), toolstack::ToolError> {
//! let (tools, replicas) = Replicas::builder()
//!     .connect(["http://10.0.0.1:8000/mcp", "http://10.0.0.2:8000/mcp"])
//!     .await?;
//! replicas.add("http://10.0.0.3:8000/mcp").await?; // at run time
//! let toolbox = toolstack::Toolbox::new().merge(tools);
//! # let _ = toolbox; Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tower::balance::p2c::Balance;
use tower::discover::Change;
use tower::load::{PeakEwmaDiscover, TrackCompletion};
use tower_service::Service;

use super::{McpClient, McpClientBuilder};
use crate::{Describe, ErrorKind, ToolError, ToolInfo, ToolRequest, ToolStream, Toolbox};

/// The first delay before an ejected replica is probed, and the ceiling
/// of its doubling.
pub const DEFAULT_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// How long a call waits for a ready replica before it fails, unsent.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// How a balanced toolbox connects and recovers: see the
/// [module docs](self).
pub struct ReplicasBuilder {
    client: McpClientBuilder,
    backoff: (Duration, Duration),
    ready_timeout: Duration,
    /// Peak-EWMA's starting latency estimate and decay.
    default_rtt: Duration,
    decay: Duration,
}

impl fmt::Debug for ReplicasBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicasBuilder")
            .field("backoff", &self.backoff)
            .field("ready_timeout", &self.ready_timeout)
            .finish_non_exhaustive()
    }
}

/// The replicas behind a balanced toolbox: add and remove them at run
/// time, see which are in.
#[derive(Clone)]
pub struct Replicas {
    inner: Arc<Inner>,
}

struct Inner {
    client: McpClientBuilder,
    reference: Vec<ToolInfo>,
    reference_url: String,
    backoff: (Duration, Duration),
    changes: mpsc::UnboundedSender<Change<Arc<str>, Replica>>,
    states: Mutex<HashMap<Arc<str>, ReplicaState>>,
}

/// Where a replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReplicaState {
    /// In the balancer.
    In,
    /// Ejected after a failure; probed again after a back-off.
    Ejected,
}

impl fmt::Debug for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicas")
            .field("states", &*lock(&self.inner.states))
            .finish_non_exhaustive()
    }
}

impl Replicas {
    /// A builder with the defaults: stateless clients, a 1 s → 30 s
    /// back-off, a 5 s wait for a ready replica.
    pub fn builder() -> ReplicasBuilder {
        ReplicasBuilder {
            client: McpClient::builder().stateless(),
            backoff: DEFAULT_BACKOFF,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            default_rtt: Duration::from_millis(5),
            decay: Duration::from_secs(10),
        }
    }

    /// Adds a replica: connected, its tools compared with the others'.
    pub async fn add(&self, url: impl Into<String>) -> Result<(), ToolError> {
        let url: Arc<str> = Arc::from(url.into());
        let replica = self.inner.connect(&url).await?;
        lock(&self.inner.states).insert(Arc::clone(&url), ReplicaState::In);
        let _ = self.inner.changes.send(Change::Insert(url, replica));
        Ok(())
    }

    /// Removes a replica: calls in flight on it go on; no new one goes to it.
    pub fn remove(&self, url: &str) {
        if lock(&self.inner.states).remove(url).is_some() {
            let _ = self.inner.changes.send(Change::Remove(Arc::from(url)));
        }
    }

    /// Each replica and where it stands.
    pub fn states(&self) -> Vec<(String, ReplicaState)> {
        let mut states: Vec<_> = lock(&self.inner.states)
            .iter()
            .map(|(url, state)| (url.to_string(), *state))
            .collect();
        states.sort();
        states
    }
}

impl ReplicasBuilder {
    /// The client each replica is reached with (default: stateless).
    pub fn client(mut self, client: McpClientBuilder) -> Self {
        self.client = client;
        self
    }

    /// The first delay before an ejected replica is probed, and the
    /// ceiling it doubles up to.
    pub fn backoff(mut self, first: Duration, ceiling: Duration) -> Self {
        self.backoff = (first, ceiling.max(first));
        self
    }

    /// How long a call waits for a ready replica before it fails as
    /// `Overloaded`, unsent.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Connects to every replica in `urls` and checks that they serve the
    /// same tools; answers with the balanced toolbox and the handle. A
    /// replica that cannot be reached now is an error (a replica set is
    /// started healthy; later failures are ejected and probed instead).
    ///
    /// Must be called inside a tokio runtime: the back-off probes run as
    /// tasks of their own.
    pub async fn connect<I, U>(self, urls: I) -> Result<(Toolbox, Replicas), ToolError>
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        let urls: Vec<Arc<str>> = urls.into_iter().map(|u| Arc::from(u.into())).collect();
        let Some(first) = urls.first().cloned() else {
            return Err(ToolError::invalid_arguments(
                "a balanced toolbox needs at least one replica URL",
            ));
        };
        let client = self
            .client
            .clone()
            .connect_http(&first)
            .await
            .map_err(|err| unreachable_at_start(&first, err))?;
        let reference = client
            .tools()
            .await?
            .iter()
            .map(|t| t.info().clone())
            .collect();
        let (changes, discover) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            client: self.client,
            reference,
            reference_url: first.to_string(),
            backoff: self.backoff,
            changes,
            states: Mutex::new(HashMap::new()),
        });
        let replicas = Replicas {
            inner: Arc::clone(&inner),
        };
        for url in urls {
            let replica = inner
                .connect(&url)
                .await
                .map_err(|err| unreachable_at_start(&url, err))?;
            lock(&inner.states).insert(Arc::clone(&url), ReplicaState::In);
            let _ = inner.changes.send(Change::Insert(url, replica));
        }
        let discover = PeakEwmaDiscover::new(
            Changes(discover),
            self.default_rtt,
            self.decay,
            UntilStreamEnds,
        );
        let balanced = Balanced {
            balance: Arc::new(tokio::sync::Mutex::new(Balance::new(discover))),
            ready_timeout: self.ready_timeout,
        };
        let mut toolbox = Toolbox::new();
        for info in &inner.reference {
            toolbox = toolbox.service(info.clone(), balanced.clone());
        }
        Ok((toolbox, replicas))
    }
}

fn unreachable_at_start(url: &str, err: ToolError) -> ToolError {
    ToolError::new(
        err.kind(),
        format!("replica {url} could not be connected: {}", err.message()),
    )
    .with_source(err)
}

impl Inner {
    /// Connects to `url` and checks its tools against the reference.
    async fn connect(self: &Arc<Self>, url: &Arc<str>) -> Result<Replica, ToolError> {
        let client = self.client.clone().connect_http(url).await?;
        let tools = client.toolbox().await?;
        let infos: Vec<ToolInfo> = tools.infos().cloned().collect();
        if let Some(mismatch) = mismatch(&self.reference, &infos) {
            return Err(ToolError::new(
                ErrorKind::Failed,
                format!(
                    "replica {url} does not serve the same tools as {}: {mismatch}; not added",
                    self.reference_url
                ),
            ));
        }
        Ok(Replica {
            url: Arc::clone(url),
            tools,
            health: Arc::new(Health {
                ejected: AtomicBool::new(false),
                set: Arc::downgrade(self),
                url: Arc::clone(url),
            }),
        })
    }
}

/// What differs between two tool lists, if anything.
fn mismatch(reference: &[ToolInfo], other: &[ToolInfo]) -> Option<String> {
    let describe = |info: &ToolInfo| serde_json::to_value(info).unwrap_or_default();
    for want in reference {
        match other.iter().find(|t| t.name() == want.name()) {
            None => return Some(format!("it lacks the tool `{}`", want.name())),
            Some(got) if describe(got) != describe(want) => {
                return Some(format!(
                    "its tool `{}` differs (description, schema or annotations)",
                    want.name()
                ))
            }
            Some(_) => {}
        }
    }
    other
        .iter()
        .find(|t| !reference.iter().any(|r| r.name() == t.name()))
        .map(|extra| format!("it serves a tool the others do not, `{}`", extra.name()))
}

/// Whether a replica is ejected; ejecting starts its probe.
struct Health {
    ejected: AtomicBool,
    set: std::sync::Weak<Inner>,
    url: Arc<str>,
}

impl Health {
    fn eject(&self) {
        if self.ejected.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(set) = self.set.upgrade() else {
            return;
        };
        {
            let mut states = lock(&set.states);
            match states.get_mut(&self.url) {
                Some(state) => *state = ReplicaState::Ejected,
                // Removed meanwhile: nothing to probe.
                None => return,
            }
        }
        tracing::warn!(replica = %self.url, "replica ejected; probing it back after a back-off");
        let url = Arc::clone(&self.url);
        tokio::spawn(probe(self.set.clone(), url));
    }
}

/// Probes an ejected replica until it is back (or removed, or the set
/// dropped), doubling the back-off.
async fn probe(set: std::sync::Weak<Inner>, url: Arc<str>) {
    let Some((mut delay, ceiling)) = set.upgrade().map(|s| s.backoff) else {
        return;
    };
    loop {
        tokio::time::sleep(delay).await;
        let Some(set) = set.upgrade() else { return };
        if !lock(&set.states).contains_key(&url) {
            return;
        }
        match set.connect(&url).await {
            Ok(replica) => {
                lock(&set.states).insert(Arc::clone(&url), ReplicaState::In);
                let _ = set.changes.send(Change::Insert(Arc::clone(&url), replica));
                tracing::info!(replica = %url, "replica probed back in");
                return;
            }
            Err(err) => {
                tracing::debug!(replica = %url, error = %err, "replica still out");
                delay = (delay * 2).min(ceiling);
            }
        }
    }
}

/// One replica, as the balancer sees it: its remote toolbox.
#[derive(Clone)]
struct Replica {
    url: Arc<str>,
    tools: Toolbox,
    health: Arc<Health>,
}

impl Service<ToolRequest> for Replica {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<ToolStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        // An ejected replica fails readiness: the balancer drops it.
        if self.health.ejected.load(Ordering::Acquire) {
            return Poll::Ready(Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("replica {} is ejected", self.url),
            )));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let dispatch = self.tools.dispatch(request);
        let (health, url) = (Arc::clone(&self.health), Arc::clone(&self.url));
        Box::pin(async move {
            let stream = match dispatch.await {
                Ok(stream) => stream,
                Err(err) => return Err(classify(err, &health, &url, true)),
            };
            let mut first = true;
            Ok(ToolStream::new(stream.map(move |item| {
                let item = item.map_err(|err| classify(err, &health, &url, first));
                first = false;
                item
            })))
        })
    }
}

/// A replica's failure in words a retry reads: unsent (a connection that
/// could not be made) is `Overloaded`; a transport that broke after the
/// call was sent is a retryable `Unavailable` (it may have run). Either
/// ejects the replica. Other errors are the tool's own.
fn classify(err: ToolError, health: &Health, url: &str, first: bool) -> ToolError {
    if err.kind() != ErrorKind::Unavailable || !is_transport(&err) {
        return err;
    }
    health.eject();
    if first && never_sent(&err) {
        return ToolError::new(
            ErrorKind::Overloaded,
            format!(
                "replica {url} could not be reached, so the call was not sent: {}",
                err.message()
            ),
        )
        .with_source(err);
    }
    ToolError::new(
        ErrorKind::Unavailable,
        format!(
            "the connection to replica {url} broke during the call, which may have run: {}",
            err.message()
        ),
    )
    .with_retryable(true)
    .with_source(err)
}

/// Whether the error came from the connection (rmcp's transport), not the
/// server's answer.
fn is_transport(err: &ToolError) -> bool {
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        if c.downcast_ref::<rmcp::ServiceError>().is_some() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Whether the error's cause is a connection that could not be made
/// (refused, unroutable, timed out while connecting): the request was
/// never sent.
fn never_sent(err: &ToolError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        // rmcp keeps reqwest's error as a variant, not as a source.
        if let Some(StreamableHttpError::Client(http)) =
            c.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            return http.is_connect();
        }
        if let Some(http) = c.downcast_ref::<reqwest::Error>() {
            return http.is_connect();
        }
        cause = c.source();
    }
    false
}

/// The replica set's changes as a `Discover` stream.
struct Changes(mpsc::UnboundedReceiver<Change<Arc<str>, Replica>>);

impl Stream for Changes {
    type Item = Result<Change<Arc<str>, Replica>, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|change| change.map(Ok))
    }
}

/// Peak-EWMA's completion: a call's load lasts until its stream ends or
/// is dropped, not until its first answer.
#[derive(Clone, Copy, Debug)]
struct UntilStreamEnds;

impl<H: Send + 'static> TrackCompletion<H, ToolStream> for UntilStreamEnds {
    type Output = ToolStream;

    fn track_completion(&self, handle: H, stream: ToolStream) -> ToolStream {
        ToolStream::new(stream.map(move |item| {
            let _ = &handle;
            item
        }))
    }
}

type Balancer = Balance<PeakEwmaDiscover<Changes, UntilStreamEnds>, ToolRequest>;

/// A tool of the balanced toolbox: each call takes the balancer for as
/// long as it takes to pick a ready replica and hand it the call.
#[derive(Clone)]
struct Balanced {
    balance: Arc<tokio::sync::Mutex<Balancer>>,
    ready_timeout: Duration,
}

impl Service<ToolRequest> for Balanced {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<ToolStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let (balance, wait) = (Arc::clone(&self.balance), self.ready_timeout);
        Box::pin(async move {
            let call = {
                let mut balance = balance.lock().await;
                let ready = std::future::poll_fn(|cx| balance.poll_ready(cx));
                match tokio::time::timeout(wait, ready).await {
                    Ok(Ok(())) => balance.call(request),
                    Ok(Err(err)) => return Err(ToolError::from_box_error(err)),
                    Err(_) => {
                        return Err(ToolError::new(
                            ErrorKind::Overloaded,
                            format!(
                                "no replica was ready within {wait:?}, so the call was not sent"
                            ),
                        ))
                    }
                }
            };
            call.await.map_err(ToolError::from_box_error)
        })
    }
}

impl fmt::Debug for Balanced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balanced").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
