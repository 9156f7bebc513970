//! The buckets in Redis: [`RedisLimiter`], given to
//! [`RateLimitLayer::redis`](super::RateLimitLayer::redis).

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use governor::Quota;
use redis::aio::ConnectionManager;
use redis::Script;
use sha2::{Digest, Sha256};

use super::limiter::BucketKey;
use super::shared::{Fallback, SharedStore, SharedStoreError, StoreVerdict};
use crate::redis::{ask, micros_ceil, Health, RedisSettings};
use crate::shared_store::{push_caller, push_hex};

/// GCRA, as redis-cell and the Redis rate-limiting guides do it: one key
/// per bucket holding its theoretical arrival time (TAT), on the server's
/// clock so that processes whose clocks disagree still share one quota.
const GCRA: &str = r"
-- KEYS[1]: the bucket's TAT, in microseconds of this server's clock.
-- ARGV[1]: the emission interval (one cell), ARGV[2]: the burst tolerance
-- ((burst - 1) intervals), both in microseconds. ARGV[3], when given: the
-- time to take as now, in microseconds (the tests' clock; the layer never
-- sends it).
-- {1, 0}: a cell was taken. {0, wait}: none left; one comes back in `wait`
-- microseconds (nothing is written).
if redis.replicate_commands then redis.replicate_commands() end
local now = tonumber(ARGV[3])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local allowed_at = tat - tolerance
if now < allowed_at then
  return {0, math.ceil(allowed_at - now)}
end
tat = tat + interval
-- The key lives as long as the bucket is not full: once it has expired,
-- the bucket is as good as new.
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
return {1, 0}
";

// Loaded into Redis once (by the first `EVAL` after an `EVALSHA` that
// missed), then called by its SHA-1.
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(GCRA));

/// Names longer than this, or with other characters than ASCII letters,
/// digits, `-`, `_` and `.`, are hashed in keys.
const MAX_VERBATIM_NAME: usize = 64;

/// Where a [`RateLimitLayer`](super::RateLimitLayer) keeps its buckets
/// when the processes that make the calls share one quota: Redis, reached
/// through a [`ConnectionManager`] (which reconnects on its own), under a
/// key prefix.
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use toolstack_layers::rate_limit::{Quota, RateLimitLayer, RedisLimiter};
///
/// # async fn run() -> redis::RedisResult<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// // Give up on a dead server quickly; the manager reconnects as calls
/// // come in.
/// let config = ConnectionManagerConfig::new()
///     .set_connection_timeout(Some(Duration::from_millis(250)))
///     .set_response_timeout(Some(Duration::from_millis(250)))
///     .set_number_of_retries(1)
///     .set_max_delay(Duration::from_secs(1));
/// let manager = ConnectionManager::new_with_config(client, config).await?;
///
/// // 60 calls a minute per tool, across every process with this prefix.
/// let limit = RateLimitLayer::per_tool(Quota::per_minute(NonZeroU32::new(60).unwrap()))
///     .reject()
///     .redis(RedisLimiter::new(manager).prefix("myapp:rl"));
/// # let _ = limit;
/// # Ok(()) }
/// ```
///
/// # The quota in Redis
///
/// Each call runs one Lua script (`EVALSHA`) on its bucket's key: GCRA
/// (the algorithm [`governor`] runs in process), on the Redis server's
/// clock (`TIME`). The script reads the bucket's theoretical arrival time
/// and, when the burst tolerance allows the call, moves it one interval on
/// and writes it with a time to live of the time until the bucket is full
/// again; when it does not, it writes nothing and answers the time until
/// one call is allowed. Taking and refusing are atomic, so any number of
/// processes share one quota exactly. The quota is the layer's: layers
/// that share a prefix should have the same quota (each takes its cells at
/// its own rate from the same arrival time).
///
/// Over the limit, a call does what the layer's mode says: it sleeps (on
/// tokio's clock) for the time Redis answered and asks again
/// ([`wait`](super::RateLimitLayer::wait), bounded by
/// [`wait_at_most`](super::RateLimitLayer::wait_at_most)), or fails at once
/// with `RateLimited { retry_after }`
/// ([`reject`](super::RateLimitLayer::reject)).
///
/// Quotas are kept to the microsecond: a quota faster than a million calls
/// a second per bucket is a million.
///
/// # Keys
///
/// | layer | key |
/// |---|---|
/// | `global` | `{prefix}:all` |
/// | `per_tool`, over tools | `{prefix}:tool:{name}` |
/// | `per_tool`, over models | `{prefix}:model:{name}`; `{prefix}:model` for requests that name none |
/// | `per_caller::<K>` | `{prefix}:caller:{hash}`; `{prefix}:anonymous` for requests without a `K` |
///
/// A name longer than 64 bytes, or with other characters than ASCII
/// letters, digits, `-`, `_` and `.`, is written `#` and a hash; a caller
/// is always a hash — 128 bits of SHA-256, in hex, of what the key's
/// [`Hash`](std::hash::Hash) feeds a hasher (integers little-endian), the
/// same in every process that has the same `K`. A key is thus at most the
/// prefix and 40 bytes long, whatever the caller sends.
///
/// # When Redis does not answer
///
/// A command that fails, or gets no answer within the
/// [`timeout`](Self::timeout) (250 ms unless set), does not fail the call
/// by itself: the layer falls back, and says so in a `tracing` warning on
/// the call's span (`toolstack.rate_limit.store = "redis"`,
/// `toolstack.rate_limit.fallback = "open"` or `"closed"`):
///
/// * [`fail_open`](Self::fail_open) (the default): the layer's own
///   in-process limiter decides, with the same quota and keys (it counts
///   only the calls it decides; a call that fell back stays with it until
///   it is admitted) — each process then enforces the quota on its own, so
///   all of them together allow up to one quota per process.
/// * [`fail_closed`](Self::fail_closed): the call fails with
///   [`ErrorKind::Unavailable`](toolstack::ErrorKind::Unavailable), saying
///   the shared rate limit's store is unreachable (the tool never started).
///
/// After Redis could not be reached (a connection error or a timeout),
/// calls fall back at once, without asking it, for
/// [`recheck_after`](Self::recheck_after) (1 s unless set); then one call
/// asks again, and the first answer puts every call back on Redis. A call
/// therefore never waits for Redis longer than the timeout, and a dead
/// Redis costs one timeout per pause, not one per call. The manager's own
/// connection timeout, response timeout and retries (its
/// `ConnectionManagerConfig`) decide how fast it notices a dead server and
/// reconnects; keep them near the timeout, as above.
#[derive(Clone)]
pub struct RedisLimiter {
    settings: RedisSettings,
    fallback: Fallback,
}

