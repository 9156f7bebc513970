use std::fmt;
use std::hash::{Hash, RandomState};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use toolstack::model::Prices;
use tower_layer::Layer;

use super::memory::MemoryCounters;
use super::meter::{Clock, Meter, SharedCounters};
use super::rules::{CallerOf, Limit, Rule, Rules, Unpriced, Who};
use super::{SpendLimit, Window};

/// Limits what model calls spend — tokens and cost, per run, per caller,
/// for all calls, in UTC windows; see the [module docs](super).
///
/// The counters are created with the layer: every [`SpendLimit`] it
/// produces, every clone of those and every clone of the layer count in
/// the same ones. With the `redis` feature, `redis` keeps them in Redis,
/// shared by every process using the same Redis and prefix.
#[derive(Clone)]
pub struct SpendLimitLayer {
    prices: Prices,
    rules: Vec<Rule>,
    memory: Arc<MemoryCounters>,
    seed: RandomState,
    store: Option<Arc<dyn SharedCounters>>,
    clock: Clock,
    run_ttl: Duration,
    max_entries: usize,
    unpriced: Unpriced,
    reserve_output: u64,
}

/// The output tokens a call reserves by default: the Anthropic client's
/// default `max_tokens`.
pub const DEFAULT_RESERVED_OUTPUT: u64 = 4_096;

/// How many counters a layer keeps in process by default.
pub const DEFAULT_MAX_COUNTERS: usize = 100_000;

impl SpendLimitLayer {
    /// A layer that prices calls with `prices` and has no limit yet: add
    /// them with [`per_run`](Self::per_run),
    /// [`per_caller`](Self::per_caller) and [`global`](Self::global).
    pub fn new(prices: Prices) -> Self {
        SpendLimitLayer {
            prices,
            rules: Vec::new(),
            memory: Arc::default(),
            seed: RandomState::new(),
            store: None,
            clock: Arc::new(SystemTime::now),
            run_ttl: Duration::from_secs(24 * 3_600),
            max_entries: DEFAULT_MAX_COUNTERS,
            unpriced: Unpriced::Refuse,
            reserve_output: DEFAULT_RESERVED_OUTPUT,
        }
    }

    /// At most `limit` per agent run, over the run's whole life: the run
    /// is the [`RunId`](toolstack::model::RunId) in the request's
    /// extensions (the agent puts it there); requests without one are not
    /// limited by this rule.
    pub fn per_run(mut self, limit: Limit) -> Self {
        self.rules.push(Rule {
            who: Who::Run,
            window: None,
            limit,
        });
        self
    }

    /// At most `limit` per caller in each `window`, the caller being the
    /// value of type `K` in the request's extensions (say, a user id an
    /// auth layer put there); requests without a `K` share one more
    /// counter, the anonymous callers'.
    pub fn per_caller<K>(mut self, window: Window, limit: Limit) -> Self
    where
        K: Hash + Send + Sync + 'static,
    {
        self.rules.push(Rule {
            who: Who::Caller(Arc::new(CallerOf::<K>(PhantomData))),
            window: Some(window),
            limit,
        });
        self
    }

    /// At most `limit` for all calls together in each `window`.
    pub fn global(mut self, window: Window, limit: Limit) -> Self {
        self.rules.push(Rule {
            who: Who::All,
            window: Some(window),
            limit,
        });
        self
    }

    /// How long a run's counter is kept after its last call (24 hours by
    /// default): a run idle longer starts again from nothing.
    pub fn run_ttl(mut self, ttl: Duration) -> Self {
        self.run_ttl = ttl;
        self
    }

    /// At most `counters` kept in process (100,000 by default); past it,
    /// the expired ones are dropped, then the one whose window ends
    /// soonest.
    pub fn max_counters(mut self, counters: usize) -> Self {
        self.max_entries = counters.max(1);
        self
    }

    /// What to do with a model the prices do not price when a cost limit
    /// applies to the call: refuse it before it is called
    /// ([`Unpriced::Refuse`], the default), or count its tokens only
    /// ([`Unpriced::TokensOnly`], with a warning on every such call). A
    /// fallback price is the table's default entry (`*`).
    pub fn unpriced(mut self, unpriced: Unpriced) -> Self {
        self.unpriced = unpriced;
        self
    }

    /// The output tokens a call whose request sets no `max_tokens`
    /// reserves, with its prompt, before it is made (4,096 by default):
    /// set it to the model client's `max_tokens`, the most a call can
    /// write. Calls in flight count what they reserved until they end, so
    /// that concurrent calls do not all take the same headroom; an answer
    /// writing more than its call reserved asks for more, and is cut when
    /// no limit has room.
    pub fn reserve_output_tokens(mut self, tokens: u64) -> Self {
        self.reserve_output = tokens;
        self
    }

    /// Reads the windows' time from `clock` instead of the system's (a
    /// test moves it on to roll a window over).
    pub fn clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Keeps the counters in Redis, shared by every process (and layer)
    /// that uses the same Redis and key prefix; see
    /// [`RedisSpend`](super::RedisSpend) for the keys, the timeouts and
    /// what happens when Redis does not answer. Every model call then
    /// takes a round trip to Redis before it is made, and one after.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(mut self, redis: super::RedisSpend) -> Self {
        self.store = Some(Arc::new(redis.into_store()));
        self
    }

    /// How many counters this process keeps now.
    pub fn counters(&self) -> usize {
        self.memory.len()
    }
}

impl<S> Layer<S> for SpendLimitLayer {
    type Service = SpendLimit<S>;

    fn layer(&self, inner: S) -> SpendLimit<S> {
        let meter = Meter {
            prices: self.prices.clone(),
            rules: Rules {
                rules: self.rules.clone(),
                seed: self.seed.clone(),
                stable: self.store.is_some(),
            },
            memory: Arc::clone(&self.memory),
            store: self.store.clone(),
            clock: Arc::clone(&self.clock),
            run_ttl: self.run_ttl.as_secs().max(1),
            max_entries: self.max_entries,
            unpriced: self.unpriced,
            reserve_output: self.reserve_output,
        };
        SpendLimit::new(inner, Arc::new(meter))
    }
}

impl fmt::Debug for SpendLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpendLimitLayer")
            .field("prices", &self.prices)
            .field("rules", &self.rules)
            .field("store", &self.store)
            .field("run_ttl", &self.run_ttl)
            .field("max_counters", &self.max_entries)
            .field("unpriced", &self.unpriced)
            .field("reserve_output", &self.reserve_output)
            .finish_non_exhaustive()
    }
}
