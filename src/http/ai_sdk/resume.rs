//! Resumable responses: a response run by a task of its own, its chunks
//! sent to the client and queued for the log; and a reconnecting client's
//! replay from the log. Every call to the log rides out a short outage of
//! the store it is kept in, as the agent's runs do ([`RideOut`]); the
//! response itself never waits for the log.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use futures_core::Stream;
use futures_util::stream;
use serde_json::json;
use tokio::sync::mpsc;

use crate::agent::RideOut;

use super::ids::new_token;
use crate::agent::store::StoreError;

use super::log::{ChunkLog, LOG_TTL};
use super::response::{OpenResponse, DONE};

/// How many chunks may wait for the log before it is given up on.
const LOG_QUEUE: usize = 4_096;

/// How long a reader waits for the log before it looks again.
const READ_WAIT: Duration = Duration::from_secs(10);

/// Runs `open` to its end in a task of its own — a client that goes away
/// does not stop it — logging its chunks under a new stream of
/// `chat_id`; the client's stream of it. The log is opened first (a
/// client reconnecting at once finds it), tried once: a log that is down
/// is opened, riding the outage out, by its writer's task, off the
/// response's way.
/// A response's source of SSE data: each chunk's JSON, `[DONE]` last.
pub(super) trait Payloads: Send + 'static {
    fn next_payload(&mut self) -> impl std::future::Future<Output = Option<String>> + Send;
}

impl Payloads for OpenResponse {
    fn next_payload(&mut self) -> impl std::future::Future<Output = Option<String>> + Send {
        OpenResponse::next_payload(self)
    }
}

/// The SSE events of `source`, straight to the client.
#[cfg(feature = "restate")]
pub(super) fn payloads(
    source: impl Payloads,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(source, |mut source| async move {
        let payload = source.next_payload().await?;
        Some((Ok(Event::default().data(payload)), source))
    })
}

pub(super) async fn produce(
    mut open: impl Payloads,
    log: Arc<dyn ChunkLog>,
    chat_id: String,
    ride_out: RideOut,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let stream_id = new_token();
    let (live, to_client) = mpsc::channel::<String>(64);
    let opened = ride_out
        .once(
            "opening the log of chat",
            &chat_id,
            log.open(&chat_id, &stream_id),
        )
        .await;
    let mut to_log = match opened {
        Ok(()) | Err(StoreError::Unavailable { .. }) => {
            let (to_log, queued) = mpsc::channel::<Queued>(LOG_QUEUE);
            let writer = LogWriter {
                log,
                chat_id,
                stream_id,
                ride_out,
            };
            tokio::spawn(writer.write(queued, opened.is_err()));
            Some(to_log)
        }
        Err(err) => {
            tracing::warn!(error = %err, "this response cannot be resumed: its log did not open");
            None
        }
    };
    tokio::spawn(async move {
        let mut live = Some(live);
        while let Some(payload) = open.next_payload().await {
            if payload == DONE {
                if let Some(queue) = &to_log {
                    // The end has room: the queue is never filled to it.
                    let _ = queue.send(Queued::End).await;
                }
                if let Some(live) = &live {
                    let _ = live.send(payload).await;
                }
                break;
            }
            if let Some(queue) = &to_log {
                // One place is kept for the end.
                let full = queue.capacity() <= 1;
                if queue.is_closed() {
                    // The log did not open (the writer said so).
                    to_log = None;
                } else if full || queue.try_send(Queued::Chunk(payload.clone())).is_err() {
                    tracing::warn!("the chunk log fell behind; this response is no longer kept");
                    // Dropping the queue ends the log, marked cut.
                    to_log = None;
                }
            }
            if let Some(client) = &live {
                if client.send(payload).await.is_err() {
                    // The client left; the run goes on for the log.
                    live = None;
                }
            }
        }
    });
    stream::unfold(to_client, |mut to_client| async move {
        let payload = to_client.recv().await?;
        Some((Ok(Event::default().data(payload)), to_client))
    })
}

/// What the producer queues for the log.
enum Queued {
    Chunk(String),
    /// The response ended (its `[DONE]`).
    End,
}

/// The writer of one response's log.
struct LogWriter {
    log: Arc<dyn ChunkLog>,
    chat_id: String,
    stream_id: String,
    ride_out: RideOut,
}

