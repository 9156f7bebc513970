//! The writer of a run's journal: [`Writer`] appends the records applied
//! to the run's state to its store, one append at a time and in the order
//! they were applied, each record bounded; it folds a snapshot in when
//! the records since the last one are as many as it folds in, or mostly
//! dead weight ([`Written`] keeps where the stored journal stands).

use std::sync::{Mutex, MutexGuard};

use crate::agent::store::{
    Append, CallState, Checkpoint, Record, StoreError, Version, SNAPSHOT_EVERY_RECORDS,
};
use crate::model::Message;

use super::durability::{Durability, OnStoreError, StoreStats};

/// The least dead weight (bytes of records that no longer add to the
/// state: what a compaction replaced, calls' passing states) worth a
/// snapshot.
const MIN_SNAPSHOT_BYTES: usize = 256 * 1024;

/// The run's state, locked (a panic elsewhere leaves it as it was).
pub(super) fn lock(state: &Mutex<Checkpoint>) -> MutexGuard<'_, Checkpoint> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies `records` to the run's state, in order.
pub(super) fn apply(state: &Mutex<Checkpoint>, records: Vec<Record>) {
    let mut state = lock(state);
    records.into_iter().for_each(|record| state.apply(record));
}

/// A durable run's writer: how it saves, and where its stored journal
/// stands.
pub(super) struct Writer {
    pub(super) durability: Durability,
    pub(super) written: tokio::sync::Mutex<Written>,
    /// The store's retries and outages, for the run's span.
    pub(super) stats: StoreStats,
}

/// Where the stored journal stands. Held across an append: appends go one
/// at a time, in the order their records were applied.
pub(super) struct Written {
    pub(super) version: Version,
    /// Applied, not yet stored: a closed step, which a resume would close
    /// again from its calls' states — it goes with the next append.
    pub(super) pending: Vec<Record>,
    /// An append failed and the run went on in memory.
    in_memory: bool,
    /// For the next append, when its last record is a call's start or
    /// the person's answer: what the call goes back to should it give up.
    pub(super) not_run: Option<CallState>,
    /// An append failed and the run stops: every later one fails the same
    /// way at once (the store is not waited for again).
    pub(super) broken: Option<StoreError>,
    /// How many records the last snapshot folds in, and how many were
    /// stored since.
    covered: u64,
    since_records: usize,
    /// What the stored journal holds that the state still needs (about
    /// the state's size), and what it holds that it no longer needs.
    live_bytes: usize,
    dead_bytes: usize,
}

impl Writer {
    /// One append: `pending` (applied already) and `records` (applied
    /// here, whatever happens to the append) encoded and bounded, the
    /// head, and a snapshot in their place when the records since the
    /// last one are as many as it folds in, or mostly dead weight — at a
    /// step boundary (`boundary`) only.
    pub(super) async fn save(
        &self,
        written: &mut Written,
        state: &Mutex<Checkpoint>,
        run_id: &str,
        pending: Vec<Record>,
        records: Vec<Record>,
        boundary: bool,
    ) -> Result<(), StoreError> {
        let store = &self.durability.store;
        let limit = store.max_record_bytes();
        let count = pending.len() + records.len();
        let mut bytes = Vec::with_capacity(count);
        let (mut live, mut dead) = (written.live_bytes, written.dead_bytes);
        let mut too_large = None;
        for record in pending.iter().chain(&records) {
            let encoded = record.to_bytes();
            match record {
                Record::Messages { .. }
                | Record::Continued { .. }
                | Record::Call {
                    state: CallState::Finished { .. },
                    ..
                } => live += encoded.len(),
                // What the history held is dead weight from here on.
                Record::Compacted { .. } => {
                    dead += std::mem::replace(&mut live, encoded.len());
                }
                _ => dead += encoded.len(),
            }
            if encoded.len() > limit && too_large.is_none() {
                too_large = Some(StoreError::TooLarge {
                    run_id: run_id.to_owned(),
                    record: describe(state, record),
                    bytes: encoded.len(),
                    limit,
                });
            }
            bytes.push(encoded);
        }
        apply(state, records);
        if let Some(err) = too_large {
            return Err(err);
        }
        if count == 0 {
            return Ok(());
        }
        // A snapshot when the records after the last one are as many as
        // it folds in (at least `SNAPSHOT_EVERY_RECORDS`), or when what
        // they hold is mostly dead weight: the snapshots' sizes grow
        // geometrically, so they cost a constant share of each record.
        let since_records = written.since_records + count;
        let many = since_records as u64 >= written.covered.max(SNAPSHOT_EVERY_RECORDS as u64);
        let heavy = dead > live.max(MIN_SNAPSHOT_BYTES);
        let fold = boundary && (many || heavy);
        let (status, snapshot) = {
            let state = lock(state);
            let snapshot = match fold {
                true => Some(state.to_bytes()?),
                false => None,
            };
            (state.status, snapshot)
        };
        let head = self.durability.head(status);
        let head_bytes = head.to_bytes();
        let append = Append {
            run_id,
            expected: written.version,
            head: &head,
            head_bytes: &head_bytes,
            records: &bytes,
            snapshot: snapshot.as_deref(),
        };
        let not_run = written.not_run.take();
        written.version = self.durability.append(append, &self.stats, not_run).await?;
        match snapshot {
            Some(snapshot) => {
                written.covered = written.version.0;
                written.since_records = 0;
                written.live_bytes = snapshot.len();
                written.dead_bytes = 0;
            }
            None => {
                written.since_records = since_records;
                written.live_bytes = live;
                written.dead_bytes = dead;
            }
        }
        Ok(())
    }
}

