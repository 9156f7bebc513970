//! The counters in Redis: [`RedisSpend`], given to
//! [`SpendLimitLayer::redis`](super::SpendLimitLayer::redis).

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::Script;
use toolstack::model::Cost;

use super::meter::{Reserved, SharedCounters, SharedReservation};
use super::rules::{CounterKey, Limit, Spent, Wanted};
use crate::redis::{ask, Health, RedisSettings};
use crate::shared_store::{Fallback, SharedStoreError};

/// Reserves what a call may spend on each of its counters, atomically:
/// drops the counters' expired reservations (a dead process's), judges
/// the call on what was spent and what the calls in flight reserved, and
/// reserves its maximum capped to what every limit has left.
///
/// Each counter (a hash of `tokens`, `nanos`, and the reserved totals
/// `rtokens`, `rnanos`) has a sorted set of its reservations
/// (`{counter}:r`, members `{id}:{tokens}:{nanos}` scored by their expiry
/// in ms): the totals are read in O(1), and only the expired reservations
/// are visited — none on the happy path — never a scan of them all.
const RESERVE: &str = r"
-- KEYS[i]: a counter; KEYS[n + i]: its reservations (n = #KEYS / 2).
-- ARGV: 1 now (ms), 2 the reservation's expiry (ms), 3 its id,
-- 4-5 the prompt's tokens and nano-dollars, 6-7 the whole call's,
-- 7 + i: KEYS[i]'s time to live (s); then, per limit, the counter's index
-- and its bound on tokens and on nanos (-1: none).
local n = #KEYS / 2
local now = tonumber(ARGV[1])
local held = {}
for i = 1, n do
  local counter, reserved = KEYS[i], KEYS[n + i]
  local expired = redis.call('ZRANGEBYSCORE', reserved, '-inf', now)
  for _, member in ipairs(expired) do
    local t, c = string.match(member, ':(%d+):(%d+)$')
    redis.call('HINCRBY', counter, 'rtokens', -tonumber(t))
    redis.call('HINCRBY', counter, 'rnanos', -tonumber(c))
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', reserved, '-inf', now)
  end
  local v = redis.call('HMGET', counter, 'tokens', 'nanos', 'rtokens', 'rnanos')
  held[i] = {tonumber(v[1]) or 0, tonumber(v[2]) or 0,
             math.max(tonumber(v[3]) or 0, 0), math.max(tonumber(v[4]) or 0, 0)}
end
local prompt = {tonumber(ARGV[4]), tonumber(ARGV[5])}
local take = {tonumber(ARGV[6]), tonumber(ARGV[7])}
local ok = 1
local at = 8 + n
while at + 2 <= #ARGV do
  local h = held[tonumber(ARGV[at])]
  for f = 1, 2 do
    local max = tonumber(ARGV[at + f])
    if max >= 0 then
      local left = math.max(max - h[f] - h[f + 2], 0)
      if h[f] >= max or prompt[f] > left then ok = 0 end
      take[f] = math.min(take[f], left)
    end
  end
  at = at + 3
end
local member = ''
if ok == 1 and (take[1] > 0 or take[2] > 0) then
  member = ARGV[3] .. ':' .. string.format('%d', take[1]) .. ':' .. string.format('%d', take[2])
  for i = 1, n do
    redis.call('HINCRBY', KEYS[i], 'rtokens', take[1])
    redis.call('HINCRBY', KEYS[i], 'rnanos', take[2])
    redis.call('EXPIRE', KEYS[i], ARGV[7 + i])
    redis.call('ZADD', KEYS[n + i], ARGV[2], member)
    redis.call('EXPIRE', KEYS[n + i], ARGV[7 + i])
  end
end
local reply = {ok, member}
for i = 1, n do
  for f = 1, 4 do table.insert(reply, string.format('%d', held[i][f])) end
end
return reply
";

/// Gives a call's reservations back (those not expired and dropped
/// already) and adds what it spent to each of its counters, each with its
/// time to live, atomically.
const SETTLE: &str = r"
-- KEYS as RESERVE's. ARGV: 1 how many reservations (m), 2..m+1 their
-- members (each names its tokens and nanos), then what was spent (tokens,
-- nanos), then KEYS[i]'s time to live (s).
local n = #KEYS / 2
local m = tonumber(ARGV[1])
local tokens, nanos = ARGV[m + 2], ARGV[m + 3]
for i = 1, n do
  for r = 2, m + 1 do
    if redis.call('ZREM', KEYS[n + i], ARGV[r]) == 1 then
      local t, c = string.match(ARGV[r], ':(%d+):(%d+)$')
      redis.call('HINCRBY', KEYS[i], 'rtokens', -tonumber(t))
      redis.call('HINCRBY', KEYS[i], 'rnanos', -tonumber(c))
    end
  end
  redis.call('HINCRBY', KEYS[i], 'tokens', tokens)
  redis.call('HINCRBY', KEYS[i], 'nanos', nanos)
  redis.call('EXPIRE', KEYS[i], ARGV[m + 3 + i])
end
return n
";

static RESERVE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RESERVE));
static SETTLE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE));

