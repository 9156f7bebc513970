//! Runs given up on while their store was down, released once it is back:
//! never a run left `running` under a process that stopped writing it.
//!
//! A run whose append stayed unavailable past
//! [`Agent::store_outage`](crate::agent::Agent::store_outage) stops
//! ([`StopReason::StoreFailed`](crate::agent::StopReason::StoreFailed)),
//! and its stored head still says `running`, held by this process for the
//! rest of its lease. So the append that gave up puts the run here
//! ([`Releases::schedule`]), and a background task — started with the
//! first entry, ending when none is left — tries, with the ride-out's
//! backoff, to append a head that holds the run for nobody (status
//! `running`, no holder: [`Checkpoint::held_by_other`] is false for every
//! process, so the next resume or resent answer takes it over at once).
//! The release is fenced at the version this process last stored — or,
//! when the append that gave up landed after all (its answer lost with the
//! store), at that append's version, recognised by the head it wrote — and
//! only applies to a head this process holds: a conflict, or a head
//! another writer moved, means someone else has the run — the entry is
//! dropped. A call whose start was stored but not its result stays
//! `Started`, so the resume reports it "may have run" for a tool that is
//! not idempotent, and does not run it again.
//!
//! A call this process refused because its record could not be stored is
//! known better than its stored state says: a call records `started`
//! before the tool runs (and a call resumed with the person's answer, the
//! answer as decided next) — when that record gave up, the tool did not
//! run, though a `started` or `decided` that landed after all (its answer
//! lost with the store) would read as "may have run". The
//! append of such a record carries the state the call had before
//! (`NotRun`: planned, or waiting for the person's answer), handed over
//! with the run when it gives up — so the release, whenever it comes, puts
//! the call back (in the same append, and only if it is stored as
//! `started` or `decided`), and a resume or the answer sent again runs it
//! once.
//!
//! A run whose *end* could not be stored did end — its client was told
//! how — so its release stores that end as it was (the same records, a
//! `done` head held by nobody) rather than leaving it `running` for nobody
//! to finish.
//!
//! An operator sees each release: an `info` event naming the run, with
//! `toolstack.store.released_runs` (how many runs this agent has released
//! so far, as the run's span counts `toolstack.store.retries`) and
//! `monotonic_counter.toolstack.store.runs_released = 1` (a counter for
//! tracing-opentelemetry's metrics layer); a run another writer moved
//! first is an `info` event too, not counted.
//!
//! Bounded: at most [`MAX_RELEASES`] runs wait here; past that a run is
//! not registered (a warning says so) and its lease passing frees it, as
//! before. One pass stops at the first unavailable answer (the store is
//! still down), so a long outage costs one call per backoff, not one per
//! run. Nothing here runs unless a run gives up.
//!
//! [`Checkpoint::held_by_other`]: crate::agent::store::Checkpoint::held_by_other

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{
    Append, CallState, Head, Record, RunStatus, RunStore, StoreError, Stored, Version,
    JOURNAL_FORMAT,
};

use super::backoff::Backoff;

/// A call refused because its record (its start, or the person's answer)
/// gave up: the tool runs only once that is stored, so it did not run,
/// and the release puts it back to `before`.
struct NotRun {
    call_id: String,
    before: CallState,
}

/// The most runs waiting to be released in one agent.
pub(in crate::agent) const MAX_RELEASES: usize = 10_000;

/// The end of a run that could not be stored: its records, its snapshot,
/// its status.
type End = (Vec<Vec<u8>>, Option<Vec<u8>>, RunStatus);

/// A run to release: where, by whom, at which version.
struct Entry {
    store: Arc<dyn RunStore>,
    process: Arc<str>,
    timeout: Duration,
    run_id: String,
    /// The version this process last stored.
    version: Version,
    /// The append that gave up, had it landed: its version and its head.
    gave_up: (Version, Head),
    /// The call refused because its record gave up, and the state it
    /// goes back to.
    not_run: Option<NotRun>,
    /// When the append that gave up ended the run: its records and
    /// snapshot, stored as they were (the run did end, and its client
    /// was told how).
    end: Option<End>,
}

#[derive(Default)]
struct Inner {
    entries: Vec<Entry>,
    /// The task is running (it clears this when it ends, under the lock).
    running: bool,
}

/// The runs this agent gave up on and releases once the store is back;
/// see the [module docs](self).
#[derive(Default)]
pub(in crate::agent) struct Releases {
    inner: Mutex<Inner>,
    /// How many runs this agent has released: the operator's count (on
    /// each release's event, `toolstack.store.released_runs`).
    released: AtomicU64,
}

/// What one try did.
enum Tried {
    /// Released: held by nobody now.
    Released,
    /// Nothing to release (another writer moved it, or it is gone).
    Done,
    StillDown,
}

