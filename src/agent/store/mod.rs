//! Where agent runs outlive the process: a [`RunStore`] keeps each run's
//! [`Checkpoint`] — its history, the state of each tool call of the step
//! in flight, usage, steps — so a run can be resumed
//! ([`Agent::resume`](super::Agent::resume)) by this process after a
//! restart, or by another process sharing the store.
//!
//! # The contract
//!
//! Every checkpoint has a [`Version`]: [`save`](RunStore::save) writes only
//! if the stored version is the one the writer read (compare-and-set), and
//! returns the next. Two processes can therefore never both take a run:
//! the second one's write fails with [`StoreError::Conflict`]. A run that
//! is running is *held* by its process ([`Holder`]) until a lease passes
//! without a checkpoint; a run waiting for a person's decision
//! ([`RunStatus::Waiting`]) is held by nobody, and whichever process gets
//! the answer first takes it.
//!
//! Three stores implement it, and one contract test runs against each:
//!
//! | store | for | feature |
//! |---|---|---|
//! | [`MemoryStore`] | tests; one process that only needs suspend and resume | — |
//! | [`SqliteStore`](sqlite::SqliteStore) | one machine: an embedded file, zero setup (WAL) | `sqlite` |
//! | [`RedisStore`](redis::RedisStore) | replicas sharing one Redis (the compare-and-set in a Lua script) | `redis` |
//!
//! # The stored form
//!
//! JSON, `{"format": 1, …}`, at most [`MAX_CHECKPOINT_BYTES`] by default. A
//! checkpoint that does not parse is [`StoreError::Corrupt`], naming the
//! run and the problem; one written by a newer toolstack is
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
    CallRecord, CallState, Checkpoint, Holder, RunStatus, CHECKPOINT_FORMAT, MAX_CHECKPOINT_BYTES,
};
pub use self::memory::MemoryStore;

/// The version of a stored checkpoint: [`Version::NONE`] for a run not
/// stored yet, then one more at every save.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version(pub u64);

impl Version {
    /// No checkpoint stored yet: what the first save of a run expects.
    pub const NONE: Version = Version(0);

    /// The version after this one.
    pub fn next(self) -> Version {
        Version(self.0.saturating_add(1))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A checkpoint as loaded, with the version a save must expect.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// Its version.
    pub version: Version,
}

/// Keeps agent runs' checkpoints; see the [module docs](self).
///
/// Implementations encode with [`Checkpoint::to_bytes`] and decode with
/// [`Checkpoint::from_bytes`], so every store shares the format, its
/// bounds and its errors.
pub trait RunStore: Send + Sync + 'static {
    /// The run's checkpoint and version, or `None` if the store has none
    /// (never saved, deleted, or expired).
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>>;

    /// Writes `checkpoint` if the stored version is `expected`
    /// ([`Version::NONE`]: no checkpoint yet), and returns the new
    /// version; otherwise [`StoreError::Conflict`] with the version found.
    /// A checkpoint of a finished run may expire (the store's TTL).
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>>;

    /// The ids of the runs waiting for a decision ([`RunStatus::Waiting`]).
    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;

    /// Forgets the run; whether there was one.
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<S: RunStore + ?Sized> RunStore for Arc<S> {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        (**self).load(run_id)
    }

    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        (**self).save(checkpoint, expected)
    }

    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        (**self).waiting()
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).delete(run_id)
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
    /// The stored checkpoint does not parse.
    Corrupt {
        /// The run.
        run_id: String,
        /// What is wrong.
        why: String,
    },
    /// The checkpoint was written in a format this build does not know.
    UnknownFormat {
        /// The run.
        run_id: String,
        /// The format stored.
        found: u64,
        /// The newest format this build reads.
        supported: u64,
    },
    /// The checkpoint is larger than the store's bound.
    TooLarge {
        /// The run.
        run_id: String,
        /// Its size.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The store did not answer (down, too slow, an I/O error).
    Unavailable {
        /// What happened.
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
            StoreError::Corrupt { run_id, why } => {
                write!(f, "the checkpoint of run {run_id} is corrupt: {why}")
            }
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
                bytes,
                limit,
            } => write!(
                f,
                "the checkpoint of run {run_id} is {bytes} bytes, over the store's limit of {limit}"
            ),
            StoreError::Unavailable { why, .. } => write!(f, "the run store is unavailable: {why}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Unavailable {
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