/// How long a window's counter outlives its window in Redis: replicas
/// whose clocks disagree by less than this still find it. The key names
/// the window, so a later window never reads it.
const WINDOW_GRACE_SECS: u64 = 300;

/// Where a [`SpendLimitLayer`](super::SpendLimitLayer) keeps its counters
/// when the processes that make the model calls share the limits: Redis,
/// reached through a [`ConnectionManager`] (which reconnects on its own),
/// under a key prefix.
///
/// ```no_run
/// use redis::aio::ConnectionManager;
/// use toolstack::model::{Cost, Price, Prices};
/// use toolstack_layers::spend::{Limit, RedisSpend, SpendLimitLayer, Window};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ConnectionManager::new(redis::Client::open("redis://127.0.0.1/")?).await?;
/// let prices = Prices::builder()
///     .model("gpt-4o*", Price::per_million_tokens(2.50, 10.00))
///     .build()?;
/// // $100 a day for all replicas together; refuse when Redis is down.
/// let limit = SpendLimitLayer::new(prices)
///     .global(Window::Day, Limit::cost(Cost::from_cents(10_000)))
///     .redis(RedisSpend::new(manager).prefix("myapp:spend").fail_closed());
/// # let _ = limit;
/// # Ok(()) }
/// ```
///
/// # The counters in Redis
///
/// Each counter is a hash (`tokens`, `nanos`: nano-dollars) under a key
/// that names whose spending it counts and its window:
///
/// | limit | key |
/// |---|---|
/// | `per_run` | `{prefix}:run:{hash}` |
/// | `per_caller::<K>` | `{prefix}:caller:{hash}:{window}`; `{prefix}:anonymous:{window}` for requests without a `K` |
/// | `global` | `{prefix}:all:{window}` |
///
/// where `{window}` is the window's start, `hour:2026-12-01T13`,
/// `day:2026-12-01` or `month:2026-12` (UTC, on this process's clock),
/// and `{hash}` 128 bits of SHA-256, in hex, of what the run id's or the
/// caller key's [`Hash`](std::hash::Hash) writes (integers
/// little-endian), the same in every process. Before a call, one Lua
/// script reserves what it may spend on each of its counters: it drops
/// the counters' expired reservations, judges the call on what was spent
/// (`tokens`, `nanos`) and what the calls in flight on every replica
/// reserved (`rtokens`, `rnanos`, fields of the same hash), and adds its
/// reservation to both the totals and the counter's sorted set
/// `{counter}:r` (member `{id}:{tokens}:{nanos}`, scored by its expiry in
/// ms, the [`reservation_ttl`](Self::reservation_ttl) from now). After
/// it, one script removes the reservation (`ZREM`; only if it was still
/// there, so an expired one is not given back twice), adds its tokens and
/// cost (`HINCRBY`) and sets the counter's time to live (`EXPIRE`): a
/// window's until it ends (and five minutes more, for replicas whose
/// clocks disagree), a run's for the layer's
/// [`run_ttl`](super::SpendLimitLayer::run_ttl) after its last call.
///
/// Totals kept beside the sorted set make a reservation O(log n) in the
/// calls in flight: the set is only read for its expired members — none,
/// unless a process died mid-call — never scanned whole. A reservation
/// whose process died returns when its time to live has passed (on the
/// system clock, read when it is made), at the next reservation on its
/// counter.
///
/// # When Redis does not answer
///
/// A command that fails, or gets no answer within the
/// [`timeout`](Self::timeout) (250 ms unless set), does not fail the call
/// by itself, and a `tracing` warning on the call's span says so
/// (`toolstack.spend.store = "redis"`, `toolstack.spend.fallback`):
///
/// * [`fail_open`](Self::fail_open) (the default): the counters this
///   process keeps decide (every process counts its own calls in memory
///   too) — each process then enforces the limits on its own spending.
/// * [`fail_closed`](Self::fail_closed): the call fails with
///   [`ErrorKind::Unavailable`](toolstack::ErrorKind::Unavailable), saying
///   the spend limit could not be checked (the model was not called).
///
/// What a call spent that Redis did not take is kept by this process
/// only (a warning says so). After Redis could not be reached, calls fall
/// back at once, without asking, for
/// [`recheck_after`](Self::recheck_after) (1 s unless set), as the rate
/// limit's Redis store does.
#[derive(Clone)]
pub struct RedisSpend {
    settings: RedisSettings,
    fallback: Fallback,
    reservation_ttl: Duration,
}

