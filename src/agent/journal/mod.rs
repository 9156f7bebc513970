//! The one writer of a run's state: [`RunJournal`]. Every change — history
//! appended, a step planned, a call asked, decided, started, finished, a
//! step closed, the counts, the status — is a typed [`Record`] applied to
//! the run's state here and, with a store, appended to its journal in the
//! same order, the size of the change. A snapshot of the whole state is
//! folded in when the records since the last one are as many as it folds
//! in, or mostly dead weight, so a save
//! costs the change however long the run, and a load reads a bounded
//! number of records.
//!
//! The agent loop, the approval sink and [`Agent::resume`](super::Agent::resume) all go through
//! it; without a store the records are only applied. What the run counts
//! is the journal's too: the model turn in flight is counted here from its
//! ask ([`RunJournal::turn_started`], [`RunJournal::used`]) and recorded with
//! its answer.
//!
//! How runs are saved is [`Durability`] (`durability`); the appends, in
//! order, and when a snapshot is folded in, the [`Writer`](writer::Writer)
//! (`writer`); the counts, `counts`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::model::{Message, Usage};

use super::resume::ResumeError;
use super::running_sessions::SessionGuard;
use super::store::checkpoint::now_ms;
use super::store::{
    CallRecord, CallState, Checkpoint, Record, RunStatus, StoreError, Stored, Version,
};

mod backoff;
mod counts;
mod durability;
mod release;
mod writer;

use self::counts::TurnInFlight;
use self::writer::{Writer, Written};

pub(super) use self::counts::Counts;
#[cfg(feature = "http")]
pub(crate) use self::durability::RideOut;
pub(crate) use self::durability::StoreStats;
pub(super) use self::durability::{run_error, Durability};
pub use self::durability::{
    OnStoreError, DEFAULT_CHECKPOINT_TIMEOUT, DEFAULT_LEASE, DEFAULT_STORE_OUTAGE,
};

/// A run's state and, with a store, the writer of its journal.
pub(super) struct RunJournal {
    run_id: Arc<str>,
    state: Mutex<Checkpoint>,
    /// The model turn in flight: counted, not recorded yet.
    turn: Mutex<TurnInFlight>,
    writer: Option<Writer>,
    /// A session's run: its place among the sessions running in this
    /// process, given up when the run ends (or the journal is dropped).
    session: Mutex<Option<SessionGuard>>,
}

impl RunJournal {
    /// A new run starting from `messages`; nothing is stored until
    /// [`begin`](Self::begin) (or the first append).
    pub(super) fn fresh(
        run_id: Arc<str>,
        messages: Vec<Message>,
        durability: Option<Durability>,
    ) -> Self {
        let mut state = Checkpoint::new(&*run_id);
        let writer = durability.map(|durability| {
            let mut written = Written::at(Version::NONE, 0, 0);
            // Applied now, stored by `begin`.
            written.pending = vec![
                Record::Status {
                    status: RunStatus::Running,
                },
                Record::Messages {
                    messages: messages.clone(),
                },
            ];
            Writer {
                durability,
                written: tokio::sync::Mutex::new(written),
                stats: StoreStats::default(),
            }
        });
        state.messages = Arc::new(messages);
        RunJournal {
            run_id,
            state: Mutex::new(state),
            turn: Mutex::default(),
            writer,
            session: Mutex::new(None),
        }
    }

    /// Takes the stored run `run_id` for this process: loads it, refuses
    /// one that ended, waited past `max_age`, or another process holds,
    /// and appends its status as running, held by this process — strictly
    /// (whatever [`OnStoreError`] says: a run taken in memory only could be
    /// taken twice).
    pub(super) async fn take(
        durability: Durability,
        run_id: &str,
        max_age: Option<Duration>,
    ) -> Result<Self, ResumeError> {
        let Some(stored) = RunJournal::load(&durability, run_id).await? else {
            return Err(ResumeError::NotFound {
                run_id: run_id.to_owned(),
            });
        };
        let checkpoint = &stored.checkpoint;
        if let RunStatus::Done { stop } = checkpoint.status {
            return Err(ResumeError::Finished {
                run_id: run_id.to_owned(),
                stop,
            });
        }
        if let Some(age) = max_age {
            let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            if checkpoint.status == RunStatus::Waiting
                && now_ms().saturating_sub(checkpoint.saved_at_ms) > age
            {
                return Err(ResumeError::Expired {
                    run_id: run_id.to_owned(),
                });
            }
        }
        if checkpoint.held_by_other(&durability.process, now_ms()) {
            return Err(ResumeError::Held {
                run_id: run_id.to_owned(),
                process: checkpoint.holder.clone().map(|holder| holder.process),
            });
        }
        let journal = RunJournal::stored(durability, run_id, stored);
        // Take it: the first process to append at this version holds it.
        journal
            .append(vec![Record::Status {
                status: RunStatus::Running,
            }])
            .await?;
        Ok(journal)
    }

