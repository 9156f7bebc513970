//! [`RedisStore`]: checkpoints in Redis, shared by every process that uses
//! the same Redis and prefix.
//!
//! A run is a hash `{prefix}run:{id}` with its version and checkpoint;
//! the runs waiting for a decision are a set `{prefix}waiting`. A save is
//! one Lua script — compare the version, write, keep the set, set the TTL
//! — so the compare-and-set is atomic across processes. A finished run
//! expires after [`finished_ttl`](RedisStore::finished_ttl) (a day by
//! default); other runs do not expire. Every command waits at most
//! [`timeout`](RedisStore::timeout) (2 s by default) for Redis: a store
//! that is down is [`StoreError::Unavailable`] within that bound.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, RedisError, Script};

use super::{Checkpoint, RunStatus, RunStore, StoreError, Stored, Version, MAX_CHECKPOINT_BYTES};

/// The default time a finished run is kept: a day.
pub const DEFAULT_FINISHED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The default bound on one command: 2 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// KEYS: the run's hash, the waiting set. ARGV: the expected version, the
/// checkpoint, its status, the run id, the TTL in ms (0: none). Returns
/// `{1, new version}` or `{0, version found}`.
const SAVE: &str = r"
local found = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if found ~= tonumber(ARGV[1]) then
  return {0, found}
end
local version = found + 1
redis.call('HSET', KEYS[1], 'version', version, 'checkpoint', ARGV[2])
if ARGV[3] == 'waiting' then
  redis.call('SADD', KEYS[2], ARGV[4])
else
  redis.call('SREM', KEYS[2], ARGV[4])
end
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  redis.call('PERSIST', KEYS[1])
end
return {1, version}
";

/// Checkpoints in Redis; see the [module docs](self). Clones share the
/// connection.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) manager: ConnectionManager,
    pub(crate) prefix: Arc<str>,
    timeout: Duration,
    limit: usize,
    finished_ttl: Duration,
    save: Arc<Script>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("limit", &self.limit)
            .field("finished_ttl", &self.finished_ttl)
            .finish_non_exhaustive()
    }
}

fn unavailable(err: RedisError) -> StoreError {
    StoreError::unavailable_from(format!("Redis: {err}"), err)
}

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://host:port/db`), with keys
    /// under `toolstack:`; waits at most the timeout for the connection.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(unavailable)?;
        let manager = tokio::time::timeout(DEFAULT_TIMEOUT, ConnectionManager::new(client))
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "Redis at {url} did not answer within {DEFAULT_TIMEOUT:?}"
                ))
            })?
            .map_err(unavailable)?;
        Ok(Self::new(manager))
    }

    /// A store over `manager`, with keys under `toolstack:`.
    pub fn new(manager: ConnectionManager) -> Self {
        RedisStore {
            manager,
            prefix: Arc::from("toolstack:"),
            timeout: DEFAULT_TIMEOUT,
            limit: MAX_CHECKPOINT_BYTES,
            finished_ttl: DEFAULT_FINISHED_TTL,
            save: Arc::new(Script::new(SAVE)),
        }
    }

    /// Keys under `prefix`: stores with the same Redis and prefix share
    /// their runs.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(prefix);
        self
    }

    /// Waits at most `timeout` for each command.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Refuses checkpoints larger than `bytes`.
    pub fn max_checkpoint_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Keeps a finished run for `ttl` after its last checkpoint.
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = ttl;
        self
    }

    /// The hash of run `run_id`.
    pub fn key_of(&self, run_id: &str) -> String {
        format!("{}run:{run_id}", self.prefix)
    }

    fn waiting_key(&self) -> String {
        format!("{}waiting", self.prefix)
    }

    pub(crate) async fn bounded<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, command).await {
            Ok(answer) => answer.map_err(unavailable),
            Err(_) => Err(StoreError::unavailable(format!(
                "Redis did not answer within {:?}",
                self.timeout
            ))),
        }
    }
}

impl RunStore for RedisStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            let key = self.key_of(run_id);
            let (version, bytes): (Option<u64>, Option<Vec<u8>>) = self
                .bounded(
                    redis::cmd("HMGET")
                        .arg(&key)
                        .arg("version")
                        .arg("checkpoint")
                        .query_async(&mut connection),
                )
                .await?;
            let (Some(version), Some(bytes)) = (version, bytes) else {
                return Ok(None);
            };
            let checkpoint = Checkpoint::from_bytes(run_id, &bytes, self.limit)?;
            Ok(Some(Stored {
                checkpoint,
                version: Version(version),
            }))
        })
    }

    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        Box::pin(async move {
            let bytes = checkpoint.to_bytes(self.limit)?;
            let ttl = match checkpoint.status {
                RunStatus::Done { .. } => u64::try_from(self.finished_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
                _ => 0,
            };
            let mut connection = self.manager.clone();
            let mut invocation = self.save.prepare_invoke();
            invocation
                .key(self.key_of(&checkpoint.run_id))
                .key(self.waiting_key())
                .arg(expected.0)
                .arg(bytes)
                .arg(checkpoint.status.as_str())
                .arg(&checkpoint.run_id)
                .arg(ttl);
            let (saved, version): (u8, u64) = self
                .bounded(invocation.invoke_async(&mut connection))
                .await?;
            if saved == 1 {
                Ok(Version(version))
            } else {
                Err(StoreError::Conflict {
                    run_id: checkpoint.run_id.clone(),
                    expected,
                    found: Version(version),
                })
            }
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            let mut ids: Vec<String> = self
                .bounded(connection.smembers(self.waiting_key()))
                .await?;
            ids.sort();
            Ok(ids)
        })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            let (removed, _): (u64, u64) = self
                .bounded(
                    redis::pipe()
                        .atomic()
                        .del(self.key_of(run_id))
                        .srem(self.waiting_key(), run_id)
                        .query_async(&mut connection),
                )
                .await?;
            Ok(removed > 0)
        })
    }
}
