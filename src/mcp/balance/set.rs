//! The replica set behind a balanced toolbox: each replica connected and
//! its tools compared with the reference, called as a tool service,
//! ejected when its connection fails, and probed back in after a
//! back-off.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tower::discover::Change;
use tower_service::Service;

use crate::mcp::McpClientBuilder;
use crate::{ErrorKind, ToolError, ToolInfo, ToolRequest, ToolStream, Toolbox};

pub(super) struct Inner {
    pub(super) client: McpClientBuilder,
    pub(super) reference: Vec<ToolInfo>,
    pub(super) reference_url: String,
    pub(super) backoff: (Duration, Duration),
    pub(super) changes: mpsc::UnboundedSender<Change<Arc<str>, Replica>>,
    pub(super) states: Mutex<HashMap<Arc<str>, ReplicaState>>,
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

impl Inner {
    /// Connects to `url` and checks its tools against the reference.
    pub(super) async fn connect(self: &Arc<Self>, url: &Arc<str>) -> Result<Replica, ToolError> {
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
pub(super) struct Replica {
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

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