impl RedisLimiter {
    /// Buckets in the Redis that `manager` connects to, under the prefix
    /// `toolstack:rl`, failing open, with a 250 ms command timeout.
    pub fn new(manager: ConnectionManager) -> Self {
        RedisLimiter {
            settings: RedisSettings::new(manager, "toolstack:rl"),
            fallback: Fallback::Open,
        }
    }

    /// The prefix of every key (`{prefix}:tool:search`, …): layers, in any
    /// process, that use the same Redis and prefix share their buckets.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = Arc::from(prefix.into());
        self
    }

    /// How long a call waits for Redis's answer before it falls back
    /// (default 250 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// How long calls fall back without asking Redis after it could not be
    /// reached (default 1 s).
    pub fn recheck_after(mut self, pause: Duration) -> Self {
        self.settings.recheck_after = pause;
        self
    }

    /// When Redis does not answer, the layer's in-process limiter decides
    /// (the default).
    pub fn fail_open(mut self) -> Self {
        self.fallback = Fallback::Open;
        self
    }

    /// When Redis does not answer, the call fails as
    /// [`Unavailable`](toolstack::ErrorKind::Unavailable).
    pub fn fail_closed(mut self) -> Self {
        self.fallback = Fallback::Closed;
        self
    }

    pub(super) fn into_store(self, quota: Quota) -> RedisBuckets {
        let (interval, tolerance) = script_quota(quota);
        RedisBuckets {
            config: self,
            interval,
            tolerance,
            health: Arc::new(Health::new()),
        }
    }
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("prefix", &self.settings.prefix)
            .field("timeout", &self.settings.timeout)
            .field("recheck_after", &self.settings.recheck_after)
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

/// A [`RedisLimiter`] with the layer's quota, in the script's units.
pub(super) struct RedisBuckets {
    config: RedisLimiter,
    /// One cell, in microseconds.
    interval: u64,
    /// How far ahead of now a bucket's arrival time may be, in
    /// microseconds: `burst - 1` cells.
    tolerance: u64,
    health: Arc<Health>,
}

