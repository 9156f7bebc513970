//! How an agent saves its runs: [`Durability`] — the store, this
//! process's id and lease, the bound on each store call, and what a run
//! does when a save fails ([`OnStoreError`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{
    Append, Head, Holder, RunStatus, RunStore, StoreError, Stored, Version, JOURNAL_FORMAT,
};
use crate::ToolError;

/// The default lease of a running run: 60 s without an append.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The default bound on one append to the store: 5 s.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(5);

/// The error a run reports when a save failed: `Unavailable` for a store
/// that did not answer, `Denied` when another process took the run.
pub(in crate::agent) fn run_error(err: StoreError) -> ToolError {
    match err {
        err @ StoreError::Conflict { .. } => ToolError::new(
            crate::ErrorKind::Denied,
            format!("another process took this run over: {err}"),
        )
        .with_source(err),
        err => err.into(),
    }
}

/// What a run does when its store fails to take a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnStoreError {
    /// The run ends ([`StopReason::StoreFailed`](crate::agent::StopReason::StoreFailed),
    /// after an [`AgentEvent::Error`](crate::agent::AgentEvent::Error) with the
    /// store's error); a call whose start could not be recorded does not
    /// run. The default: a run that was asked to survive a restart and
    /// silently cannot would lose an approval at the next restart, or run
    /// a call twice.
    #[default]
    Fail,
    /// The run goes on in memory, with a warning on its span; it stops
    /// saving (it cannot be resumed past the last record that was stored).
    Continue,
}

/// How an agent saves its runs.
#[derive(Clone)]
pub(in crate::agent) struct Durability {
    pub(in crate::agent) store: Arc<dyn RunStore>,
    pub(in crate::agent) process: Arc<str>,
    pub(in crate::agent) lease: Duration,
    pub(in crate::agent) timeout: Duration,
    pub(in crate::agent) on_error: OnStoreError,
}

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durability")
            .field("process", &self.process)
            .field("lease", &self.lease)
            .field("timeout", &self.timeout)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

impl Durability {
    /// The head an append writes now: the journal's format, `status`, and
    /// this process holding the run (for its lease) while it runs.
    pub(super) fn head(&self, status: RunStatus) -> Head {
        let now = now_ms();
        let lease = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        Head {
            format: JOURNAL_FORMAT,
            status,
            holder: (status == RunStatus::Running).then(|| Holder {
                process: self.process.to_string(),
                until_ms: now.saturating_add(lease),
            }),
            saved_at_ms: now,
        }
    }

    /// `append` within the timeout.
    pub(super) async fn append(&self, append: Append<'_>) -> Result<Version, StoreError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.store.append(append)).await {
            Ok(appended) => appended,
            Err(_) => Err(StoreError::unavailable(format!(
                "run {} was not saved within {timeout:?}",
                append.run_id
            ))),
        }
    }

    /// The stored run `run_id`, within the timeout.
    pub(super) async fn load(&self, run_id: &str) -> Result<Option<Stored>, StoreError> {
        tokio::time::timeout(self.timeout, self.store.load(run_id))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "run {run_id} was not loaded within {:?}",
                    self.timeout
                )))
            })
    }
}