/// What a record over its bound holds, for its error.
fn describe(state: &Mutex<Checkpoint>, record: &Record) -> String {
    let tool = |id: &str| {
        lock(state)
            .step
            .iter()
            .find(|r| r.call.id == id)
            .map(|r| r.call.name.clone())
            .unwrap_or_default()
    };
    match record {
        Record::Call { id, state } => {
            format!("the {} state of call {id} ({})", state.as_str(), tool(id))
        }
        Record::Messages { messages } => match messages.as_slice() {
            [Message::Tool { tool_call_id, .. }, ..] => {
                format!("the result of call {tool_call_id}")
            }
            _ => format!("a record of {} messages", messages.len()),
        },
        Record::Step { calls } => format!("the step of {} calls", calls.len()),
        Record::StepPlanned { ids } => format!("the step of {} calls", ids.len()),
        other => format!("the {} record", other.kind()),
    }
}

impl Written {
    /// A journal stored up to `version`, `bytes` long, `since` records
    /// after its snapshot.
    pub(super) fn at(version: Version, bytes: usize, since: usize) -> Self {
        Written {
            version,
            pending: Vec::new(),
            in_memory: false,
            not_run: None,
            broken: None,
            covered: version.0.saturating_sub(since as u64),
            since_records: since,
            live_bytes: bytes,
            dead_bytes: 0,
        }
    }

    /// Whether appends still go to the store.
    pub(super) fn stores(&self) -> bool {
        !self.in_memory && self.broken.is_none()
    }

    /// What an append returns once the journal stopped storing.
    pub(super) fn failed_before(&self) -> Result<(), StoreError> {
        match &self.broken {
            Some(err) => Err(err.clone()),
            None => Ok(()),
        }
    }

    /// Keeps a failed append's consequence: a conflict (another process
    /// took the run) always breaks the journal; another failure does, or
    /// is warned about, as the agent is set.
    pub(super) fn outcome(
        &mut self,
        saved: Result<(), StoreError>,
        durability: &Durability,
    ) -> Result<(), StoreError> {
        match saved {
            Ok(()) => Ok(()),
            Err(err @ StoreError::Conflict { .. }) => {
                self.broken = Some(err.clone());
                Err(err)
            }
            Err(err) if durability.on_error == OnStoreError::Continue => {
                tracing::warn!(
                    error = %err,
                    "the run could not be saved; it goes on in memory and cannot be resumed past this point"
                );
                self.in_memory = true;
                Ok(())
            }
            Err(err) => {
                self.broken = Some(err.clone());
                Err(err)
            }
        }
    }
}
