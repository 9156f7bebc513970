//! The chunk log in a [`MemoryStore`]: this process's memory, readers
//! woken as chunks arrive.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::agent::store::{MemoryStore, StoreError};

use super::{ChunkLog, Logged, LOG_TTL, MAX_LOGGED_CHUNKS};

/// The logs of a [`MemoryStore`].
#[derive(Debug, Default)]
pub(crate) struct MemoryChunks {
    inner: Mutex<Inner>,
    /// Woken at every chunk and every end.
    arrived: Notify,
}

#[derive(Debug, Default)]
struct Inner {
    chats: HashMap<String, String>,
    streams: HashMap<String, Log>,
}

#[derive(Debug)]
struct Log {
    chunks: Vec<String>,
    ended: bool,
    touched: Instant,
}

impl MemoryChunks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    /// Forgets the logs untouched for longer than the TTL.
    fn sweep(&mut self) {
        let now = Instant::now();
        self.streams
            .retain(|_, log| now.duration_since(log.touched) < LOG_TTL);
        let streams = &self.streams;
        self.chats.retain(|_, stream| streams.contains_key(stream));
    }
}

impl ChunkLog for MemoryStore {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut inner = self.chunks.lock();
        inner.sweep();
        inner.streams.insert(
            stream_id.to_owned(),
            Log {
                chunks: Vec::new(),
                ended: false,
                touched: Instant::now(),
            },
        );
        inner.chats.insert(chat_id.to_owned(), stream_id.to_owned());
        Box::pin(std::future::ready(Ok(())))
    }

    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        {
            let mut inner = self.chunks.lock();
            if let Some(log) = inner.streams.get_mut(stream_id) {
                if index == log.chunks.len() && index < MAX_LOGGED_CHUNKS {
                    log.chunks.push(chunk.to_owned());
                    log.touched = Instant::now();
                }
            }
        }
        self.chunks.arrived.notify_waiters();
        Box::pin(std::future::ready(Ok(())))
    }

    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        {
            let mut inner = self.chunks.lock();
            if let Some(log) = inner.streams.get_mut(stream_id) {
                log.ended = true;
            }
            if inner.chats.get(chat_id).is_some_and(|s| s == stream_id) {
                inner.chats.remove(chat_id);
            }
        }
        self.chunks.arrived.notify_waiters();
        Box::pin(std::future::ready(Ok(())))
    }

    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let active = self.chunks.lock().chats.get(chat_id).cloned();
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
                let arrived = self.chunks.arrived.notified();
                {
                    let inner = self.chunks.lock();
                    let Some(log) = inner.streams.get(stream_id) else {
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