impl SharedStore for RedisBuckets {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn fallback(&self) -> Fallback {
        self.config.fallback
    }

    fn key(&self, bucket: BucketKey<'_>) -> Arc<str> {
        redis_key(&self.config.settings.prefix, bucket).into()
    }

    fn take(&self, key: &Arc<str>) -> BoxFuture<'static, Result<StoreVerdict, SharedStoreError>> {
        let key = Arc::clone(key);
        let (interval, tolerance) = (self.interval, self.tolerance);
        let answer = ask(&self.config.settings, &self.health, move |mut manager| {
            Box::pin(async move {
                let mut invocation = SCRIPT.key(&*key);
                invocation.arg(interval).arg(tolerance);
                invocation.invoke_async::<(i64, i64)>(&mut manager).await
            })
        });
        Box::pin(async move {
            Ok(match answer.await? {
                (1, _) => StoreVerdict::Allowed,
                (_, wait) => StoreVerdict::Wait(Duration::from_micros(wait.max(1) as u64)),
            })
        })
    }
}

impl fmt::Debug for RedisBuckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBuckets")
            .field("config", &self.config)
            .field("interval_us", &self.interval)
            .field("tolerance_us", &self.tolerance)
            .finish()
    }
}

/// The Redis key of `bucket` under `prefix` (see the table on
/// [`RedisLimiter`]).
fn redis_key(prefix: &str, bucket: BucketKey<'_>) -> String {
    let mut key = String::with_capacity(prefix.len() + 48);
    key.push_str(prefix);
    key.push(':');
    match bucket {
        BucketKey::All => key.push_str("all"),
        BucketKey::Target { kind, target } => {
            key.push_str(kind.as_str());
            if !target.is_empty() {
                key.push(':');
                push_name(&mut key, target);
            }
        }
        BucketKey::Caller(caller) => {
            key.push_str("caller:");
            push_caller(&mut key, caller);
        }
        BucketKey::Anonymous => key.push_str("anonymous"),
    }
    key
}

/// `quota` in the script's units: one cell, and the burst tolerance
/// (`burst - 1` cells), in microseconds.
fn script_quota(quota: Quota) -> (u64, u64) {
    let interval = micros_ceil(quota.replenish_interval()).max(1);
    let tolerance = interval.saturating_mul(u64::from(quota.burst_size().get() - 1));
    (interval, tolerance)
}

/// `name` as it is, when short and plain; else `#` and its hash.
fn push_name(key: &mut String, name: &str) {
    let plain = name.len() <= MAX_VERBATIM_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if plain {
        key.push_str(name);
    } else {
        key.push('#');
        push_hex(key, &Sha256::digest(name.as_bytes())[..16]);
    }
}

