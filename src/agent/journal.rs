//! The one writer of a run's state: [`Journal`]. Every change — history
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
//! it; without a store the records are only applied.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::model::{Message, ToolCall, Usage};
use crate::ToolError;

use super::resume::ResumeError;
use super::running::SessionGuard;
use super::store::checkpoint::now_ms;
use super::store::{
    Append, CallState, Checkpoint, Head, Holder, Record, RunStatus, RunStore, StoreError, Stored,
    Version, JOURNAL_FORMAT, SNAPSHOT_EVERY_RECORDS,
};

/// The error a run reports when a save failed: `Unavailable` for a store
/// that did not answer, `Denied` when another process took the run.
pub(super) fn run_error(err: StoreError) -> ToolError {
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
    /// The run ends ([`StopReason::StoreFailed`](super::StopReason::StoreFailed),
    /// after an [`AgentEvent::Error`](super::AgentEvent::Error) with the
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
pub(super) struct Durability {
    pub(super) store: Arc<dyn RunStore>,
    pub(super) process: Arc<str>,
    pub(super) lease: Duration,
    pub(super) timeout: Duration,
    pub(super) on_error: OnStoreError,
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
    fn head(&self, status: RunStatus) -> Head {
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
    async fn append(&self, append: Append<'_>) -> Result<Version, StoreError> {
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.store.append(append)).await {
            Ok(appended) => appended,
            Err(_) => Err(StoreError::unavailable(format!(
                "run {} was not saved within {timeout:?}",
                append.run_id
            ))),
        }
    }
}

/// The default lease of a running run: 60 s without an append.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The default bound on one append to the store: 5 s.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(5);

/// The least dead weight (bytes of records that no longer add to the
/// state: what a compaction replaced, calls' passing states) worth a
/// snapshot.
const MIN_SNAPSHOT_BYTES: usize = 256 * 1024;

/// A run's state and, with a store, the writer of its journal.
pub(super) struct Journal {
    run_id: Arc<str>,
    state: Mutex<Checkpoint>,
    writer: Option<Writer>,
    /// A session's run: its place among the sessions running in this
    /// process, given up when the run ends (or the journal is dropped).
    session: Mutex<Option<SessionGuard>>,
}

struct Writer {
    durability: Durability,
    written: tokio::sync::Mutex<Written>,
}

/// Where the stored journal stands. Held across an append: appends go one
/// at a time, in the order their records were applied.
struct Written {
    version: Version,
    /// Applied, not yet stored: a closed step, which a resume would close
    /// again from its calls' states — it goes with the next append.
    pending: Vec<Record>,
    /// An append failed and the run went on in memory.
    in_memory: bool,
    /// An append failed and the run stops: every later one fails the same
    /// way at once (the store is not waited for again).
    broken: Option<StoreError>,
    /// How many records the last snapshot folds in, and how many were
    /// stored since.
    covered: u64,
    since_records: usize,
    /// What the stored journal holds that the state still needs (about
    /// the state's size), and what it holds that it no longer needs.
    live_bytes: usize,
    dead_bytes: usize,
}

impl Journal {
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
            }
        });
        state.messages = Arc::new(messages);
        Journal {
            run_id,
            state: Mutex::new(state),
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
        let Some(stored) = Journal::load(&durability, run_id).await? else {
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
        let journal = Journal::stored(durability, run_id, stored);
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
        tokio::time::timeout(durability.timeout, durability.store.load(run_id))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "run {run_id} was not loaded within {:?}",
                    durability.timeout
                )))
            })
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
        Journal {
            run_id: Arc::from(run_id),
            state: Mutex::new(checkpoint),
            writer: Some(Writer {
                durability,
                written: tokio::sync::Mutex::new(Written::at(
                    version,
                    snapshot_bytes + record_bytes,
                    records,
                )),
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        let Some(writer) = &self.writer else {
            self.apply(records);
            return Ok(());
        };
        let mut written = writer.written.lock().await;
        if !written.stores() {
            self.apply(records);
            return written.failed_before();
        }
        let pending = std::mem::take(&mut written.pending);
        let saved = self
            .save(writer, &mut written, pending, records, boundary)
            .await;
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
        self.save(writer, &mut written, pending, records, false)
            .await
    }

    fn apply(&self, records: Vec<Record>) {
        let mut state = self.state();
        records.into_iter().for_each(|record| state.apply(record));
    }

    /// One append: `pending` (applied already) and `records` (applied
    /// here, whatever happens to the append) encoded and bounded, the
    /// head, and a snapshot in their place when the records since the
    /// last one are as many as it folds in, or mostly dead weight.
    async fn save(
        &self,
        writer: &Writer,
        written: &mut Written,
        pending: Vec<Record>,
        records: Vec<Record>,
        boundary: bool,
    ) -> Result<(), StoreError> {
        let store = &writer.durability.store;
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
                    run_id: self.run_id.to_string(),
                    record: self.describe(record),
                    bytes: encoded.len(),
                    limit,
                });
            }
            bytes.push(encoded);
        }
        self.apply(records);
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
            let state = self.state();
            let snapshot = match fold {
                true => Some(state.to_bytes()?),
                false => None,
            };
            (state.status, snapshot)
        };
        let head = writer.durability.head(status);
        let head_bytes = head.to_bytes();
        let append = Append {
            run_id: &self.run_id,
            expected: written.version,
            head: &head,
            head_bytes: &head_bytes,
            records: &bytes,
            snapshot: snapshot.as_deref(),
        };
        written.version = writer.durability.append(append).await?;
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

    /// What a record over its bound holds, for its error.
    fn describe(&self, record: &Record) -> String {
        let tool = |id: &str| {
            self.state()
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
            other => format!("the {} record", other.kind()),
        }
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
        let saved = self
            .save(writer, &mut written, pending, Vec::new(), false)
            .await;
        written.outcome(saved, &writer.durability)
    }

    /// A model's answer: the message (extending the last one when it
    /// `continues` an answer the provider paused), the counts, and the
    /// step it plans (its calls, each planned) when it calls tools —
    /// stored before any of them starts.
    pub(super) async fn answered(
        &self,
        message: Message,
        continues: bool,
        counts: Counts,
        calls: Vec<ToolCall>,
    ) -> Result<(), StoreError> {
        let answer = match continues {
            true => Record::Continued { message },
            false => Record::Messages {
                messages: vec![message],
            },
        };
        let mut records = vec![answer, counts.record()];
        if !calls.is_empty() {
            records.push(Record::Step { calls });
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
        let record = Record::Call {
            id: id.to_owned(),
            state,
        };
        self.record(vec![record], false).await
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

    /// The run ended, with these counts.
    pub(super) async fn end(&self, status: RunStatus, counts: Counts) -> Result<(), StoreError> {
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

    /// What the run has counted so far.
    pub(super) fn counts(&self) -> Counts {
        Counts::of(&self.state())
    }

    /// The calls of the step in flight, with their states.
    pub(super) fn step(&self) -> Vec<super::store::CallRecord> {
        self.state().step.clone()
    }
}

/// Model turns taken, tool calls made, tokens used: what a run counts.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    pub(super) steps: usize,
    pub(super) tool_calls: usize,
    pub(super) usage: Option<Usage>,
}

impl Counts {
    fn record(self) -> Record {
        Record::Counts {
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    /// The counts of a stored run.
    pub(super) fn of(checkpoint: &Checkpoint) -> Self {
        Counts {
            steps: checkpoint.steps,
            tool_calls: checkpoint.tool_calls,
            usage: checkpoint.usage,
        }
    }
}

impl Written {
    /// A journal stored up to `version`, `bytes` long, `since` records
    /// after its snapshot.
    fn at(version: Version, bytes: usize, since: usize) -> Self {
        Written {
            version,
            pending: Vec::new(),
            in_memory: false,
            broken: None,
            covered: version.0.saturating_sub(since as u64),
            since_records: since,
            live_bytes: bytes,
            dead_bytes: 0,
        }
    }

    /// Whether appends still go to the store.
    fn stores(&self) -> bool {
        !self.in_memory && self.broken.is_none()
    }

    /// What an append returns once the journal stopped storing.
    fn failed_before(&self) -> Result<(), StoreError> {
        match &self.broken {
            Some(err) => Err(err.clone()),
            None => Ok(()),
        }
    }

    /// Keeps a failed append's consequence: a conflict (another process
    /// took the run) always breaks the journal; another failure does, or
    /// is warned about, as the agent is set.
    fn outcome(
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
