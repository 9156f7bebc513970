//! The chunk log in a [`RedisStore`]: a Redis Stream per response
//! (`{prefix}chunks:{stream}`, chunk `i` under the id `0-{i+1}`, the end
//! as one more entry), and the chat's response in progress under
//! `{prefix}chat:{chat}`; both expire an hour after their last write. A
//! reader polls with `XRANGE` (every 25 ms) while it waits, from any
//! process.
//!
//! The store knows nothing of these keys: the log names them under the
//! store's prefix ([`RedisStore::prefixed`]) and sends its commands on the
//! store's connection, bounded by the store's timeout.

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::Script;

use crate::agent::store::redis::RedisStore;
use crate::agent::store::StoreError;

use super::{polled, ChunkLog, Logged, LOG_TTL, MAX_LOGGED_CHUNKS};

/// KEYS: the response's stream. ARGV: the chunk's id, the chunk, the TTL.
/// A chunk already there (an append tried again) is kept once.
const APPEND: &str = r"
redis.pcall('XADD', KEYS[1], ARGV[1], 'c', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// KEYS: the chat's key. ARGV: the stream ending. Forgets the chat's
/// response in progress if it is still this one.
const CLEAR_CHAT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 1
";

/// The Stream of response `stream_id`.
fn chunks_key(store: &RedisStore, stream_id: &str) -> String {
    store.prefixed(format_args!("chunks:{stream_id}"))
}

/// The response in progress of chat `chat_id`.
fn chat_key(store: &RedisStore, chat_id: &str) -> String {
    store.prefixed(format_args!("chat:{chat_id}"))
}

fn ttl_ms() -> u64 {
    LOG_TTL.as_millis() as u64
}

impl ChunkLog for RedisStore {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut connection = self.connection();
            let _: () = self
                .bounded(
                    redis::cmd("SET")
                        .arg(chat_key(self, chat_id))
                        .arg(stream_id)
                        .arg("PX")
                        .arg(ttl_ms())
                        .query_async(&mut connection),
                )
                .await?;
            Ok(())
        })
    }

    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if index >= MAX_LOGGED_CHUNKS {
                return Ok(());
            }
            let mut connection = self.connection();
            let script = Script::new(APPEND);
            let mut append = script.prepare_invoke();
            append
                .key(chunks_key(self, stream_id))
                .arg(format!("0-{}", index + 1))
                .arg(chunk)
                .arg(ttl_ms());
            let _: i64 = self.bounded(append.invoke_async(&mut connection)).await?;
            Ok(())
        })
    }

    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let key = chunks_key(self, stream_id);
            let mut connection = self.connection();
            let _: () = self
                .bounded(
                    redis::pipe()
                        .cmd("XADD")
                        .arg(&key)
                        .arg("*")
                        .arg("end")
                        .arg(1)
                        .ignore()
                        .cmd("PEXPIRE")
                        .arg(&key)
                        .arg(ttl_ms())
                        .ignore()
                        .query_async(&mut connection),
                )
                .await?;
            let script = Script::new(CLEAR_CHAT);
            let mut clear = script.prepare_invoke();
            clear.key(chat_key(self, chat_id)).arg(stream_id);
            let _: i64 = self.bounded(clear.invoke_async(&mut connection)).await?;
            Ok(())
        })
    }

    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.connection();
            self.bounded(
                redis::cmd("GET")
                    .arg(chat_key(self, chat_id))
                    .query_async(&mut connection),
            )
            .await
        })
    }

    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>> {
        let key = chunks_key(self, stream_id);
        Box::pin(polled(wait, move || {
            let key = key.clone();
            async move {
                let mut connection = self.connection();
                let (exists, entries): (bool, Vec<(String, Vec<String>)>) = self
                    .bounded(
                        redis::pipe()
                            .cmd("EXISTS")
                            .arg(&key)
                            .cmd("XRANGE")
                            .arg(&key)
                            .arg(format!("0-{}", from + 1))
                            .arg("+")
                            .arg("COUNT")
                            .arg(1_000)
                            .query_async(&mut connection),
                    )
                    .await?;
                let mut logged = Logged {
                    chunks: Vec::new(),
                    // Gone (expired, never opened): nothing more comes.
                    ended: !exists,
                };
                for (_, fields) in entries {
                    match fields.first().map(String::as_str) {
                        Some("c") => {
                            if let Some(chunk) = fields.get(1) {
                                logged.chunks.push(chunk.clone());
                            }
                        }
                        Some("end") => logged.ended = true,
                        _ => {}
                    }
                }
                Ok(logged)
            }
        }))
    }
}
