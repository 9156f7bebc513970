//! [`RedisStore`]: runs' journals in Redis, shared by every process that
//! uses the same Redis and prefix.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}run:{id}` | hash | the run's `version`, `head`, and its snapshot (`checkpoint`, absent before the first one) |
//! | `{prefix}records:{id}` | list | the run's records since its snapshot, in order |
//! | `{prefix}waiting_since` | sorted set | the runs waiting for a decision, scored by when they were written |
//!
//! An append is one Lua script — compare the version; push the records
//! (or write the snapshot and drop the records it replaces); rewrite the
//! head; keep the waiting set; set or clear the expiry — so the
//! compare-and-set is atomic across processes and costs the change, not
//! the run. A load reads the hash and the list in one `MULTI`. A finished
//! run (hash and list) expires after
//! [`finished_ttl`](RedisStore::finished_ttl) (a day by default); other
//! runs do not expire. Every command waits at most
//! [`timeout`](RedisStore::timeout) (2 s by default) for Redis: a store
//! that is down is [`StoreError::Unavailable`] within that bound.
//!
//! A lost connection (Redis restarted, a Sentinel failover, a broken
//! pipe) is made again by the [`ConnectionManager`] on the next command.
//! An error that passes — the connection's, no answer within the timeout,
//! a server loading its data, busy, mid-failover or out of room
//! (`LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN`,
//! `READONLY`, `NOREPLICAS`, `OOM`, `MISCONF`) — is
//! [`StoreError::Unavailable`], which an agent tries again for its
//! [`store_outage`](crate::agent::Agent::store_outage), so a run rides a
//! restart out; any other (a script error, a key of the wrong type, a
//! reply that does not parse) is [`StoreError::Failed`], at once. [`connect`](RedisStore::connect) sets the
//! manager for that: no response timeout of its own (each command is
//! bounded by the store's [`timeout`](RedisStore::timeout), which a
//! shorter response timeout would override), a connection attempt
//! bounded by the store's default timeout, and reconnection retries
//! 100 ms doubling to at most 1 s apart (a restarted Redis is found within
//! a second of answering). A manager given to [`new`](RedisStore::new) is
//! used as it is set.
//!
//! A run stored before the journal (a hash of `version` and `checkpoint`)
//! loads as a snapshot with its version, and takes appends. The runs that
//! were waiting then were kept in a plain set, `{prefix}waiting`, which
//! this store neither counts nor expires.
//!
//! ```no_run
//! use toolstack::agent::store::redis::RedisStore;
//! use toolstack::agent::store::RunStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), toolstack::agent::store::StoreError> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379/")
//!     .await?
//!     .prefix("myapp:");
//! println!("{} runs wait for a decision", store.waiting_count().await?);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, RedisError, Script};

use super::{Append, Journal, RunStatus, RunStore, StoreError, Stored, Version, MAX_RECORD_BYTES};

pub use super::DEFAULT_FINISHED_TTL;

/// The default bound on one command: 2 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The most waiting runs one script forgets: a long backlog is forgotten
/// in several, so that Redis never blocks on all of it.
const EXPIRE_BATCH: usize = 1000;

/// KEYS: the run's hash, its records, the waiting set. ARGV: the expected
/// version, the new version, the head, the status, the run id, the TTL in
/// ms (empty: the run is not finished; 0: it is forgotten now), when it
/// was written, `1` and a snapshot or `0` and nothing, then the records.
/// Returns `{1, new version}` or `{0, version found}`.
const APPEND: &str = r"
local found = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if found ~= tonumber(ARGV[1]) then
  return {0, found}
end
if found == 0 then
  -- A new run starts from nothing: an expired one may have left a part.
  redis.call('DEL', KEYS[1], KEYS[2])
end
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'checkpoint', ARGV[9])
else
  -- In slices: unpack is bounded by Lua's stack.
  for first = 10, #ARGV, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(ARGV, first, math.min(first + 999, #ARGV)))
  end
end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'head', ARGV[3])
if ARGV[4] == 'waiting' then
  redis.call('ZADD', KEYS[3], ARGV[7], ARGV[5])
