//! How an agent saves its runs: [`Durability`] — the store, this
//! process's id and lease, the bound on each store call, how long a run
//! rides out a store that does not answer (retrying with backoff), and
//! what a run does when a save fails for good ([`OnStoreError`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{
    Append, Head, Holder, RunStatus, RunStore, StoreError, Stored, Version, JOURNAL_FORMAT,
};
use crate::ToolError;

use super::backoff::Backoff;
use super::release::Releases;

/// The default lease of a running run: 60 s without an append.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The default bound on one append to the store: 5 s.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default bound on a store outage a run rides out: 15 s — long
/// enough for a Redis restart from its append-only file or a Sentinel
/// failover. See [`Agent::store_outage`](crate::agent::Agent::store_outage).
pub const DEFAULT_STORE_OUTAGE: Duration = Duration::from_secs(15);

/// What a run's store calls cost in outages: how many calls were tried
/// again, and how long the outages ridden out lasted. Counted only off
/// the happy path (a first attempt that succeeds touches neither).
#[derive(Debug, Default)]
pub(in crate::agent) struct StoreStats {
    retries: AtomicU64,
    outage_ms: AtomicU64,
}

impl StoreStats {
    /// How many store calls were tried again.
    pub(in crate::agent) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// How long the outages ridden out (or given up on) lasted, in ms.
    pub(in crate::agent) fn outage_ms(&self) -> u64 {
        self.outage_ms.load(Ordering::Relaxed)
    }

