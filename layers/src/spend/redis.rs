//! The counters in Redis: [`RedisSpend`], given to
//! [`SpendLimitLayer::redis`](super::SpendLimitLayer::redis).

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::Script;
use toolstack::model::Cost;

use super::meter::SharedCounters;
use super::rules::{CounterKey, Spent};
use crate::redis::{ask, Health, RedisSettings};
use crate::shared_store::{Fallback, SharedStoreError};

/// Adds one call's spend to each of its counters, each with its time to
/// live, atomically (the counters of a call move together).
const ADD: &str = r"
-- KEYS: the call's counters (hashes of `tokens` and `nanos`).
-- ARGV[1]: tokens, ARGV[2]: nano-dollars; ARGV[2 + i]: KEYS[i]'s time to
-- live, in seconds.
for i, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, 'tokens', ARGV[1])
  redis.call('HINCRBY', key, 'nanos', ARGV[2])
  redis.call('EXPIRE', key, ARGV[2 + i])
end
return #KEYS
";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ADD));

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
/// little-endian), the same in every process. Before a call, one
/// pipeline reads the call's counters (`HMGET`); after it, one Lua script
/// adds its tokens and cost to each (`HINCRBY`) and sets its time to live
/// (`EXPIRE`): a window's until it ends (and five minutes more, for
/// replicas whose clocks disagree), a run's for the layer's
/// [`run_ttl`](super::SpendLimitLayer::run_ttl) after its last call.
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
}

impl RedisSpend {
    /// Counters in the Redis that `manager` connects to, under the prefix
    /// `toolstack:spend`, failing open, with a 250 ms command timeout.
    pub fn new(manager: ConnectionManager) -> Self {
        RedisSpend {
            settings: RedisSettings::new(manager, "toolstack:spend"),
            fallback: Fallback::Open,
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
            .finish_non_exhaustive()
    }
}

/// A [`RedisSpend`] in use.
pub(super) struct RedisCounters {
    config: RedisSpend,
    health: Arc<Health>,
}

impl RedisCounters {
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

    fn read(
        &self,
        keys: &[CounterKey],
    ) -> BoxFuture<'static, Result<Vec<Spent>, SharedStoreError>> {
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("HMGET")
                .arg(self.key(key))
                .arg("tokens")
                .arg("nanos");
        }
        ask(&self.config.settings, &self.health, move |mut manager| {
            Box::pin(async move {
                let counts: Vec<(Option<i64>, Option<i64>)> =
                    pipe.query_async(&mut manager).await?;
                let count = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
                Ok(counts
                    .into_iter()
                    .map(|(tokens, nanos)| Spent {
                        tokens: count(tokens),
                        cost: Cost::from_nanos(count(nanos)),
                    })
                    .collect())
            })
        })
    }

    fn add(
        &self,
        keys: &[CounterKey],
        spent: Spent,
        now: u64,
        run_ttl: u64,
    ) -> BoxFuture<'static, Result<(), SharedStoreError>> {
        let mut invocation = SCRIPT.prepare_invoke();
        invocation
            .arg(to_i64(spent.tokens))
            .arg(to_i64(spent.cost.as_nanos()));
        for key in keys {
            let ttl = key.period.map_or(run_ttl, |period| {
                period.end.saturating_sub(now) + WINDOW_GRACE_SECS
            });
            invocation.key(self.key(key)).arg(to_i64(ttl.max(1)));
        }
        ask(&self.config.settings, &self.health, move |mut manager| {
            Box::pin(async move {
                invocation.invoke_async::<i64>(&mut manager).await?;
                Ok(())
            })
        })
    }
}

impl fmt::Debug for RedisCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCounters")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
