//! Resumable streams: the chunks of each chat's active response, kept so
//! that a front end that reconnects — a page reloaded mid-answer, a
//! dropped connection — gets the chunks so far and then the live ones.
//!
//! This is what the AI SDK's `useChat({ resume: true })` needs: on mount,
//! its transport asks `GET {api}/{chatId}/stream`; the endpoint answers
//! `204` when the chat has no response in progress, else the response
//! from its first chunk (the SDK replays it into the message), then what
//! follows, live, to its end.
//!
//! With a log ([`ChatEndpoint::resumable_streams`](super::ChatEndpoint::resumable_streams)),
//! a response no longer belongs to its connection: the run goes on when
//! the client goes away (the AI SDK treats a closed tab as a disconnect,
//! not a stop), and its chunks go to the log, which every connection to
//! the chat reads. Three logs share one contract:
//!
//! | log | for | feature |
//! |---|---|---|
//! | [`MemoryChunkLog`] | one process | — |
//! | [`SqliteStore`](crate::agent::store::sqlite::SqliteStore) | one machine: tables of its own in the runs' file, made at the log's first use | `sqlite` |
//! | [`RedisStore`](crate::agent::store::redis::RedisStore) | replicas: a Redis Stream per response, polled with `XRANGE` | `redis` |
//!
//! The log depends on the run store, never the other way: the SQLite and
//! Redis logs keep their chunks next to the runs, through the store's
//! connection, and the store knows nothing of them.
//!
//! A log is bounded: at most [`MAX_LOGGED_CHUNKS`] chunks per response
//! (past that the response goes on live but cannot be resumed), and a
//! response's log expires an hour after its last chunk.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::agent::store::StoreError;

mod memory;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use self::memory::MemoryChunkLog;

/// The most chunks a response keeps for reconnecting clients.
pub const MAX_LOGGED_CHUNKS: usize = 100_000;

/// How long a response's log is kept after its last chunk: an hour.
pub const LOG_TTL: Duration = Duration::from_secs(60 * 60);

/// Keeps the chunks of each chat's response in progress; see the
/// [module docs](self).
///
/// A response has one writer (the process running it), which appends its
/// chunks in order, numbered from 0, and closes it at its end; any number
/// of readers, in any process sharing the log, read it from any position.
pub trait ChunkLog: Send + Sync + 'static {
    /// Makes `stream_id` the chat's response in progress (replacing any).
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Appends chunk number `index` (the SSE data: one JSON chunk).
    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Ends the response: readers get its last chunks and then the end; it
    /// is no longer the chat's response in progress.
    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The chat's response in progress, if any.
    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// The chunks from number `from` on, waiting up to `wait` for one when
    /// none is there yet; and whether the response has ended after them.
    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>>;
}

/// What [`ChunkLog::read`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Logged {
    /// The chunks, in order, from the position asked.
    pub chunks: Vec<String>,
    /// Whether the response ended after the last of them (or is gone).
    pub ended: bool,
}

/// How often a log that cannot wake its readers (SQLite, Redis) is looked
/// at again while a reader waits.
#[cfg(any(feature = "sqlite", feature = "redis"))]
const POLL: Duration = Duration::from_millis(25);

/// Reads with `look` until it finds chunks or the end, looking again every
/// [`POLL`] for at most `wait`.
#[cfg(any(feature = "sqlite", feature = "redis"))]
async fn polled<F, Fut>(wait: Duration, mut look: F) -> Result<Logged, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Logged, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let logged = look().await?;
        if !logged.chunks.is_empty() || logged.ended {
            return Ok(logged);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(logged);
        }
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
}

impl<L: ChunkLog + ?Sized> ChunkLog for std::sync::Arc<L> {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).open(chat_id, stream_id)
    }

    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).append(stream_id, index, chunk)
    }

    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).close(chat_id, stream_id)
    }

    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        (**self).active(chat_id)
    }

    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>> {
        (**self).read(stream_id, from, wait)
    }
}
