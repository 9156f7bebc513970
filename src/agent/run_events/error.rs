//! [`RunEventsError`]: why a run's event log refused or failed a call.

use std::fmt;

use crate::agent::store::StoreError;

/// Why a [`RunEvents`](super::RunEvents) call was refused or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEventsError {
    /// The run has as many events as the log keeps for a run: the event
    /// was not written.
    TooManyEvents {
        /// The run.
        run_id: String,
        /// The bound ([`MAX_RUN_EVENTS`](super::MAX_RUN_EVENTS) unless set).
        limit: u64,
    },
    /// The run has as many writers (parts) as the log counts attempts
    /// for: the part was not begun.
    TooManyParts {
        /// The run.
        run_id: String,
        /// The bound ([`MAX_RUN_PARTS`](super::MAX_RUN_PARTS)).
        limit: u64,
    },
    /// The event's record, as JSON, is larger than the log takes: it was
    /// not written.
    TooLarge {
        /// The run.
        run_id: String,
        /// What the record holds ([`EventRecord::kind`](super::EventRecord::kind)).
        record: &'static str,
        /// Its size in bytes.
        bytes: usize,
        /// The bound ([`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES) unless set).
        limit: usize,
    },
    /// A run id or a part name is longer than the log takes.
    NameTooLong {
        /// `run id` or `part`.
        what: &'static str,
        /// Its length in bytes.
        bytes: usize,
        /// The bound ([`MAX_NAME_BYTES`](super::MAX_NAME_BYTES)).
        limit: usize,
    },
    /// The run's events were ended ([`RunEvents::end`](super::RunEvents::end)):
    /// an event not written before cannot be written now.
    Ended {
        /// The run.
        run_id: String,
    },
    /// The cursor is not one this log gave.
    BadCursor {
        /// The cursor as given.
        cursor: String,
    },
    /// The record could not be written as JSON (a JSON item whose text is
    /// not JSON).
    Unserializable {
        /// The run.
        run_id: String,
        /// What serde said.
        why: String,
    },
    /// A stored entry does not read back as a record (written by a newer
    /// version, or damaged). Reading again after `cursor` skips it.
    Corrupt {
        /// The run.
        run_id: String,
        /// The entry's cursor, when known.
        cursor: Option<super::Cursor>,
        /// What is wrong.
        why: String,
    },
    /// The store under the log did not answer, or failed: an outage that
    /// passes ([`StoreError::Unavailable`]) or not ([`StoreError::Failed`]).
    Store(StoreError),
}

impl RunEventsError {
    /// Whether trying again later may succeed: the store was out.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RunEventsError::Store(StoreError::Unavailable { .. }))
    }
}

impl fmt::Display for RunEventsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunEventsError::TooManyEvents { run_id, limit } => write!(
                f,
                "run {run_id} has {limit} events, the most its event log keeps; the event was not written"
            ),
            RunEventsError::TooManyParts { run_id, limit } => write!(
                f,
                "run {run_id} has {limit} parts, the most its event log counts attempts for; the part was not begun"
            ),
            RunEventsError::TooLarge {
                run_id,
                record,
                bytes,
                limit,
            } => write!(
                f,
                "a {record} event of run {run_id} is {bytes} bytes as JSON, more than the event log's bound of {limit}; it was not written"
            ),
            RunEventsError::NameTooLong { what, bytes, limit } => write!(
                f,
                "a {what} of {bytes} bytes is longer than the event log's bound of {limit}"
            ),
            RunEventsError::Ended { run_id } => write!(
                f,
                "the events of run {run_id} have ended; no more can be written"
            ),
            RunEventsError::BadCursor { cursor } => {
                write!(f, "{cursor:?} is not a cursor of this event log")
            }
            RunEventsError::Unserializable { run_id, why } => {
                write!(f, "an event of run {run_id} does not serialize: {why}")
            }
            RunEventsError::Corrupt {
                run_id,
                cursor,
                why,
            } => match cursor {
                Some(cursor) => write!(
                    f,
                    "the event of run {run_id} at {cursor} does not read back: {why}"
                ),
                None => write!(f, "an event of run {run_id} does not read back: {why}"),
            },
            RunEventsError::Store(err) => write!(f, "the event log's store: {err}"),
        }
    }
}

impl std::error::Error for RunEventsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunEventsError::Store(err) => Some(err),
            _ => None,
        }
    }
}

impl From<StoreError> for RunEventsError {
    fn from(err: StoreError) -> Self {
        RunEventsError::Store(err)
    }
}