impl Releases {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the run of `gave_up` (the append that stayed
    /// unavailable), stored by `process` up to the version it expected,
    /// once `store` answers again.
    pub(super) fn schedule(
        self: &Arc<Self>,
        store: &Arc<dyn RunStore>,
        process: &Arc<str>,
        timeout: Duration,
        gave_up: &Append<'_>,
        not_run: Option<CallState>,
    ) {
        let run_id = gave_up.run_id;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut inner = self.lock();
        if inner.entries.len() >= MAX_RELEASES {
            tracing::warn!(
                run_id,
                "too many runs wait to be released; this one is freed when its lease passes"
            );
            return;
        }
        inner.entries.push(Entry {
            store: Arc::clone(store),
            process: Arc::clone(process),
            timeout,
            run_id: run_id.to_owned(),
            version: gave_up.expected,
            gave_up: (gave_up.version(), gave_up.head.clone()),
            not_run: not_run.and_then(|before| not_run_call(gave_up, before)),
            end: matches!(gave_up.head.status, RunStatus::Done { .. }).then(|| {
                (
                    gave_up.records.to_vec(),
                    gave_up.snapshot.map(<[u8]>::to_vec),
                    gave_up.head.status,
                )
            }),
        });
        if !inner.running {
            inner.running = true;
            runtime.spawn(Arc::clone(self).run());
        }
    }

    /// Waits (with backoff) and tries every entry, until none is left.
    async fn run(self: Arc<Self>) {
        let mut backoff = Backoff::new("release");
        loop {
            tokio::time::sleep(backoff.next()).await;
            let entries = std::mem::take(&mut self.lock().entries);
            let mut left = Vec::new();
            let mut down = false;
            for entry in entries {
                if down {
                    left.push(entry);
                    continue;
                }
                match release(&entry).await {
                    Tried::Released => {
                        let released = self.released.fetch_add(1, Ordering::Relaxed) + 1;
                        // As integers, as the run's span counts its
                        // retries; `monotonic_counter.` makes it a counter
                        // for tracing-opentelemetry's metrics layer.
                        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                        tracing::info!(
                            run_id = entry.run_id.as_str(),
                            toolstack.store.released_runs = int(released),
                            monotonic_counter.toolstack.store.runs_released = 1_u64,
                            "a run given up on while the store was down is released"
                        );
                    }
                    Tried::Done => {}
                    Tried::StillDown => {
                        down = true;
                        left.push(entry);
                    }
                }
            }
            let mut inner = self.lock();
            inner.entries.extend(left);
            if inner.entries.is_empty() {
                inner.running = false;
                return;
            }
        }
    }
}

/// The call whose record is the last of `gave_up` (how the journal
/// appends a call's start or answer), read back only now that it gave up.
fn not_run_call(gave_up: &Append<'_>, before: CallState) -> Option<NotRun> {
    let last = gave_up.records.last()?;
    match Record::from_bytes(gave_up.run_id, 0, last, usize::MAX) {
        Ok(Record::Call { id, .. }) => Some(NotRun {
            call_id: id,
            before,
        }),
        _ => None,
    }
}

/// One try at releasing `entry`: load the run, and append a head held by
/// nobody, fenced at its version, if this process still holds it there.
async fn release(entry: &Entry) -> Tried {
    let run_id = entry.run_id.as_str();
    let loaded = tokio::time::timeout(entry.timeout, entry.store.load(run_id)).await;
    let stored = match loaded {
        Err(_) | Ok(Err(StoreError::Unavailable { .. })) => return Tried::StillDown,
        Ok(Err(err)) => {
            tracing::warn!(run_id, error = %err, "a run given up on could not be loaded to release it");
            return Tried::Done;
        }
        Ok(Ok(None)) => return Tried::Done,
        Ok(Ok(Some(stored))) => stored,
    };
    let state = &stored.checkpoint;
    let ours = state.status == RunStatus::Running
        && state
            .holder
            .as_ref()
            .is_some_and(|holder| *holder.process == *entry.process);
    let (landed_at, head) = &entry.gave_up;
    if !ours || !(stored.version == entry.version || stored.is_as_written(*landed_at, head)) {
        // Someone else moved it.
        return Tried::Done;
    }
    if let Some((records, snapshot, status)) = &entry.end {
        if stored.version == entry.version {
            // The run ended, its end not stored: store it as it was.
            let head = Head {
                format: JOURNAL_FORMAT,
                status: *status,
                holder: None,
                saved_at_ms: now_ms(),
            };
            return append(entry, &stored, &head, records, snapshot.as_deref()).await;
        }
    }
    let head = Head {
        format: JOURNAL_FORMAT,
        status: RunStatus::Running,
        holder: None,
        saved_at_ms: now_ms(),
    };
    let mut records = vec![Record::Status {
        status: RunStatus::Running,
    }
    .to_bytes()];
    if let Some(NotRun { call_id, before }) = &entry.not_run {
        // Started or decided (landed after all): either way the tool did
        // not run.
        let stalled = state.step.iter().any(|call| {
            call.call.id == *call_id
                && matches!(call.state, CallState::Started | CallState::Decided { .. })
        });
        if stalled {
            records.push(
                Record::Call {
                    id: call_id.clone(),
                    state: before.clone(),
                }
                .to_bytes(),
            );
        }
    }
    append(entry, &stored, &head, &records, None).await
}

/// Appends `records` (and `snapshot`) with `head` to the run of `entry`,
/// fenced at the version loaded.
async fn append(
    entry: &Entry,
    stored: &Stored,
    head: &Head,
    records: &[Vec<u8>],
    snapshot: Option<&[u8]>,
) -> Tried {
    let run_id = entry.run_id.as_str();
    let head_bytes = head.to_bytes();
    let append = Append {
        run_id,
        expected: stored.version,
        head,
        head_bytes: &head_bytes,
        records,
        snapshot,
    };
    match tokio::time::timeout(entry.timeout, entry.store.append(append)).await {
        Err(_) | Ok(Err(StoreError::Unavailable { .. })) => Tried::StillDown,
        Ok(Ok(_)) => Tried::Released,
        Ok(Err(err)) => {
            // A conflict: another writer has it.
            tracing::info!(run_id, error = %err, "a run given up on was moved by another writer; not released");
            Tried::Done
        }
    }
}
