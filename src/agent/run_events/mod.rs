//! A run's events, shared: a log that the processes running a durable
//! run write its [`AgentEvent`](super::AgentEvent)s to, and that a front
//! end in any other process reads them from, in one order.
//!
//! A run on Restate ([`agent::restate`](super::restate)) does not run in
//! the process that serves its client: its steps run wherever Restate
//! sends them, and each tool call may run on yet another process. Their
//! events get out through this log: each writer appends what it streams,
//! as an [`EventRecord`] (the event's lossless JSON form), and a reader —
//! the chat endpoint mapping events to its stream — reads the run's
//! events in the log's order and turns them back into events.
//!
//! # The contract
//!
//! | call | what it does |
//! |---|---|
//! | [`begin`](RunEvents::begin)`(run, part)` | counts an attempt of a part of the run: `1` the first time, `2` the next… atomically across processes |
//! | [`write`](RunEvents::write)`(run, key, record)` | appends the record once: a key written before is [`Written::Duplicate`] and changes nothing |
//! | [`end`](RunEvents::end)`(run)` | marks the run's events ended: readers learn that nothing follows; later writes of new keys are refused |
//! | [`read`](RunEvents::read)`(run, after, max, wait)` | the events after a [`Cursor`], in the log's order, and whether the run ended after them; waits up to `wait` for one |
//!
//! * **Many writers, one order.** The log orders the events as they are
//!   appended, whoever writes them; every reader of a run reads the same
//!   sequence.
//! * **Idempotent writes.** Each event is written under an [`EventKey`]:
//!   `part` names the writer (`run`, `turn 3`, `call c1`), `attempt` the
//!   attempt of that part ([`begin`](RunEvents::begin)'s count), `n` the
//!   event's number in that part's attempt. A step executed again after a
//!   crash (Restate replays it) writes its events again under the same
//!   keys; they appear once. A part tried again *as a new attempt* writes
//!   under its new attempt number: its events are new — what its first
//!   attempt had streamed stays, and the writer says that it is void
//!   first (an [`AgentEvent::TurnDiscarded`](super::AgentEvent::TurnDiscarded)),
//!   which is the writer's part, not the log's.
//! * **End.** After [`end`](RunEvents::end), a reader that has read every
//!   event reads [`Page::ended`]; a write of a key written before is
//!   still a duplicate, a new one is [`RunEventsError::Ended`].
//! * **Expiry.** A run's events, attempt counts and written keys are
//!   forgotten [`EVENTS_TTL`] (an hour, unless set) after the run's last
//!   write, begin or end; a run that waits longer than that (for a
//!   person's approval) starts an empty log when it goes on. A run with
//!   no events — not written yet, or forgotten — reads as empty and not
//!   ended.
//!
//! # Bounds
//!
//! | bound | default | past it |
//! |---|---|---|
//! | events per run | [`MAX_RUN_EVENTS`] (100,000) | [`RunEventsError::TooManyEvents`] |
//! | bytes per record, as JSON | [`MAX_EVENT_BYTES`] (16 MiB, as a run store's record) | [`RunEventsError::TooLarge`] |
//! | parts per run | [`MAX_RUN_PARTS`] (100,000) | [`RunEventsError::TooManyParts`] |
//! | a run id or part name | [`MAX_NAME_BYTES`] (1 KiB) | [`RunEventsError::NameTooLong`] |
//! | events per read | [`MAX_READ_EVENTS`] (1,000) | the read returns that many; read on |
//!
//! A run streams an event per text delta, so a long run of many turns
//! writes thousands; a hundred thousand is more than a normal run writes.
//! The largest record is the run's last, [`AgentEvent::Done`](super::AgentEvent::Done), which
//! holds the whole conversation.
//!
//! # Logs
//!
//! | log | for | feature |
//! |---|---|---|
//! | [`MemoryRunEvents`] | tests; one process | — |
//! | `RedisRunEvents` | processes sharing a Redis: a Redis Stream per run, each write one Lua script | `redis` |
//!
//! ```
//! use std::time::Duration;
//! use toolstack::agent::run_events::{EventKey, EventRecord, MemoryRunEvents, RunEvents, Written};
//! use toolstack::agent::AgentEvent;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), toolstack::agent::run_events::RunEventsError> {
//! let log = MemoryRunEvents::new();
//! let attempt = log.begin("run-1", "turn 1").await?;
//! assert_eq!(attempt, 1);
//! let hello = EventRecord::from(&AgentEvent::TextDelta("Hello".into()));
//! let key = EventKey::new("turn 1", attempt, 0);
//! assert!(matches!(log.write("run-1", key, &hello).await?, Written::Appended(_)));
//! // Replayed after a crash: written once.
//! assert_eq!(log.write("run-1", key, &hello).await?, Written::Duplicate);
//! log.end("run-1").await?;
//!
//! let page = log.read("run-1", None, 100, Duration::ZERO).await?;
//! assert_eq!(page.events.len(), 1);
//! assert!(page.ended);
//! // A client resumes after the last cursor it saw.
//! let (cursor, _) = &page.events[0];
//! let rest = log.read("run-1", Some(cursor), 100, Duration::ZERO).await?;
//! assert!(rest.events.is_empty() && rest.ended);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

mod cursor;
mod error;
mod memory;
mod record;
#[cfg(feature = "redis")]
mod redis;

pub use self::cursor::Cursor;
pub use self::error::RunEventsError;
pub use self::memory::MemoryRunEvents;
pub use self::record::EventRecord;
#[cfg(feature = "redis")]
pub use self::redis::RedisRunEvents;