impl RedisSpend {
    /// Counters in the Redis that `manager` connects to, under the prefix
    /// `toolstack:spend`, failing open, with a 250 ms command timeout.
    pub fn new(manager: ConnectionManager) -> Self {
        RedisSpend {
            settings: RedisSettings::new(manager, "toolstack:spend"),
            fallback: Fallback::Open,
            reservation_ttl: Duration::from_secs(600),
        }
    }

    /// The prefix of every key: layers, in any process, that use the same
    /// Redis and prefix share their counters.
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

    /// How long a call's reservation lasts in Redis if it is not settled
    /// (10 minutes by default): a process that dies mid-call leaves its
    /// reservations, and they return when this has passed. Longer than
    /// the longest model call, or a call still running loses its
    /// reservation.
    pub fn reservation_ttl(mut self, ttl: Duration) -> Self {
        self.reservation_ttl = ttl;
        self
    }

    /// When Redis does not answer, this process's own counters decide
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

    pub(super) fn into_store(self) -> RedisCounters {
        RedisCounters {
            config: self,
            health: Arc::new(Health::new()),
        }
    }
}

impl fmt::Debug for RedisSpend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSpend")
            .field("prefix", &self.settings.prefix)
            .field("timeout", &self.settings.timeout)
            .field("recheck_after", &self.settings.recheck_after)
            .field("fallback", &self.fallback)
            .field("reservation_ttl", &self.reservation_ttl)
            .finish_non_exhaustive()
    }
}

/// A [`RedisSpend`] in use.
pub(super) struct RedisCounters {
    config: RedisSpend,
    health: Arc<Health>,
}

impl RedisCounters {
    /// The keys of a script: the counters, then their reservations.
    fn keys_of(&self, invocation: &mut redis::ScriptInvocation<'_>, keys: &[CounterKey]) {
        let names: Vec<String> = keys.iter().map(|key| self.key(key)).collect();
        for name in &names {
            invocation.key(name.as_str());
        }
        for name in names {
            invocation.key(name + ":r");
        }
    }

