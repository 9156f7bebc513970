//! How an agent saves its runs: [`Durability`] — the store, this
//! process's id and lease, the bound on each store call, how long a run
//! rides out a store that does not answer (retrying with backoff), and
//! what a run does when a save fails for good ([`OnStoreError`]). The
//! ride-out itself is [`RideOut`], the one loop every store call a run
//! needs goes through: the journal's appends and loads here, and the AI
//! SDK endpoint's waiting count, expiry and chunk log.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{
    Append, CallState, Head, Holder, RunStatus, RunStore, StoreError, Stored, Version,
    JOURNAL_FORMAT,
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
pub(crate) struct StoreStats {
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

    /// How this agent's store calls ride out an outage: for at most
    /// [`outage`](Self::outage), each attempt within the timeout.
    pub(in crate::agent) fn ride_out(&self) -> RideOut {
        RideOut {
            bound: self.outage(),
            timeout: self.timeout,
        }
    }

    /// `append`, ridden out ([`RideOut::call`]).
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
        not_run: Option<CallState>,
    ) -> Result<Version, StoreError> {
        let ride_out = self.ride_out();
        let mut retried = false;
        let appended = ride_out
            .call("saving run", append.run_id, Some(stats), || {
                let again = std::mem::replace(&mut retried, true);
                async move {
                    match self.store.append(append).await {
                        Err(conflict @ StoreError::Conflict { .. }) if again => {
                            self.landed_after_all(append, conflict, ride_out).await
                        }
                        other => other,
                    }
                }
            })
            .await;
        match appended {
            Err(err @ StoreError::Unavailable { .. }) => {
                self.give_up(&append, not_run);
                Err(outage_then(
                    err,
                    format_args!(
                        "run {} is kept as it was last stored: send the message or approval \
                         answer again once the store is back to go on",
                        append.run_id
                    ),
                ))
            }
            other => other,
        }
    }

    /// A retried append met the version fence: this append's success if
    /// the stored run is the one it wrote (an earlier attempt landed and
    /// only its answer was lost), else the conflict; unavailable when the
    /// run cannot be read to tell (the next attempt then tells).
    async fn landed_after_all(
        &self,
        append: Append<'_>,
        conflict: StoreError,
        ride_out: RideOut,
    ) -> Result<Version, StoreError> {
        let loaded = ride_out
            .once("loading run", append.run_id, self.store.load(append.run_id))
            .await;
        match loaded {
            Ok(Some(stored)) if stored.is_as_written(append.version(), append.head) => {
                tracing::info!(
                    run_id = append.run_id,
                    version = append.version().0,
                    "an append whose answer was lost had been stored; not applied again"
                );
                Ok(append.version())
            }
            Err(err @ StoreError::Unavailable { .. }) => Err(err),
            _ => Err(conflict),
        }
    }

    /// An append stayed unavailable past the bound and the run stops
    /// ([`OnStoreError::Fail`]): its stored head, at the version it
    /// expected, is released once the store is back, so no process is
    /// left holding a run it gave up on. A run that goes on in memory
    /// ([`OnStoreError::Continue`]) is not: another process must not take
    /// it while this one still runs it; its lease passing frees it.
    fn give_up(&self, append: &Append<'_>, not_run: Option<CallState>) {
        if self.on_error == OnStoreError::Fail {
            self.releases
                .schedule(&self.store, &self.process, self.timeout, append, not_run);
        }
    }

    /// The stored run `run_id`, ridden out ([`RideOut::call`]).
    pub(super) async fn load(
        &self,
        run_id: &str,
        stats: &StoreStats,
    ) -> Result<Option<Stored>, StoreError> {
        self.ride_out()
            .call("loading run", run_id, Some(stats), || {
                self.store.load(run_id)
            })
            .await
    }
}