/// The most events a log keeps for one run, by default.
pub const MAX_RUN_EVENTS: u64 = 100_000;

/// The largest record a log takes, as JSON, by default: 16 MiB, as a run
/// store takes ([`MAX_RECORD_BYTES`](crate::agent::store::MAX_RECORD_BYTES)).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// The most parts a log counts attempts for in one run.
pub const MAX_RUN_PARTS: u64 = 100_000;

/// The longest run id or part name a log takes, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// The most events one read returns.
pub const MAX_READ_EVENTS: usize = 1_000;

/// How long a log keeps a run's events after its last write, by default:
/// an hour.
pub const EVENTS_TTL: Duration = Duration::from_secs(60 * 60);

/// Which event of a run a write is: the `n`th event of attempt `attempt`
/// of the writer `part`. Written twice, it is kept once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventKey<'a> {
    /// Who writes: `run`, `turn 3`, `call c1` — a name unique in the run.
    pub part: &'a str,
    /// Which attempt of the part ([`RunEvents::begin`]'s count).
    pub attempt: u32,
    /// The event's number in this attempt of the part, from 0.
    pub n: u64,
}

impl<'a> EventKey<'a> {
    /// The `n`th event of attempt `attempt` of `part`.
    pub fn new(part: &'a str, attempt: u32, n: u64) -> Self {
        EventKey { part, attempt, n }
    }
}

/// Written as the logs store it: `{attempt}:{n}:{part}` — the numbers
/// first, so no part name makes two keys one.
impl fmt::Display for EventKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.attempt, self.n, self.part)
    }
}

/// What a [`RunEvents::write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// The event was appended, at this place.
    Appended(Cursor),
    /// An event under this key was written before: nothing changed.
    Duplicate,
}

/// What a [`RunEvents::read`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// The events after the cursor asked, in the log's order, each with
    /// its own cursor (read after it to go on).
    pub events: Vec<(Cursor, EventRecord)>,
    /// Whether the run's events ended after the last of these: nothing
    /// more will come.
    pub ended: bool,
}

/// A run's events, shared by its writers and its readers; see the
/// [module docs](self) for the contract and the bounds.
pub trait RunEvents: Send + Sync + 'static {
    /// Counts an attempt of `part` of the run: 1 the first time, 2 the
    /// next, … — atomically, whichever process asks.
    fn begin<'a>(
        &'a self,
        run_id: &'a str,
        part: &'a str,
    ) -> BoxFuture<'a, Result<u32, RunEventsError>>;

    /// Appends `record` under `key`, unless an event was written under
    /// it before ([`Written::Duplicate`]). Refused past the bounds, and
    /// after the run's [`end`](Self::end).
    fn write<'a>(
        &'a self,
        run_id: &'a str,
        key: EventKey<'a>,
        record: &'a EventRecord,
    ) -> BoxFuture<'a, Result<Written, RunEventsError>>;

    /// Marks the run's events ended; ending again changes nothing.
    fn end<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), RunEventsError>>;

    /// At most `max` events after `after` (from the first without one),
    /// in the log's order, and whether the run ended after them. When
    /// there are none and the run has not ended, waits up to `wait` for
    /// one (zero: answers at once).
    fn read<'a>(
        &'a self,
        run_id: &'a str,
        after: Option<&'a Cursor>,
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Page, RunEventsError>>;
}

impl<L: RunEvents + ?Sized> RunEvents for std::sync::Arc<L> {
    fn begin<'a>(
        &'a self,
        run_id: &'a str,
        part: &'a str,
    ) -> BoxFuture<'a, Result<u32, RunEventsError>> {
        (**self).begin(run_id, part)
    }

    fn write<'a>(
        &'a self,
        run_id: &'a str,
        key: EventKey<'a>,
        record: &'a EventRecord,
    ) -> BoxFuture<'a, Result<Written, RunEventsError>> {
        (**self).write(run_id, key, record)
    }

    fn end<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), RunEventsError>> {
        (**self).end(run_id)
    }

    fn read<'a>(
        &'a self,
        run_id: &'a str,
        after: Option<&'a Cursor>,
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Page, RunEventsError>> {
        (**self).read(run_id, after, max, wait)
    }
}

/// The bounds a log keeps, set on each log's builder.
#[derive(Debug, Clone, Copy)]
struct Limits {
    events: u64,
    record_bytes: usize,
    ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            events: MAX_RUN_EVENTS,
            record_bytes: MAX_EVENT_BYTES,
            ttl: EVENTS_TTL,
        }
    }
}

/// Refuses a run id or part longer than [`MAX_NAME_BYTES`].
fn check_name(what: &'static str, name: &str) -> Result<(), RunEventsError> {
    match name.len() > MAX_NAME_BYTES {
        true => Err(RunEventsError::NameTooLong {
            what,
            bytes: name.len(),
            limit: MAX_NAME_BYTES,
        }),
        false => Ok(()),
    }
}

/// The record as JSON, refused when larger than `limit`.
fn encode(run_id: &str, record: &EventRecord, limit: usize) -> Result<String, RunEventsError> {
    let json = serde_json::to_string(record).map_err(|err| RunEventsError::Unserializable {
        run_id: run_id.to_owned(),
        why: err.to_string(),
    })?;
    match json.len() > limit {
        true => Err(RunEventsError::TooLarge {
            run_id: run_id.to_owned(),
            record: record.kind(),
            bytes: json.len(),
            limit,
        }),
        false => Ok(json),
    }
}
