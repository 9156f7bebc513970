//! Where agent runs outlive the process: a [`RunStore`] keeps each run's
//! *journal* — its changes, appended as [`Record`]s the size of the change
//! (a message, a call's state, a result), with a snapshot of the whole
//! [`Checkpoint`] folded in now and then — so a run can be resumed
//! ([`Agent::resume`](super::Agent::resume)) by this process after a
//! restart, or by another process sharing the store.
//!
//! # The contract
//!
//! A run's [`Version`] is the number of records ever appended to it:
//! [`append`](RunStore::append) writes only if the stored version is the
//! one the writer read (compare-and-set), and returns the next. Two
//! processes can therefore never both take a run: the second one's append
//! fails with [`StoreError::Conflict`]. An append is atomic: its records,
//! the run's [`Head`] (status, holder, when written), its place among the
//! waiting runs and, when it carries one, the snapshot that replaces the
//! records before it — all or nothing. A run that is running is *held* by
//! its process ([`Holder`]) until a lease passes without an append; a run
//! waiting for a person's decision ([`RunStatus::Waiting`]) is held by
//! nobody, and whichever process gets the answer first takes it.
//!
//! Loading reads the snapshot and the records after it, and folds them
//! ([`Journal::fold`]). The agent folds a new snapshot in at a step
//! boundary when the records after the last one are as many as it folds
//! in (and at least [`SNAPSHOT_EVERY_RECORDS`]), or when they are mostly
//! dead weight (a compacted history); so a load reads one snapshot and at
//! most as many records again, the snapshots' sizes grow geometrically,
//! and an append costs the change however long the run.
//!
//! The waiting runs are counted in constant time
//! ([`waiting_count`](RunStore::waiting_count)) and expire by a time index
//! ([`expire_waiting`](RunStore::expire_waiting)); a finished run expires
//! after the store's TTL.
//!
//! Three stores implement it, and one contract test runs against each:
//!
//! | store | for | feature |
//! |---|---|---|
//! | [`MemoryStore`] | tests; one process that only needs suspend and resume | — |
//! | [`SqliteStore`](sqlite::SqliteStore) | one machine: an embedded file, zero setup (WAL); a records table, one transaction per append | `sqlite` |
//! | [`RedisStore`](redis::RedisStore) | replicas sharing one Redis: a list of records per run, the append fenced in one Lua script | `redis` |
//!
//! # The stored form
//!
//! JSON: each record on its own (at most [`MAX_RECORD_BYTES`] by default:
//! one message, one tool result — a run as a whole has no bound), the head
//! with the journal's format `{"format": 2, …}` (a journal of format 1,
//! which wrote a step's calls whole, reads as it did), a snapshot as a whole
//! checkpoint `{"format": 1, …}` — the form runs were stored in before the
//! journal, which therefore load as a snapshot with no records. A record
//! that does not parse is [`StoreError::Corrupt`], naming the run and the
//! record; a journal written by a newer toolstack is
//! [`StoreError::UnknownFormat`], naming both format versions. Neither
//! ever panics.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::{ErrorKind, ToolError};

pub(crate) mod checkpoint;
mod memory;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

pub use self::checkpoint::{
    CallRecord, CallState, Checkpoint, Head, Holder, Journal, Record, RunStatus, CHECKPOINT_FORMAT,
    JOURNAL_FORMAT, MAX_RECORD_BYTES,
};
pub use self::memory::MemoryStore;

/// The default time a store keeps a finished run: a day (every store's
/// `finished_ttl` setting starts here).
pub const DEFAULT_FINISHED_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// The fewest records after a run's snapshot (or from its start) for the
/// agent to fold a new snapshot in: it folds one when the records after
/// the last are this many and as many as it folds in — sooner when they
/// are mostly dead weight.
pub const SNAPSHOT_EVERY_RECORDS: usize = 8192;

/// The version of a stored run: [`Version::NONE`] for a run not stored
/// yet, then the number of records ever appended to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version(pub u64);

impl Version {
    /// No run stored yet: what the first append of a run expects.
    pub const NONE: Version = Version(0);