else
  redis.call('ZREM', KEYS[3], ARGV[5])
end
if ARGV[6] == '' then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
elseif tonumber(ARGV[6]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return {1, tonumber(ARGV[2])}
";

/// KEYS: the waiting set. ARGV: the instant (exclusive), the most runs to
/// forget, the key prefix. Forgets the runs waiting since before the
/// instant, the oldest first; returns how many.
const EXPIRE_WAITING: &str = r"
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[3] .. 'run:' .. id, ARGV[3] .. 'records:' .. id)
  redis.call('ZREM', KEYS[1], id)
end
return #ids
";

/// Runs' journals in Redis; see the [module docs](self). Clones share the
/// connection.
#[derive(Clone)]
pub struct RedisStore {
    manager: ConnectionManager,
    prefix: Arc<str>,
    timeout: Duration,
    limit: usize,
    finished_ttl: Duration,
    append: Arc<Script>,
    expire_waiting: Arc<Script>,
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

/// A Redis error as the store's: an outage that passes is
/// [`Unavailable`](StoreError::Unavailable) (and ridden out), anything
/// else [`Failed`](StoreError::Failed) (and not tried again).
fn store_error(err: RedisError) -> StoreError {
    match passes(&err) {
        true => StoreError::unavailable_from(format!("Redis: {err}"), err),
        false => StoreError::failed_from(format!("Redis: {err}"), err),
    }
}

/// The error codes of a Redis that cannot take a command for now, but
/// will: loading its data after a restart (`LOADING`), running a slow
/// script (`BUSY`), mid-failover (`TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN`,
/// `READONLY` from a primary just demoted, `NOREPLICAS` while too few
/// replicas answer), or out of room (`OOM` under `maxmemory`, which
/// finished runs expiring frees; `MISCONF` when it cannot write its
/// append-only file or snapshot, a full disk) — the faults an agent rides
/// out, as it does a full SQLite file.
const PASSING_CODES: [&str; 9] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
    "NOREPLICAS",
    "OOM",
    "MISCONF",
];