    /// The stored run `run_id`, within the store's timeout.
    pub(super) async fn load(
        durability: &Durability,
        run_id: &str,
    ) -> Result<Option<Stored>, StoreError> {
        durability.load(run_id, &StoreStats::default()).await
    }

    /// The journal of a stored run, as loaded; nothing appended yet.
    pub(super) fn stored(durability: Durability, run_id: &str, stored: Stored) -> Self {
        let Stored {
            checkpoint,
            version,
            snapshot_bytes,
            records,
            record_bytes,
            ..
        } = stored;
        RunJournal {
            run_id: Arc::from(run_id),
            state: Mutex::new(checkpoint),
            turn: Mutex::default(),
            writer: Some(Writer {
                durability,
                written: tokio::sync::Mutex::new(Written::at(
                    version,
                    snapshot_bytes + record_bytes,
                    records,
                )),
                stats: StoreStats::default(),
            }),
            session: Mutex::new(None),
        }
    }

    /// A session's next run: the stored conversation (a run that ended,
    /// or was left between steps) taken for this process, its counts
    /// started again, and `messages` added — strictly, in one append at
    /// the version read, so of two runs taking it at once one fails
    /// ([`StoreError::Conflict`]). A new session's journal
    /// ([`fresh`](Self::fresh)) is stored here the same way.
    pub(super) async fn open_session(
        &self,
        messages: Vec<Message>,
        guard: SessionGuard,
    ) -> Result<(), StoreError> {
        let records = match self.writer.as_ref().map(|writer| &writer.written) {
            Some(written) if written.lock().await.version != Version::NONE => vec![
                Record::Status {
                    status: RunStatus::Running,
                },
                Counts::default().record(),
                Record::Messages { messages },
            ],
            // A new session: `fresh` put its first records pending.
            _ => Vec::new(),
        };
        self.append(records).await?;
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
        Ok(())
    }

    /// The run's id.
    pub(super) fn run_id(&self) -> &Arc<str> {
        &self.run_id
    }

    /// Whether the run is saved in a store.
    pub(super) fn is_durable(&self) -> bool {
        self.writer.is_some()
    }