    /// The version after `records` more records.
    pub fn after(self, records: usize) -> Version {
        Version(self.0.saturating_add(records.max(1) as u64))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A run as loaded: its state, its version, and what was read.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Stored {
    /// The run's state: its snapshot with the records after it applied.
    pub checkpoint: Checkpoint,
    /// Its version: what the next append must expect.
    pub version: Version,
    /// The size of the snapshot read (0: none).
    pub snapshot_bytes: usize,
    /// How many records were read after it.
    pub records: usize,
    /// Their size.
    pub record_bytes: usize,
}

impl Stored {
    /// Whether this is the run as an append of `version` with `head` left
    /// it: its version, and the head's status, holder and time of writing
    /// (a later append by anyone would have moved the version; another
    /// writer at the same version wrote its own head). How an append whose
    /// answer was lost is recognised as landed.
    pub(crate) fn is_as_written(&self, version: Version, head: &Head) -> bool {
        let state = &self.checkpoint;
        self.version == version
            && state.status == head.status
            && state.holder == head.holder
            && state.saved_at_ms == head.saved_at_ms
    }
}

/// One append to a run's journal: see [`RunStore::append`].
#[derive(Debug, Clone, Copy)]
pub struct Append<'a> {
    /// The run.
    pub run_id: &'a str,
    /// The version the writer read ([`Version::NONE`]: a new run).
    pub expected: Version,
    /// The run's head after the append: its status, holder, when written.
    pub head: &'a Head,
    /// The head, encoded ([`Head::to_bytes`]).
    pub head_bytes: &'a [u8],
    /// The records, encoded ([`Record::to_bytes`]), each at most the
    /// store's [`max_record_bytes`](RunStore::max_record_bytes) (the
    /// writer checks, and names the record it refuses).
    pub records: &'a [Vec<u8>],
    /// A snapshot ([`Checkpoint::to_bytes`]) of the run *after* these
    /// records: it replaces every record stored so far, and these records
    /// are not stored.
    pub snapshot: Option<&'a [u8]>,
}

impl Append<'_> {
    /// The version after this append.
    pub fn version(&self) -> Version {
        self.expected.after(self.records.len())
    }

    /// The conflict when the stored version is `found`.
    pub fn conflict(&self, found: Version) -> StoreError {
        StoreError::Conflict {
            run_id: self.run_id.to_owned(),
            expected: self.expected,
            found,
        }
    }
}

/// Keeps agent runs' journals; see the [module docs](self).
///
/// Implementations decode through [`Journal::fold`], so every store shares
/// the format, its bounds and its errors.
pub trait RunStore: Send + Sync + 'static {
    /// The run's state and version, or `None` if the store has none
    /// (never stored, deleted, or expired).
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>>;

    /// Appends `append`'s records (or writes its snapshot) if the stored
    /// version is `append.expected`, with the head, the waiting index and
    /// the expiry of a finished run, atomically; returns the new version
    /// ([`Append::version`]); otherwise [`StoreError::Conflict`] with the
    /// version found.
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>>;

    /// How many runs wait for a decision ([`RunStatus::Waiting`]), counted
    /// in constant time.
    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// Forgets the runs that have waited for a decision since before
    /// `saved_before_ms` (ms since the Unix epoch), by a time index;
    /// returns how many.
    fn expire_waiting(&self, saved_before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>>;

    /// The ids of the runs waiting for a decision, at most `limit` of
    /// them, oldest first.
    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;

    /// Forgets the run; whether there was one.
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The bound on one record ([`MAX_RECORD_BYTES`] unless the store is
    /// set otherwise).
    fn max_record_bytes(&self) -> usize {
        MAX_RECORD_BYTES
    }
}

impl<S: RunStore + ?Sized> RunStore for Arc<S> {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        (**self).load(run_id)
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        (**self).append(append)
    }

    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        (**self).waiting_count()
    }

    fn expire_waiting(&self, saved_before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        (**self).expire_waiting(saved_before_ms)
    }

    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        (**self).waiting(limit)
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).delete(run_id)
    }

    fn max_record_bytes(&self) -> usize {
        (**self).max_record_bytes()
    }
}