    fn outage(&self, lasted: Duration) {
        let ms = u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX);
        self.outage_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

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
///
/// A store that is only unavailable for a while is ridden out first: the
/// append is tried again with backoff for up to
/// [`Agent::store_outage`](crate::agent::Agent::store_outage) (15 s by
/// default), and the run carries on as if nothing happened when the store
/// answers again; only then does this apply, with an
/// [`Unavailable`](crate::agent::store::StoreError::Unavailable) error
/// that says how long the store was away and that the run can be resumed.
/// A conflict (another process took the run) always stops the run.
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
    /// How long a call is tried again while the store is unavailable
    /// (used clamped below the lease: [`Durability::outage`]).
    pub(in crate::agent) outage: Duration,
    pub(in crate::agent) on_error: OnStoreError,
    /// The runs given up on while the store was down, released once it
    /// is back (`release.rs`); shared by the agent's clones.
    pub(in crate::agent) releases: Arc<Releases>,
}

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durability")
            .field("process", &self.process)
            .field("lease", &self.lease)
            .field("timeout", &self.timeout)
            .field("outage", &self.outage)
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

    /// The bound on an outage ridden out: as set, but at most half the
    /// lease — while a call is tried again the run stays this process's
    /// (its lease, from its last append, must not pass meanwhile, or
    /// another process could take the run over while this one still means
    /// to write it), and half leaves the rest for the run's own work.
    pub(super) fn outage(&self) -> Duration {
        self.outage.min(self.lease / 2)
    }

    /// `append`, each attempt within the timeout, tried again with backoff
    /// while the store is unavailable, for at most [`outage`](Self::outage).
    ///
    /// Exactly once across a retry: an attempt whose answer was lost may
    /// have landed, and the next then meets the version fence. So a
    /// [`StoreError::Conflict`] after an unavailable attempt loads the run
    /// and is this append's success when the stored run is this append's:
    /// its version, and its head as this append wrote it (status, holder
    /// with its lease, and when it was written — the holder alone is not
    /// enough: a run waiting for a decision has none). Any other conflict
    /// is another writer's, and stays one.
    pub(super) async fn append(
        &self,
        append: Append<'_>,
        stats: &StoreStats,
    ) -> Result<Version, StoreError> {
        // The happy path: one attempt, no clock read, nothing allocated.
        let err = match self.append_once(append).await {
            Err(err @ StoreError::Unavailable { .. }) => err,
            other => return other,
        };
        let started = tokio::time::Instant::now();
        let mut backoff = Backoff::new(append.run_id);
        let mut last = err;
        loop {
            if let Err(gave_up) = self
                .wait(&mut backoff, started, &last, "append", append.run_id, stats)
                .await
            {
                self.give_up(&gave_up, &append);
                return Err(gave_up);
            }
            match self.append_once(append).await {
                Ok(version) => return Ok(self.recovered(started, stats, version)),
                Err(err @ StoreError::Unavailable { .. }) => last = err,
                Err(conflict @ StoreError::Conflict { .. }) => {
                    match self.load_once(append.run_id).await {
                        Ok(Some(stored)) if stored.is_as_written(append.version(), append.head) => {
                            tracing::info!(
                                run_id = append.run_id,
                                version = append.version().0,
                                "an append whose answer was lost had been stored; not applied again"
                            );
                            return Ok(self.recovered(started, stats, append.version()));
                        }
                        Err(err @ StoreError::Unavailable { .. }) => last = err,
                        _ => return Err(conflict),
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// An append stayed unavailable past the bound and the run stops
    /// ([`OnStoreError::Fail`]): its stored head, at the version it
    /// expected, is released once the store is back, so no process is
    /// left holding a run it gave up on. A run that goes on in memory
    /// ([`OnStoreError::Continue`]) is not: another process must not take
    /// it while this one still runs it; its lease passing frees it.
    fn give_up(&self, err: &StoreError, append: &Append<'_>) {
        if self.on_error == OnStoreError::Fail && matches!(err, StoreError::Unavailable { .. }) {
            self.releases
                .schedule(&self.store, &self.process, self.timeout, append);
        }
    }

    /// The stored run `run_id`, each attempt within the timeout, tried
    /// again with backoff while the store is unavailable, for at most
    /// [`outage`](Self::outage).
    pub(super) async fn load(
        &self,
        run_id: &str,
        stats: &StoreStats,
    ) -> Result<Option<Stored>, StoreError> {
        let err = match self.load_once(run_id).await {
            Err(err @ StoreError::Unavailable { .. }) => err,
            other => return other,
        };
        let started = tokio::time::Instant::now();
        let mut backoff = Backoff::new(run_id);
        let mut last = err;
        loop {
            self.wait(&mut backoff, started, &last, "load", run_id, stats)
                .await?;
            match self.load_once(run_id).await {
                Ok(stored) => return Ok(self.recovered(started, stats, stored)),
                Err(err @ StoreError::Unavailable { .. }) => last = err,
                Err(err) => return Err(err),
            }
        }
    }

    /// Counts an outage ridden out.
    fn recovered<T>(&self, started: tokio::time::Instant, stats: &StoreStats, value: T) -> T {
        let lasted = started.elapsed();
        stats.outage(lasted);
        tracing::info!(
            outage_ms = lasted.as_millis() as u64,
            "the run store answered again"
        );
        value
    }

    /// Waits before the next attempt, or gives up: past the bound, the
    /// last error, said as an outage the run can come back from.
    async fn wait(
        &self,
        backoff: &mut Backoff,
        started: tokio::time::Instant,
        last: &StoreError,
        call: &str,
        run_id: &str,
        stats: &StoreStats,
    ) -> Result<(), StoreError> {
        let bound = self.outage();
        if bound.is_zero() {
            // Set not to ride out outages: the error as it came.
            return Err(last.clone());
        }
        let elapsed = started.elapsed();
        if elapsed >= bound {
            stats.outage(elapsed);
            tracing::warn!(error = %last, run_id, call, "the run store stayed unavailable; giving up");
            return Err(StoreError::unavailable_from(
                format!(
                    "the run store was unavailable for {:.1} s (the bound on an outage a run rides out); \
                     run {run_id} stopped where it was last stored and can be resumed \
                     (the answer sent again) once the store is back; last error: {last}",
                    elapsed.as_secs_f64()
                ),
                last.clone(),
            ));
        }
        stats.retries.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %last, run_id, call, "the run store is unavailable; trying again");
        tokio::time::sleep(backoff.next().min(bound - elapsed)).await;
        Ok(())
    }

    /// One `append` within the timeout.
    async fn append_once(&self, append: Append<'_>) -> Result<Version, StoreError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.store.append(append)).await {
            Ok(appended) => appended,
            Err(_) => Err(StoreError::unavailable(format!(
                "run {} was not saved within {timeout:?}",
                append.run_id
            ))),
        }
    }

    /// One `load` within the timeout.
    async fn load_once(&self, run_id: &str) -> Result<Option<Stored>, StoreError> {
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