    fn state(&self) -> MutexGuard<'_, Checkpoint> {
        writer::lock(&self.state)
    }

    fn turn(&self) -> MutexGuard<'_, TurnInFlight> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the history out of a run that ended (its events' last), so
    /// that it is not copied.
    pub(super) fn take_messages(&self) -> Arc<Vec<Message>> {
        std::mem::take(&mut self.state().messages)
    }

    /// The history, shared (the model request's copy).
    pub(super) fn messages(&self) -> Arc<Vec<Message>> {
        Arc::clone(&self.state().messages)
    }

    /// Applies `records` and appends them (with any pending ones) to the
    /// store, in one append; at a step boundary (`boundary`) a snapshot
    /// may take their place. Without a store they are only applied.
    async fn record(&self, records: Vec<Record>, boundary: bool) -> Result<(), StoreError> {
        self.record_else(records, boundary, None).await
    }

    /// [`record`](Self::record), with what the call whose record is the
    /// last of `records` goes back to should this append give up
    /// (`not_run`; see `release.rs`).
    async fn record_else(
        &self,
        records: Vec<Record>,
        boundary: bool,
        not_run: Option<CallState>,
    ) -> Result<(), StoreError> {
        let Some(writer) = &self.writer else {
            self.apply(records);
            return Ok(());
        };
        let mut written = writer.written.lock().await;
        if !written.stores() {
            self.apply(records);
            return written.failed_before();
        }
        written.not_run = not_run;
        let pending = std::mem::take(&mut written.pending);
        let saved = writer
            .save(
                &mut written,
                &self.state,
                &self.run_id,
                pending,
                records,
                boundary,
            )
            .await;
        // Only for this append (one that stored nothing leaves it).
        written.not_run = None;
        written.outcome(saved, &writer.durability)
    }

    /// Applies `records` and appends them, strictly: a failure is the
    /// caller's, whatever [`OnStoreError`] says.
    async fn append(&self, records: Vec<Record>) -> Result<(), StoreError> {
        let Some(writer) = &self.writer else {
            self.apply(records);
            return Ok(());
        };
        let mut written = writer.written.lock().await;
        if let Some(err) = &written.broken {
            return Err(err.clone());
        }
        let pending = std::mem::take(&mut written.pending);
        writer
            .save(
                &mut written,
                &self.state,
                &self.run_id,
                pending,
                records,
                false,
            )
            .await
    }

    fn apply(&self, records: Vec<Record>) {
        writer::apply(&self.state, records);
    }

    /// A new run's first append: its status and the conversation it
    /// starts from (while the model gives its first answer); nothing for
    /// a run stored already.
    pub(super) async fn begin(&self) -> Result<(), StoreError> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        let mut written = writer.written.lock().await;
        if written.version != Version::NONE || !written.stores() {
            return written.failed_before();
        }
        let pending = std::mem::take(&mut written.pending);
        let saved = writer
            .save(
                &mut written,
                &self.state,
                &self.run_id,
                pending,
                Vec::new(),
                false,
            )
            .await;
        written.outcome(saved, &writer.durability)
    }

    /// A model turn is asked: counted from now (a turn asked again after
    /// a break is the same turn).
    pub(super) fn turn_started(&self) {
        self.turn().asked = true;
    }

    /// The model turn in flight reported `usage`.
    pub(super) fn used(&self, usage: Usage) {
        self.turn().used(usage);
    }

    /// The counts so far with the turn in flight's, which are recorded
    /// from here on.
    fn counted(&self) -> Counts {
        let recorded = Counts::of(&self.state());
        recorded.with(&std::mem::take(&mut *self.turn()))
    }

    /// A model's answer: the message (extending the last one when it
    /// `continues` an answer the provider paused), the counts with its
    /// turn, and the step it plans when it calls tools — the calls of the
    /// answer with the ids `planned`, each planned and counted as made —
    /// stored before any of them starts.
    pub(super) async fn answered(
        &self,
        message: Message,
        continues: bool,
        planned: Vec<String>,
    ) -> Result<(), StoreError> {
        let answer = match continues {
            true => Record::Continued { message },
            false => Record::Messages {
                messages: vec![message],
            },
        };
        let mut counts = self.counted();
        counts.tool_calls += planned.len();
        let mut records = vec![answer, counts.record()];
        if !planned.is_empty() {
            records.push(Record::StepPlanned { ids: planned });
        }
        self.record(records, true).await
    }

    /// Messages added to the history outside a step (the results of calls
    /// refused before one).
    pub(super) async fn messages_added(&self, messages: Vec<Message>) -> Result<(), StoreError> {
        self.record(vec![Record::Messages { messages }], false)
            .await
    }

    /// The history was compacted: `messages` stands for it from here on
    /// (what it replaced is dead weight; a snapshot soon takes its place).
    pub(super) async fn compacted(&self, messages: Vec<Message>) -> Result<(), StoreError> {
        self.record(vec![Record::Compacted { messages }], true)
            .await
    }

    /// A tool search loaded `names`: stored before the search's result,
    /// so a resumed run shows the model what it found.
    pub(super) async fn tools_loaded(&self, names: Vec<String>) -> Result<(), StoreError> {
        self.record(vec![Record::ToolsLoaded { names }], false)
            .await
    }

    /// The deferred tools loaded so far.
    pub(super) fn loaded_tools(&self) -> Vec<String> {
        self.state().loaded_tools.clone()
    }

    /// A call of the step got further.
    pub(super) async fn call(&self, id: &str, state: CallState) -> Result<(), StoreError> {
        self.call_else(id, state, None).await
    }

    /// A call of the step got further, to a state the tool runs only once
    /// it is stored (its start; the person's answer): should the append
    /// give up, the call did not run, and once the store is back the
    /// release of the run puts it back to `before` — planned, or waiting
    /// for the answer — where a record that landed after all would read
    /// "may have run". See `release.rs`.
    pub(super) async fn call_else(
        &self,
        id: &str,
        state: CallState,
        before: Option<CallState>,
    ) -> Result<(), StoreError> {
        let record = Record::Call {
            id: id.to_owned(),
            state,
        };
        self.record_else(vec![record], false, before).await
    }

    /// The step ended: its results join the history now; the record goes
    /// with the next append (a resume would close the step again from
    /// its calls' finished states).
    pub(super) async fn close_step(&self) {
        let Some(writer) = &self.writer else {
            self.state().apply(Record::StepClosed);
            return;
        };
        let mut written = writer.written.lock().await;
        self.state().apply(Record::StepClosed);
        if written.stores() {
            written.pending.push(Record::StepClosed);
        }
    }

    /// The run ended: its counts (a turn in flight's too) and `status`.
    pub(super) async fn end(&self, status: RunStatus) -> Result<(), StoreError> {
        let counts = self.counted();
        // No snapshot: a run that ended is rarely read again.
        let ended = self
            .record(vec![counts.record(), Record::Status { status }], false)
            .await;
        // A session's next run may begin.
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        ended
    }

    /// The run waits for a decision, held by nobody: strictly.
    pub(super) async fn suspend(&self) -> Result<(), StoreError> {
        self.append(vec![Record::Status {
            status: RunStatus::Waiting,
        }])
        .await
    }

    /// What the run has counted so far, the turn in flight included.
    pub(super) fn counts(&self) -> Counts {
        let recorded = Counts::of(&self.state());
        recorded.with(&self.turn())
    }

    /// The store's retries and the outages ridden out, in ms (none without
    /// a store).
    pub(super) fn store_stats(&self) -> (u64, u64) {
        self.writer.as_ref().map_or((0, 0), |writer| {
            (writer.stats.retries(), writer.stats.outage_ms())
        })
    }

    /// The calls of the step in flight, with their states.
    pub(super) fn step(&self) -> Vec<CallRecord> {
        self.state().step.clone()
    }
}