// The tests' own `redis-server` (the integration tests' helper).
#[cfg(test)]
#[path = "../../tests/support/redis.rs"]
mod test_server;

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::test_server::RedisServer;
    use super::*;
    use crate::CallKind;

    /// The script on `key`, as if the server's clock read `now` (µs).
    async fn take_at(
        connection: &mut redis::aio::MultiplexedConnection,
        key: &str,
        (interval, tolerance): (u64, u64),
        now: u64,
    ) -> (i64, i64) {
        SCRIPT
            .key(key)
            .arg(interval)
            .arg(tolerance)
            .arg(now)
            .invoke_async(connection)
            .await
            .expect("the script runs")
    }

    fn quota(per_second: u32, burst: u32) -> Quota {
        Quota::per_second(NonZeroU32::new(per_second).unwrap())
            .allow_burst(NonZeroU32::new(burst).unwrap())
    }

    // A server's clock in microseconds, as `TIME` gives it (2026).
    const T0: u64 = 1_796_000_000_000_000;

    #[tokio::test]
    async fn the_script_admits_the_burst_then_one_cell_per_interval_on_its_clock() {
        let Some(server) = RedisServer::start("the script's arithmetic") else {
            return;
        };
        let mut redis = server.connection().await;
        // 1 call/s with a burst of 5: the tolerance is 4 s. Keys live as
        // long as their bucket is not full, in real time: at least a
        // second here, far longer than the test takes between two steps.
        let q = script_quota(quota(1, 5));
        assert_eq!(q, (1_000_000, 4_000_000));
        for _ in 0..5 {
            assert_eq!(take_at(&mut redis, "b", q, T0).await, (1, 0));
        }
        assert_eq!(take_at(&mut redis, "b", q, T0).await, (0, 1_000_000));
        assert_eq!(take_at(&mut redis, "b", q, T0 + 999_999).await, (0, 1));
        assert_eq!(take_at(&mut redis, "b", q, T0 + 1_000_000).await, (1, 0));
        assert_eq!(
            take_at(&mut redis, "b", q, T0 + 1_000_000).await,
            (0, 1_000_000)
        );

        // Continuous demand (an ask every 70 ms for 200 s): one cell per
        // interval, none lost to rounding, none gained.
        let mut admitted = 0;
        let mut now = T0 + 1_000_000;
        let end = now + 200_000_000;
        while now < end {
            now += 70_000;
            admitted += take_at(&mut redis, "b", q, now).await.0;
        }
        assert_eq!(admitted, 200, "admitted in 200 s at 1/s");

        // A stall longer than the tolerance: the bucket is full again, and
        // holds no more than its burst.
        now += 60_000_000;
        let mut burst = 0;
        for _ in 0..10 {
            burst += take_at(&mut redis, "b", q, now).await.0;
        }
        assert_eq!(burst, 5);
    }

    #[tokio::test]
    async fn an_interval_that_does_not_divide_a_second_loses_a_microsecond_a_cell_at_most() {
        let Some(server) = RedisServer::start("the script's rounding") else {
            return;
        };
        let mut redis = server.connection().await;
        // 3 calls/s: 333,333.33 µs a cell, kept as 333,334; a burst of 2,
        // so that an ask up to one cell late still gets its cell.
        let q = script_quota(quota(3, 2));
        assert_eq!(q, (333_334, 333_334));
        let mut admitted = 0;
        let mut now = T0;
        // 100 s of demand, an ask every 20 ms: the burst and 300 cells,
        // less the one the rounding (2 µs per 3 cells) delays past the end.
        while now <= T0 + 100_000_000 {
            admitted += take_at(&mut redis, "r", q, now).await.0;
            now += 20_000;
        }
        assert_eq!(admitted, 2 + 300 - 1, "admitted in 100 s at 3/s");
    }

    fn tool(target: &str) -> String {
        let bucket = BucketKey::Target {
            kind: CallKind::Tool,
            target,
        };
        redis_key("p", bucket)
    }

    #[test]
    fn plain_names_are_kept_and_others_hashed_to_a_bounded_key() {
        assert_eq!(tool("search_web-2.1"), "p:tool:search_web-2.1");
        let hashed = tool("with space");
        assert!(hashed.starts_with("p:tool:#") && hashed.len() == "p:tool:#".len() + 32);
        assert_eq!(tool(&"x".repeat(10_000)).len(), hashed.len());
        assert_ne!(tool(&"x".repeat(65)), tool(&"x".repeat(66)));
        let unnamed = BucketKey::Target {
            kind: CallKind::Model,
            target: "",
        };
        assert_eq!(redis_key("p", unnamed), "p:model");
        assert_eq!(redis_key("p", BucketKey::All), "p:all");
        assert_eq!(redis_key("p", BucketKey::Anonymous), "p:anonymous");
    }

    #[test]
    fn a_callers_key_is_the_same_in_every_process_and_platform() {
        #[derive(Hash)]
        struct Caller(String, u32, usize);
        // What `Hash` writes: the string's bytes and 0xff, then each
        // integer little-endian, `usize` as 8 bytes.
        let mut fed = b"alice\xff".to_vec();
        fed.extend_from_slice(&7u32.to_le_bytes());
        fed.extend_from_slice(&9u64.to_le_bytes());
        let mut hash = String::new();
        push_hex(&mut hash, &Sha256::digest(&fed)[..16]);
        let caller = Caller("alice".into(), 7, 9);
        assert_eq!(
            redis_key("p", BucketKey::Caller(&caller)),
            format!("p:caller:{hash}")
        );
    }

    #[test]
    fn the_script_gets_the_quota_in_microseconds() {
        let quota = Quota::per_second(NonZeroU32::new(4).unwrap());
        assert_eq!(script_quota(quota), (250_000, 750_000));
        let fast = Quota::per_second(NonZeroU32::MAX);
        assert_eq!(script_quota(fast).0, 1, "at least one microsecond a cell");
    }
}