type Source = Arc<dyn std::error::Error + Send + Sync>;

/// What went wrong with a store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// The run's stored version is not the one the writer read: another
    /// writer (another process) saved it first.
    Conflict {
        /// The run.
        run_id: String,
        /// The version the writer read.
        expected: Version,
        /// The version stored.
        found: Version,
    },
    /// A stored record, head or snapshot does not parse.
    Corrupt {
        /// The run.
        run_id: String,
        /// The record's sequence number (none: the head or the snapshot).
        record: Option<u64>,
        /// What is wrong.
        why: String,
    },
    /// The run was written in a format this build does not know.
    UnknownFormat {
        /// The run.
        run_id: String,
        /// The format stored.
        found: u64,
        /// The newest format this build reads.
        supported: u64,
    },
    /// A record is larger than the store's bound.
    TooLarge {
        /// The run.
        run_id: String,
        /// Which record: what it holds (`the result of call c1 (read)`),
        /// or its sequence number when read back.
        record: String,
        /// Its size.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The store did not answer (down, too slow, an I/O error), or
    /// answered that it cannot take the call for now (Redis loading its
    /// data or failing over, a locked or full SQLite file): an outage that
    /// passes, which an agent rides out
    /// ([`Agent::store_outage`](crate::agent::Agent::store_outage)).
    Unavailable {
        /// What happened.
        why: String,
        /// The underlying error.
        source: Option<Source>,
    },
    /// The store answered with an error that trying again would not
    /// change — a script error, a key holding the wrong type, a reply that
    /// does not parse: not an outage, so it is never retried.
    Failed {
        /// What the store said.
        why: String,
        /// The underlying error.
        source: Option<Source>,
    },
}

impl StoreError {
    /// The store did not answer.
    pub fn unavailable(why: impl Into<String>) -> Self {
        StoreError::Unavailable {
            why: why.into(),
            source: None,
        }
    }

    /// The store did not answer, because of `source`.
    pub fn unavailable_from(
        why: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Unavailable {
            why: why.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The store refused the call for good, because of `source`.
    pub fn failed_from(
        why: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Failed {
            why: why.into(),
            source: Some(Arc::new(source)),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Conflict {
                run_id,
                expected,
                found,
            } => write!(
                f,
                "run {run_id} was saved by another writer (version {found}, expected {expected})"
            ),
            StoreError::Corrupt {
                run_id,
                record: Some(seq),
                why,
            } => write!(f, "record {seq} of run {run_id} is corrupt: {why}"),
            StoreError::Corrupt {
                run_id,
                record: None,
                why,
            } => write!(f, "the checkpoint of run {run_id} is corrupt: {why}"),
            StoreError::UnknownFormat {
                run_id,
                found,
                supported,
            } => write!(
                f,
                "the checkpoint of run {run_id} is in format {found}, newer than this build reads (up to {supported})"
            ),
            StoreError::TooLarge {
                run_id,
                record,
                bytes,
                limit,
            } => write!(
                f,
                "{record} of run {run_id} is {bytes} bytes, over the store's limit of {limit} for one record"
            ),
            StoreError::Unavailable { why, .. } => write!(f, "the run store is unavailable: {why}"),
            StoreError::Failed { why, .. } => {
                write!(f, "the run store failed (not retried): {why}")
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Unavailable {
                source: Some(source),
                ..
            }
            | StoreError::Failed {
                source: Some(source),
                ..
            } => Some(&**source),
            _ => None,
        }
    }
}

impl From<StoreError> for ToolError {
    fn from(err: StoreError) -> ToolError {
        let kind = match &err {
            StoreError::Unavailable { .. } => ErrorKind::Unavailable,
            StoreError::Conflict { .. } => ErrorKind::Denied,
            _ => ErrorKind::Failed,
        };
        ToolError::new(kind, err.to_string()).with_source(err)
    }
}
