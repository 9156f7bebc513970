//! Resumable responses: a response run by a task of its own, its chunks
//! sent to the client and queued for the log; and a reconnecting client's
//! replay from the log.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use futures_core::Stream;
use futures_util::stream;
use serde_json::json;
use tokio::sync::mpsc;

use super::ids::new_token;
use super::log::ChunkLog;
use super::response::{OpenResponse, DONE};

/// How many chunks may wait for the log before it is given up on.
const LOG_QUEUE: usize = 4_096;

/// How long a reader waits for the log before it looks again.
const READ_WAIT: Duration = Duration::from_secs(10);

/// Runs `open` to its end in a task of its own — a client that goes away
/// does not stop it — logging its chunks under a new stream of
/// `chat_id`; the client's stream of it.
pub(super) async fn produce(
    mut open: OpenResponse,
    log: Arc<dyn ChunkLog>,
    chat_id: String,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let stream_id = new_token();
    let (live, to_client) = mpsc::channel::<String>(64);
    let mut to_log = match log.open(&chat_id, &stream_id).await {
        Ok(()) => {
            let (to_log, queued) = mpsc::channel::<Queued>(LOG_QUEUE);
            tokio::spawn(write(log, chat_id, stream_id, queued));
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
                if full || queue.try_send(Queued::Chunk(payload.clone())).is_err() {
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

/// Appends the queued chunks in order, then ends the log — with an
/// `error` chunk first when the response's end never came (the queue was
/// given up on, or the task running the response was stopped).
async fn write(
    log: Arc<dyn ChunkLog>,
    chat_id: String,
    stream_id: String,
    mut queued: mpsc::Receiver<Queued>,
) {
    let mut index = 0;
    let mut failed = false;
    let mut ended = false;
    while let Some(queued) = queued.recv().await {
        let payload = match queued {
            Queued::Chunk(payload) => payload,
            Queued::End => {
                ended = true;
                break;
            }
        };
        if failed {
            continue;
        }
        match log.append(&stream_id, index, &payload).await {
            Ok(()) => index += 1,
            Err(err) => {
                tracing::warn!(error = %err, "the chunk log failed; this response is no longer kept");
                failed = true;
            }
        }
    }
    if !ended && !failed {
        let cut = json!({"type": "error", "errorText": "the rest of this response was not kept; ask again"});
        let _ = log.append(&stream_id, index, &cut.to_string()).await;
    }
    if let Err(err) = log.close(&chat_id, &stream_id).await {
        tracing::warn!(error = %err, "the chunk log did not close");
    }
}

/// A reconnecting client's stream: the logged chunks from the first,
/// then the new ones as they come, then `[DONE]`.
pub(super) fn replay(
    log: Arc<dyn ChunkLog>,
    stream_id: String,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    struct Reading {
        log: Arc<dyn ChunkLog>,
        stream_id: String,
        from: usize,
        ready: VecDeque<String>,
        ended: bool,
        done: bool,
    }
    let reading = Reading {
        log,
        stream_id,
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
            match r.log.read(&r.stream_id, r.from, READ_WAIT).await {
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
