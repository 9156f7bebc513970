//! [`RedisOutputStore`]: kept outputs in Redis, shared by processes.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::RedisError;

use super::{ttl_ms, Chunk, OutputStore, OutputStoreError, WholeOutput, DEFAULT_MAX_OUTPUT_BYTES};
use crate::redis::{Health, RedisSettings};

/// The bytes before the text in a stored value: the whole output's
/// length, a big-endian `u64`.
const HEADER: usize = 8;

/// An [`OutputStore`] in Redis: every process that uses the same Redis and
/// key prefix reads the outputs any of them kept (a model's next call may
/// reach another replica).
///
/// ```no_run
/// use std::time::Duration;
///
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use toolstack_layers::budget::{BudgetLayer, RedisOutputStore};
///
/// # async fn run() -> redis::RedisResult<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let config = ConnectionManagerConfig::new()
///     .set_connection_timeout(Some(Duration::from_millis(250)))
///     .set_response_timeout(Some(Duration::from_millis(250)))
///     .set_number_of_retries(1);
/// let manager = ConnectionManager::new_with_config(client, config).await?;
/// let store = RedisOutputStore::new(manager, Duration::from_secs(3600)).prefix("myapp:kept");
/// let budget = BudgetLayer::new().max_items(50).keep(store.clone());
/// # let _ = budget;
/// # Ok(()) }
/// ```
///
/// * **Keys**: `{prefix}:{handle}` (prefix `toolstack:kept` unless set);
///   the handle is the budget's 32 hex digits, and a handle of any other
///   shape is not asked for, so a model's text never names a key.
/// * **Values**: the whole output's length (8 bytes, big-endian), then
///   the kept text, stored with `SET key value PX ttl`: Redis drops it
///   once its time to live is over. A page is two `GETRANGE`s and a
///   `STRLEN` in one `MULTI`: never the whole value.
/// * **Bounded**: at most [`max_output_bytes`](Self::max_output_bytes)
///   (1 MiB unless set) of an output; a command waits at most the
///   [`timeout`](Self::timeout) (250 ms unless set). A failure is a
///   [`OutputStoreError`]: the budget's notice says the output could not be
///   kept, a read answers that the store is unavailable. After Redis
///   could not be reached it is left alone for
///   [`recheck_after`](Self::recheck_after) (1 s unless set).
#[derive(Clone)]
pub struct RedisOutputStore {
    settings: RedisSettings,
    ttl: Duration,
    max_output_bytes: usize,
    health: Arc<Health>,
}

impl RedisOutputStore {
    /// Outputs in the Redis that `manager` connects to, each kept for
    /// `ttl`, under the prefix `toolstack:kept`.
    pub fn new(manager: ConnectionManager, ttl: Duration) -> Self {
        RedisOutputStore {
            settings: RedisSettings::new(manager, "toolstack:kept"),
            ttl,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            health: Arc::new(Health::new()),
        }
    }

    /// The prefix of every key: stores, in any process, that use the same
    /// Redis and prefix read each other's outputs.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = Arc::from(prefix.into());
        self
    }

    /// Keeps at most `bytes` of one output (default 1 MiB).
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// How long a command waits for Redis (default 250 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// How long Redis is left alone after it could not be reached
    /// (default 1 s).
    pub fn recheck_after(mut self, pause: Duration) -> Self {
        self.settings.recheck_after = pause;
        self
    }

    fn key(&self, handle: &str) -> String {
        format!("{}:{handle}", self.settings.prefix)
    }

    /// Runs `pipe` on Redis within the timeout, minding its health.
    fn query<T>(&self, pipe: redis::Pipeline) -> BoxFuture<'static, Result<T, OutputStoreError>>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let (timeout, pause) = (self.settings.timeout, self.settings.recheck_after);
        if !self.health.should_ask(pause) {
            return Box::pin(std::future::ready(Err(OutputStoreError::new(
                "Redis could not be reached a moment ago; not asked again yet",
            ))));
        }
        let mut manager = self.settings.manager.clone();
        let health = Arc::clone(&self.health);
        Box::pin(async move {
            match tokio::time::timeout(timeout, pipe.query_async::<T>(&mut manager)).await {
                Ok(Ok(answer)) => {
                    health.reachable();
                    Ok(answer)
                }
                Ok(Err(err)) => {
                    health.failed(&err, pause);
                    Err(failed(err))
                }
                Err(_) => {
                    health.unreachable(pause);
                    Err(OutputStoreError::new(format!(
                        "Redis did not answer within {timeout:?}"
                    )))
                }
            }
        })
    }
}

fn failed(err: RedisError) -> OutputStoreError {
    OutputStoreError::new(format!("Redis: {err}")).with_source(err)
}

impl OutputStore for RedisOutputStore {
    fn put(
        &self,
        handle: &str,
        output: WholeOutput,
    ) -> BoxFuture<'static, Result<(), OutputStoreError>> {
        let output_bytes = u64::try_from(output.output_bytes).unwrap_or(u64::MAX);
        let text = output.capped(self.max_output_bytes);
        let mut value = Vec::with_capacity(HEADER + text.len());
        value.extend_from_slice(&output_bytes.to_be_bytes());
        value.extend_from_slice(&text);
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(self.key(handle))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms(self.ttl).max(1))
            .ignore();
        self.query::<()>(pipe)
    }

    fn read(
        &self,
        handle: &str,
        offset: usize,
        len: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>> {
        // `GETRANGE` has no empty range: one byte, dropped.
        let (wanted, len) = (len, len.max(1));
        let key = self.key(handle);
        let at = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let from = at(HEADER).saturating_add(at(offset));
        let to = from.saturating_add(at(len)).saturating_sub(1);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("GETRANGE")
            .arg(&key)
            .arg(0)
            .arg(at(HEADER) - 1)
            .cmd("GETRANGE")
            .arg(&key)
            .arg(from)
            .arg(to)
            .cmd("STRLEN")
            .arg(&key);
        let answer = self.query::<(Vec<u8>, Vec<u8>, usize)>(pipe);
        Box::pin(async move {
            let (header, mut bytes, stored) = answer.await?;
            bytes.truncate(wanted);
            // A key that is not there reads as the empty string.
            let Ok(header) = <[u8; HEADER]>::try_from(header.as_slice()) else {
                return Ok(None);
            };
            let output_bytes = usize::try_from(u64::from_be_bytes(header)).unwrap_or(usize::MAX);
            Ok(Some(Chunk::new(
                bytes,
                stored.saturating_sub(HEADER),
                output_bytes,
            )))
        })
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }
}

impl fmt::Debug for RedisOutputStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOutputStore")
            .field("prefix", &self.settings.prefix)
            .field("ttl", &self.ttl)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("timeout", &self.settings.timeout)
            .field("recheck_after", &self.settings.recheck_after)
            .finish_non_exhaustive()
    }
}