/// Whether `err` is an outage that passes: the connection (refused,
/// reset, a broken pipe, no answer in time — every I/O error), a
/// Sentinel or Cluster that has no primary to give yet, or a server state
/// of [`PASSING_CODES`] (in any command of a pipeline or transaction).
/// Not: a script error, a key of the wrong type, a reply that does not
/// parse, a command or configuration Redis refuses — trying again would
/// meet it again.
fn passes(err: &RedisError) -> bool {
    use redis::ErrorKind;
    if err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
    {
        return true;
    }
    if matches!(
        err.kind(),
        ErrorKind::ClusterConnectionNotFound
            | ErrorKind::MasterNameNotFoundBySentinel
            | ErrorKind::NoValidReplicasFoundBySentinel
    ) {
        return true;
    }
    let passing = |code: &str| PASSING_CODES.contains(&code);
    if err.code().is_some_and(passing) {
        return true;
    }
    // A pipeline's or transaction's errors, one per failed command.
    err.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, err)| passing(err.code())))
}

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://host:port/db`), with keys
    /// under `toolstack:`; waits at most the timeout for the connection.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(store_error)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(DEFAULT_TIMEOUT))
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1));
        let connecting = ConnectionManager::new_with_config(client, config);
        let manager = tokio::time::timeout(DEFAULT_TIMEOUT, connecting)
            .await
            .map_err(|_| {
                StoreError::unavailable(format!(
                    "Redis at {url} did not answer within {DEFAULT_TIMEOUT:?}"
                ))
            })?
            .map_err(store_error)?;
        Ok(Self::new(manager))
    }

    /// A store over `manager`, with keys under `toolstack:`.
    pub fn new(manager: ConnectionManager) -> Self {
        RedisStore {
            manager,
            prefix: Arc::from("toolstack:"),
            timeout: DEFAULT_TIMEOUT,
            limit: MAX_RECORD_BYTES,
            finished_ttl: DEFAULT_FINISHED_TTL,
            append: Arc::new(Script::new(APPEND)),
            expire_waiting: Arc::new(Script::new(EXPIRE_WAITING)),
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

    /// Refuses records larger than `bytes` ([`MAX_RECORD_BYTES`] by
    /// default).
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Keeps a finished run for `ttl` after its last append (zero: it is
    /// forgotten as it ends).
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = ttl;
        self
    }

    /// The hash of run `run_id`.
    pub fn key_of(&self, run_id: &str) -> String {
        format!("{}run:{run_id}", self.prefix)
    }

    /// The list of run `run_id`'s records.
    fn records_key(&self, run_id: &str) -> String {
        // Apart from the runs' hashes: no run id names another's key.
        format!("{}records:{run_id}", self.prefix)
    }

    fn waiting_key(&self) -> String {
        format!("{}waiting_since", self.prefix)
    }

    /// `name` under the store's prefix: the key of something a feature
    /// keeps next to the runs, in the same Redis (the AI SDK endpoint's
    /// chunk log) — the way in for it, so that the store names only the
    /// runs' keys. Its names must not begin as the runs' do (`run:`,
    /// `records:`, `waiting_since`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // only the chunk log uses it
    pub(crate) fn prefixed(&self, name: std::fmt::Arguments<'_>) -> String {
        format!("{}{name}", self.prefix)
    }

    /// A connection to the store's Redis, shared with the store (a
    /// multiplexed connection: cloning it is cheap); each command on it
    /// goes through [`bounded`](Self::bounded).
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // only the chunk log uses it
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.manager.clone()
    }

    /// Waits at most the store's [`timeout`](Self::timeout) for `command`;
    /// no answer in time, or a Redis error that passes (the connection, a
    /// server loading or failing over), is the store's
    /// [`Unavailable`](StoreError::Unavailable); any other Redis error
    /// (a script's, a wrong type, a reply that does not parse) is
    /// [`Failed`](StoreError::Failed).
    pub(crate) async fn bounded<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, command).await {
            Ok(answer) => answer.map_err(store_error),
            Err(_) => Err(StoreError::unavailable(format!(
                "Redis did not answer within {:?}",
                self.timeout
            ))),
        }
    }
}

/// A run's hash as loaded: its version, head and snapshot.
type Hash = (Option<u64>, Option<Vec<u8>>, Option<Vec<u8>>);