impl LogWriter {
    /// Opens the log (when `open`: the response's own try found it down),
    /// then appends the queued chunks in order, each riding out an outage
    /// (a log that does not open keeps nothing),
    /// then ends the log — with an `error` chunk first when the log lacks
    /// the response's end (the queue was given up on, the task running
    /// the response was stopped, or an append failed past the ride-out),
    /// so that a client reconnecting reads that the rest was not kept.
    /// That chunk is tried for as long as the log is kept ([`LOG_TTL`]),
    /// in this task, off the response's way.
    async fn write(self, mut queued: mpsc::Receiver<Queued>, open: bool) {
        let Self {
            log,
            chat_id,
            stream_id,
            ride_out,
        } = &self;
        let opened = match open {
            true => {
                ride_out
                    .call("opening the log of chat", chat_id, None, || {
                        log.open(chat_id, stream_id)
                    })
                    .await
            }
            false => Ok(()),
        };
        if let Err(err) = opened {
            tracing::warn!(error = %err, "this response cannot be resumed: its log did not open");
            return;
        }
        let mut index = 0;
        let mut failed = None;
        let mut ended = false;
        while let Some(queued) = queued.recv().await {
            let payload = match queued {
                Queued::Chunk(payload) => payload,
                Queued::End => {
                    ended = true;
                    break;
                }
            };
            if failed.is_some() {
                continue;
            }
            let appended = ride_out
                .call("logging a chunk of response", stream_id, None, || {
                    log.append(stream_id, index, &payload)
                })
                .await;
            match appended {
                Ok(()) => index += 1,
                Err(err) => {
                    tracing::warn!(error = %err, "the chunk log failed; this response is no longer kept");
                    failed = Some(err);
                }
            }
        }
        if !ended || failed.is_some() {
            let why = match &failed {
                Some(err) => format!("the rest of this response was not kept ({err}); ask again"),
                None => "the rest of this response was not kept; ask again".to_owned(),
            };
            let cut = json!({"type": "error", "errorText": why}).to_string();
            // Without it a client reconnecting would read a response cut
            // short as if it had ended: tried for as long as the log is
            // kept (a store that refuses chunks may still take the close).
            let patient = RideOut {
                bound: LOG_TTL,
                ..*ride_out
            };
            let appended = patient
                .call("logging the end of response", stream_id, None, || {
                    log.append(stream_id, index, &cut)
                })
                .await;
            if let Err(err) = appended {
                tracing::warn!(error = %err, "the chunk log did not take the response's cut");
            }
        }
        let closed = ride_out
            .call("closing the log of chat", chat_id, None, || {
                log.close(chat_id, stream_id)
            })
            .await;
        if let Err(err) = closed {
            tracing::warn!(error = %err, "the chunk log did not close");
        }
    }
}

/// A reconnecting client's stream: the logged chunks from the first,
/// then the new ones as they come, then `[DONE]`.
pub(super) fn replay(
    log: Arc<dyn ChunkLog>,
    stream_id: String,
    ride_out: RideOut,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    struct Reading {
        log: Arc<dyn ChunkLog>,
        stream_id: String,
        ride_out: RideOut,
        from: usize,
        ready: VecDeque<String>,
        ended: bool,
        done: bool,
    }
    // A read may wait for the next chunk before it answers.
    let ride_out = RideOut {
        timeout: ride_out.timeout + READ_WAIT,
        ..ride_out
    };
    let reading = Reading {
        log,
        stream_id,
        ride_out,
        from: 0,
        ready: VecDeque::new(),
        ended: false,
        done: false,
    };
    stream::unfold(reading, |mut r| async move {
        loop {
            if let Some(payload) = r.ready.pop_front() {
                return Some((Ok(Event::default().data(payload)), r));
            }
            if r.ended {
                if std::mem::replace(&mut r.done, true) {
                    return None;
                }
                return Some((Ok(Event::default().data(DONE)), r));
            }
            let read = r
                .ride_out
                .call("reading response", &r.stream_id, None, || {
                    r.log.read(&r.stream_id, r.from, READ_WAIT)
                })
                .await;
            match read {
                Ok(logged) => {
                    r.from += logged.chunks.len();
                    r.ready.extend(logged.chunks);
                    r.ended = logged.ended;
                }
                Err(err) => {
                    let text = format!("the rest of this response cannot be read: {err}");
                    r.ready
                        .push_back(json!({"type": "error", "errorText": text}).to_string());
                    r.ended = true;
                }
            }
        }
    })
}
