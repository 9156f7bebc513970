//! [`MemoryChunkLog`]: the chunk log in this process's memory, readers
//! woken as chunks arrive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::agent::store::StoreError;

use super::{ChunkLog, Logged, LOG_TTL, MAX_LOGGED_CHUNKS};

/// The chunks of each chat's response in progress, in this process's
/// memory: resumable streams for one process (a reader is woken as a
/// chunk arrives, not polled). Clones share the log.
///
/// ```
/// use toolstack::agent::Agent;
/// use toolstack::http::ai_sdk::{ChatEndpoint, MemoryChunkLog};
/// use toolstack::model::ScriptedModel;
/// use toolstack::Toolbox;
///
/// let endpoint = ChatEndpoint::new(Agent::new(ScriptedModel::new([]), Toolbox::new()))
///     .resumable_streams(MemoryChunkLog::new());
/// # let _ = endpoint;
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryChunkLog {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    logs: Mutex<Logs>,
    /// Woken at every chunk and every end.
    arrived: Notify,
}

#[derive(Debug, Default)]
struct Logs {
    chats: HashMap<String, String>,
    streams: HashMap<String, Log>,
}

#[derive(Debug)]
struct Log {
    chunks: Vec<String>,
    ended: bool,
    touched: Instant,
}

impl MemoryChunkLog {
    /// An empty log.
    pub fn new() -> Self {
        MemoryChunkLog::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Logs> {
        self.shared.logs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Logs {
    /// Forgets the logs untouched for longer than the TTL.
    fn sweep(&mut self) {
        let now = Instant::now();
        self.streams
            .retain(|_, log| now.duration_since(log.touched) < LOG_TTL);
        let streams = &self.streams;
        self.chats.retain(|_, stream| streams.contains_key(stream));
    }
}

impl ChunkLog for MemoryChunkLog {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut logs = self.lock();
        logs.sweep();
        logs.streams.insert(
            stream_id.to_owned(),
            Log {
                chunks: Vec::new(),
                ended: false,
                touched: Instant::now(),
            },
        );
        logs.chats.insert(chat_id.to_owned(), stream_id.to_owned());
        Box::pin(std::future::ready(Ok(())))
    }

    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        {
            let mut logs = self.lock();
            if let Some(log) = logs.streams.get_mut(stream_id) {
                if index == log.chunks.len() && index < MAX_LOGGED_CHUNKS {
                    log.chunks.push(chunk.to_owned());
                    log.touched = Instant::now();
                }
            }
        }
        self.shared.arrived.notify_waiters();
        Box::pin(std::future::ready(Ok(())))
    }

    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        {
            let mut logs = self.lock();
            if let Some(log) = logs.streams.get_mut(stream_id) {
                log.ended = true;
            }
            if logs.chats.get(chat_id).is_some_and(|s| s == stream_id) {
                logs.chats.remove(chat_id);
            }
        }
        self.shared.arrived.notify_waiters();
        Box::pin(std::future::ready(Ok(())))
    }

    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let active = self.lock().chats.get(chat_id).cloned();
        Box::pin(std::future::ready(Ok(active)))
    }

    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>> {
        Box::pin(async move {
            let deadline = Instant::now() + wait;
            loop {
                // Registered before looking, so no chunk slips between.
                let arrived = self.shared.arrived.notified();
                {
                    let logs = self.lock();
                    let Some(log) = logs.streams.get(stream_id) else {
                        return Ok(Logged {
                            chunks: Vec::new(),
                            ended: true,
                        });
                    };
                    let chunks: Vec<String> = log.chunks.iter().skip(from).cloned().collect();
                    if !chunks.is_empty() || log.ended {
                        return Ok(Logged {
                            chunks,
                            ended: log.ended,
                        });
                    }
                }
                if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                    return Ok(Logged::default());
                }
            }
        })
    }
}