impl RunStore for RedisStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            let ((version, head, snapshot), records): (Hash, Vec<Vec<u8>>) = self
                .bounded(
                    redis::pipe()
                        .atomic()
                        .hmget(self.key_of(run_id), &["version", "head", "checkpoint"])
                        .lrange(self.records_key(run_id), 0, -1)
                        .query_async(&mut connection),
                )
                .await?;
            let Some(version) = version else {
                return Ok(None);
            };
            Journal {
                run_id,
                version: Version(version),
                head: head.as_deref(),
                snapshot: snapshot.as_deref(),
                records: records.iter().map(Vec::as_slice).collect(),
            }
            .fold(self.limit)
            .map(Some)
        })
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        Box::pin(async move {
            let ttl = match append.head.status {
                RunStatus::Done { .. } => u64::try_from(self.finished_ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .to_string(),
                _ => String::new(),
            };
            let mut invocation = self.append.prepare_invoke();
            invocation
                .key(self.key_of(append.run_id))
                .key(self.records_key(append.run_id))
                .key(self.waiting_key())
                .arg(append.expected.0)
                .arg(append.version().0)
                .arg(append.head_bytes)
                .arg(append.head.status.as_str())
                .arg(append.run_id)
                .arg(ttl)
                .arg(append.head.saved_at_ms);
            match append.snapshot {
                Some(snapshot) => invocation.arg("1").arg(snapshot),
                None => invocation.arg("0").arg("").arg(append.records),
            };
            let mut connection = self.manager.clone();
            let (appended, version): (u8, u64) = self
                .bounded(invocation.invoke_async(&mut connection))
                .await?;
            match appended {
                1 => Ok(Version(version)),
                _ => Err(append.conflict(Version(version))),
            }
        })
    }

    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            self.bounded(connection.zcard(self.waiting_key())).await
        })
    }

    fn expire_waiting(&self, saved_before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut expired = 0;
            loop {
                let mut connection = self.manager.clone();
                let mut invocation = self.expire_waiting.prepare_invoke();
                invocation
                    .key(self.waiting_key())
                    .arg(saved_before_ms)
                    .arg(EXPIRE_BATCH)
                    .arg(&*self.prefix);
                let batch: usize = self
                    .bounded(invocation.invoke_async(&mut connection))
                    .await?;
                expired += batch;
                if batch < EXPIRE_BATCH {
                    return Ok(expired);
                }
            }
        })
    }

    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            // `ZRANGE 0 -1` would be all of them.
            let Some(last) = limit.checked_sub(1) else {
                return Ok(Vec::new());
            };
            let last = isize::try_from(last).unwrap_or(isize::MAX);
            let mut connection = self.manager.clone();
            self.bounded(connection.zrange(self.waiting_key(), 0, last))
                .await
        })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut connection = self.manager.clone();
            let (removed, _, _): (u64, u64, u64) = self
                .bounded(
                    redis::pipe()
                        .atomic()
                        .del(self.key_of(run_id))
                        .del(self.records_key(run_id))
                        .zrem(self.waiting_key(), run_id)
                        .query_async(&mut connection),
                )
                .await?;
            Ok(removed > 0)
        })
    }

    fn max_record_bytes(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error Redis answers with `line` (a RESP error, `-CODE detail`).
    fn server(line: &str) -> RedisError {
        let reply = format!("-{line}\r\n");
        let value = redis::parse_redis_value(reply.as_bytes()).expect("a RESP error");
        value.extract_error().expect_err("an error reply")
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        std::io::Error::new(kind, "injected").into()
    }

    #[test]
    fn an_outage_that_passes_is_unavailable() {
        let passing = [
            io(std::io::ErrorKind::ConnectionRefused),
            io(std::io::ErrorKind::ConnectionReset),
            io(std::io::ErrorKind::BrokenPipe),
            io(std::io::ErrorKind::TimedOut),
            io(std::io::ErrorKind::UnexpectedEof),
            server("LOADING Redis is loading the dataset in memory"),
            server("BUSY Redis is busy running a script"),
            server("TRYAGAIN Multiple keys request during rehashing of slot"),
            server("MASTERDOWN Link with MASTER is down"),
            server("CLUSTERDOWN The cluster is down"),
            server("READONLY You can't write against a read only replica."),
            server("NOREPLICAS Not enough good replicas to write."),
            server("OOM command not allowed when used memory > 'maxmemory'."),
            server("MISCONF Errors writing to the AOF file: No space left on device"),
        ];
        for err in passing {
            let text = err.to_string();
            let classified = store_error(err);
            assert!(
                matches!(classified, StoreError::Unavailable { .. }),
                "{text}: {classified}"
            );
            // Said once, with what Redis said.
            assert!(classified.to_string().contains("Redis: "), "{classified}");
        }
    }

    #[test]
    fn an_error_that_would_come_again_is_failed_and_not_retried() {
        let lasting = [
            server("ERR user_script:3: Script attempted to access nonexistent global variable 'x'"),
            server("WRONGTYPE Operation against a key holding the wrong kind of value"),
            server("ERR unknown command 'HGETDEL'"),
            server("NOPERM User has no permissions to run the 'eval' command"),
            RedisError::from((redis::ErrorKind::UnexpectedReturnType, "not a number")),
            RedisError::from(redis::ParsingError::from(
                "Response was of incompatible type".to_owned(),
            )),
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad url")),
        ];
        for err in lasting {
            let text = err.to_string();
            let classified = store_error(err);
            assert!(
                matches!(classified, StoreError::Failed { .. }),
                "{text}: {classified}"
            );
            let tool: crate::ToolError = classified.into();
            assert_eq!(tool.kind(), crate::ErrorKind::Failed, "{text}");
        }
    }
}
