//! [`ReplicasBuilder`]: how a balanced toolbox connects and recovers, and
//! the connection of its first replicas.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tower::balance::p2c::Balance;
use tower::discover::Change;
use tower::load::PeakEwmaDiscover;

use super::balanced::{Balanced, Changes, UntilStreamEnds};
use super::replicas::Replicas;
use super::set::{lock, Inner, ReplicaState};
use crate::mcp::{McpClient, McpClientBuilder};
use crate::{Describe, ToolError, Toolbox};

/// The first delay before an ejected replica is probed, and the ceiling
/// of its doubling.
pub const DEFAULT_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// How long a call waits for a ready replica before it fails, unsent.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// How a balanced toolbox connects and recovers: see the
/// [module docs](super).
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