    fn key(&self, key: &CounterKey) -> String {
        let mut text = String::with_capacity(self.config.settings.prefix.len() + 64);
        text.push_str(&self.config.settings.prefix);
        text.push(':');
        text.push_str(key.scope.as_str());
        if let Some(hash) = &key.stable {
            text.push(':');
            text.push_str(hash);
        }
        if let Some(period) = &key.period {
            text.push(':');
            text.push_str(&period.label());
        }
        text
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SharedCounters for RedisCounters {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn fallback(&self) -> Fallback {
        self.config.fallback
    }

    fn reserve(
        &self,
        keys: &[CounterKey],
        limits: &[(usize, Limit)],
        wanted: Wanted,
        now: u64,
        run_ttl: u64,
    ) -> BoxFuture<'static, Result<Reserved, SharedStoreError>> {
        let now_ms = now_ms();
        let ttl_ms = u64::try_from(self.config.reservation_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut invocation = RESERVE_SCRIPT.prepare_invoke();
        self.keys_of(&mut invocation, keys);
        invocation
            .arg(to_i64(now_ms))
            .arg(to_i64(now_ms.saturating_add(ttl_ms.max(1))))
            .arg(reservation_id())
            .arg(to_i64(wanted.prompt.tokens))
            .arg(to_i64(wanted.prompt.cost.as_nanos()))
            .arg(to_i64(wanted.whole.tokens))
            .arg(to_i64(wanted.whole.cost.as_nanos()));
        for key in keys {
            invocation.arg(to_i64(
                ttl_of(key, now, run_ttl).max(ttl_ms.div_ceil(1_000)),
            ));
        }
        let bound = |max: Option<u64>| max.map_or(-1, to_i64);
        for &(at, limit) in limits {
            invocation
                .arg(at + 1)
                .arg(bound(limit.max_tokens()))
                .arg(bound(limit.max_cost().map(Cost::as_nanos)));
        }
        ask(&self.config.settings, &self.health, move |mut manager| {
            Box::pin(async move {
                let reply: Vec<redis::Value> = invocation.invoke_async(&mut manager).await?;
                Ok(parse_reserved(&reply))
            })
        })
    }

    fn settle(
        &self,
        keys: &[CounterKey],
        reservations: Vec<SharedReservation>,
        spent: Spent,
        now: u64,
        run_ttl: u64,
    ) -> BoxFuture<'static, Result<(), SharedStoreError>> {
        let mut invocation = SETTLE_SCRIPT.prepare_invoke();
        self.keys_of(&mut invocation, keys);
        invocation.arg(reservations.len());
        for reservation in reservations {
            invocation.arg(reservation.member);
        }
        invocation
            .arg(to_i64(spent.tokens))
            .arg(to_i64(spent.cost.as_nanos()));
        for key in keys {
            invocation.arg(to_i64(ttl_of(key, now, run_ttl)));
        }
        ask(&self.config.settings, &self.health, move |mut manager| {
            Box::pin(async move {
                invocation.invoke_async::<i64>(&mut manager).await?;
                Ok(())
            })
        })
    }
}

/// A counter's time to live from `now`: a window's until it ends (and a
/// grace), a run's `run_ttl`.
fn ttl_of(key: &CounterKey, now: u64, run_ttl: u64) -> u64 {
    key.period
        .map_or(run_ttl, |period| {
            period.end.saturating_sub(now) + WINDOW_GRACE_SECS
        })
        .max(1)
}

/// Milliseconds since the epoch on the system clock: reservations expire
/// on it, whatever clock the windows are read on.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A reservation's id, unique across processes: 64 random bits of this
/// process and a count.
fn reservation_id() -> String {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static PROCESS: LazyLock<u64> =
        LazyLock::new(|| RandomState::new().hash_one(std::process::id()));
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}{:x}",
        *PROCESS,
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// RESERVE's reply: admitted (1 or 0), the member ('' for none), then
/// four integers per key. Whatever Redis sent, nothing here panics: what
/// it lacks reads as nothing spent, and an unreadable verdict as refused.
fn parse_reserved(reply: &[redis::Value]) -> Reserved {
    let int = |value: Option<&redis::Value>| -> u64 {
        match value {
            Some(redis::Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
            Some(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.parse().ok())
                .unwrap_or(0),
            _ => 0,
        }
    };
    let admitted = int(reply.first()) == 1;
    let member = match reply.get(1) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        _ => String::new(),
    };
    let reservation = (!member.is_empty()).then(|| {
        let mut parts = member.rsplit(':');
        let nanos = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let tokens = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        let amount = Spent {
            tokens,
            cost: Cost::from_nanos(nanos),
        };
        SharedReservation { member, amount }
    });
    let held = reply
        .get(2..)
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|h| {
            let spent = |t, n| Spent {
                tokens: int(h.get(t)),
                cost: Cost::from_nanos(int(h.get(n))),
            };
            (spent(0, 1), spent(2, 3))
        })
        .collect();
    Reserved {
        reservation,
        admitted,
        held,
    }
}

impl fmt::Debug for RedisCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCounters")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