/// How a store call rides out an outage — the one ride-out of every
/// store call a run needs: its appends and loads, and the AI SDK
/// endpoint's waiting count, expiry, forgetting and chunk log. Each
/// attempt is bounded by `timeout`; one that fails as
/// [`Unavailable`](StoreError::Unavailable) is tried again, with backoff
/// and jitter (50 ms doubling to 1 s), until `bound` has passed since the
/// first failed; any other error is the call's at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RideOut {
    /// The longest outage ridden out (zero: each call is tried once).
    pub(crate) bound: Duration,
    /// The bound on one attempt.
    pub(crate) timeout: Duration,
}

impl RideOut {
    /// `attempt`, ridden out. `call` and `subject` name it in the logs and
    /// in the error (`"loading run"`, `"r1"`); `stats`, when given, counts
    /// the retries and the outage. Past the bound, an `Unavailable` error
    /// that says, once, what got no answer, for how long, and the last
    /// error (the caller adds what follows: [`outage_then`]).
    pub(crate) async fn call<T, F, Fut>(
        self,
        call: &str,
        subject: &str,
        stats: Option<&StoreStats>,
        mut attempt: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        // The happy path: one attempt, nothing allocated.
        let err = match self.once(call, subject, attempt()).await {
            Err(err @ StoreError::Unavailable { .. }) => err,
            other => return other,
        };
        let started = tokio::time::Instant::now();
        let mut backoff = Backoff::new(subject);
        let mut last = err;
        loop {
            self.wait(&mut backoff, started, &last, call, subject, stats)
                .await?;
            match self.once(call, subject, attempt()).await {
                Ok(value) => {
                    let lasted = started.elapsed();
                    if let Some(stats) = stats {
                        stats.outage(lasted);
                    }
                    tracing::info!(
                        call,
                        subject,
                        outage_ms = lasted.as_millis() as u64,
                        "the run store answered again"
                    );
                    return Ok(value);
                }
                Err(err @ StoreError::Unavailable { .. }) => last = err,
                Err(err) => return Err(err),
            }
        }
    }

    /// One attempt within the timeout.
    pub(crate) async fn once<T>(
        self,
        call: &str,
        subject: &str,
        attempt: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(answered) => answered,
            Err(_) => Err(StoreError::unavailable(format!(
                "{}: no answer within {:?}",
                Named(call, subject),
                self.timeout
            ))),
        }
    }

    /// Waits before the next attempt, or gives up: past the bound, an
    /// outage said once — what got no answer, for how long, the last error.
    async fn wait(
        &self,
        backoff: &mut Backoff,
        started: tokio::time::Instant,
        last: &StoreError,
        call: &str,
        subject: &str,
        stats: Option<&StoreStats>,
    ) -> Result<(), StoreError> {
        let elapsed = started.elapsed();
        if elapsed >= self.bound {
            if let Some(stats) = stats {
                stats.outage(elapsed);
            }
            tracing::warn!(error = %last, call, subject, "the run store stayed unavailable; giving up");
            // The last error's own words: its display would say "the run
            // store is unavailable" a second time.
            let last_why = match last {
                StoreError::Unavailable { why, .. } => why.as_str(),
                _ => "",
            };
            return Err(StoreError::unavailable_from(
                format!(
                    "{} got no answer for {:.1} s, the longest a store call waits out \
                     (last error: {last_why})",
                    Named(call, subject),
                    elapsed.as_secs_f64()
                ),
                last.clone(),
            ));
        }
        if let Some(stats) = stats {
            stats.retries.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(error = %last, call, subject, "the run store is unavailable; trying again");
        tokio::time::sleep(backoff.next().min(self.bound - elapsed)).await;
        Ok(())
    }
}

/// A store call and what it is about (`saving run r1`; no subject: the
/// call alone).
struct Named<'a>(&'a str, &'a str);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            "" => f.write_str(self.0),
            subject => write!(f, "{} {subject}", self.0),
        }
    }
}

/// `err`, an outage given up on ([`RideOut::call`]), with what follows
/// from it said after it (`…; {next}`): what stopped, and what the client
/// can do. Any other error is returned as it is.
fn outage_then(err: StoreError, next: fmt::Arguments<'_>) -> StoreError {
    match err {
        StoreError::Unavailable { why, source } => StoreError::Unavailable {
            why: format!("{why}; {next}"),
            source,
        },
        other => other,
    }
}
