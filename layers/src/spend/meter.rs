//! [`Meter`]: what the services of one spend limit layer share — the
//! prices, the rules, the counters in process and, when processes share
//! them, the store — and the two things it does for a call: admit it on
//! what was spent, and add what it used.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use http::Extensions;
use toolstack::agent::compaction::estimate_tokens;
use toolstack::model::{ChatRequest, Cost, Prices, Usage};
use toolstack::{ErrorKind, ToolError};

use super::memory::{Bounds, MemoryCounters};
use super::rules::{Counted, CounterKey, Limit, Refused, Rules, Spent, Unpriced, Wanted};
use crate::shared_store::{Fallback, SharedStoreError};

/// Counters that several processes share (Redis, see
/// [`RedisSpend`](super::RedisSpend)).
pub(super) trait SharedCounters: fmt::Debug + Send + Sync {
    /// The store's name in events and messages: `redis`.
    fn name(&self) -> &'static str;

    /// What a call does when the store does not answer.
    fn fallback(&self) -> Fallback;

    /// Reserves up to `wanted` on each of `keys`, capped to what each of
    /// `limits` (a key's index, its limit) has left, with the
    /// reservation's time to live — or refuses, with what the keys held.
    /// Resolves within the store's timeout.
    fn reserve(
        &self,
        keys: &[CounterKey],
        limits: &[(usize, Limit)],
        wanted: Wanted,
        now: u64,
        run_ttl: u64,
    ) -> BoxFuture<'static, Result<Reserved, SharedStoreError>>;

    /// Gives `reservations` back (those not expired yet) and adds `spent`
    /// to each of `keys`, each with its time to live from `now`. Resolves
    /// within the store's timeout.
    fn settle(
        &self,
        keys: &[CounterKey],
        reservations: Vec<SharedReservation>,
        spent: Spent,
        now: u64,
        run_ttl: u64,
    ) -> BoxFuture<'static, Result<(), SharedStoreError>>;
}

/// A call's reservation in a shared store: its name there, and amount.
#[derive(Debug, Clone)]
pub(super) struct SharedReservation {
    // Read by the only store, Redis.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) member: String,
    pub(super) amount: Spent,
}

/// A shared store's answer to a reservation.
#[derive(Debug)]
pub(super) struct Reserved {
    /// The reservation made, `None` when refused (or nothing to reserve).
    pub(super) reservation: Option<SharedReservation>,
    /// Whether the call may go.
    pub(super) admitted: bool,
    /// What each key held — (spent, reserved) — before.
    pub(super) held: Vec<(Spent, Spent)>,
}

/// The wall clock the windows are read on.
pub(super) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The shared state of a layer's services.
pub(super) struct Meter {
    pub(super) prices: Prices,
    pub(super) rules: Rules,
    pub(super) memory: Arc<MemoryCounters>,
    pub(super) store: Option<Arc<dyn SharedCounters>>,
    pub(super) clock: Clock,
    /// Seconds a run's counter lives after its last spend.
    pub(super) run_ttl: u64,
    pub(super) max_entries: usize,
    pub(super) unpriced: Unpriced,
    /// The output tokens a call reserves, besides its prompt.
    pub(super) reserve_output: u64,
}

impl Meter {
    /// Seconds since the epoch, on the layer's clock.
    pub(super) fn now(&self) -> u64 {
        (self.clock)()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs())
    }

    /// The counters of a call with these extensions, now.
    pub(super) fn counted(&self, extensions: &Extensions, now: u64) -> Counted {
        self.rules.counted(extensions, now)
    }

    /// Refuses a call to a model the prices do not price when a cost limit
    /// applies to it, unless the layer was told to count its tokens only.
    ///
    /// `Denied`, not `SpendLimited`: no limit was reached (an agent would
    /// read it as one, and stop as over budget), and trying again does not
    /// help — the layer's configuration refuses the call until the model
    /// is priced, as a policy would.
    pub(super) fn check_priced(
        &self,
        counted: &Counted,
        model: Option<&str>,
    ) -> Result<(), ToolError> {
        let model = model.unwrap_or_default();
        if self.unpriced != Unpriced::Refuse
            || !self.rules.on_cost(counted)
            || self.prices.prices(model)
        {
            return Ok(());
        }
        let named = if model.is_empty() {
            "the request names no model, and the spend limit's prices have no default entry (\"*\")"
                .to_owned()
        } else {
            format!("the spend limit has no price for the model `{model}`")
        };
        Err(ToolError::new(
            ErrorKind::Denied,
            format!(
                "{named}, and a cost limit applies to this call: its cost could not be counted; \
                 the model was not called. Price it in the table \
                 (Prices::builder().model(\"{model}\", Price::per_million_tokens(input, output)), \
                 or a default entry \"*\" for every model), or count its tokens only \
                 (SpendLimitLayer::unpriced(Unpriced::TokensOnly))"
            ),
        ))
    }

    /// What `request` may spend at most: its prompt, estimated from its
    /// messages (bytes / 4, as compaction estimates them — high for most
    /// text, the safe way), and its `max_tokens` of output, else the
    /// output reserved for every call.
    pub(super) fn wanted(&self, request: &ChatRequest) -> Wanted {
        let prompt = estimate_tokens(&request.messages);
        let output = request.max_tokens.map_or(self.reserve_output, u64::from);
        let model = request.model.as_deref().unwrap_or_default();
        let priced = |usage: Usage| Spent {
            tokens: usage.total_tokens(),
            cost: self.prices.cost(model, &usage).unwrap_or(Cost::ZERO),
        };
        Wanted {
            prompt: priced(Usage::new(prompt, 0)),
            whole: priced(Usage::new(prompt, output)),
        }
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            run_ttl: self.run_ttl,
            max_entries: self.max_entries,
        }
    }

    /// Admits the call (or more of its answer, as `refused` says) on what
    /// this process counted — spent, and reserved by the calls in flight —
    /// and reserves what it may spend, capped to what the limits have
    /// left; or refuses it.
    pub(super) fn admit_locally(
        &self,
        counted: &Counted,
        now: u64,
        wanted: Wanted,
        refused: Refused,
    ) -> Result<Spent, ToolError> {
        let reserved = self
            .memory
            .reserve(&counted.keys, now, self.bounds(), |held| {
                self.rules.fit(counted, held, wanted)
            })
            .map_err(|reached| refusal(reached.stopping(refused)))?;
        reserved_event(reserved, wanted);
        Ok(reserved)
    }

    /// The limits of `counted`, for a shared store: (key index, limit).
    pub(super) fn limits(&self, counted: &Counted) -> Vec<(usize, Limit)> {
        self.rules.limits(counted)
    }

    /// The refusal of a call the shared store refused, from what it held
    /// (judged here again, to name the limit).
    pub(super) fn refused(
        &self,
        counted: &Counted,
        held: &[(Spent, Spent)],
        wanted: Wanted,
        refused: Refused,
    ) -> Result<(), ToolError> {
        self.rules
            .fit(counted, held, wanted)
            .map(drop)
            .map_err(|reached| refusal(reached.stopping(refused)))
    }

    /// How many output tokens an answer on `model` may write, its prompt
    /// `prompt` tokens, before it spends more than `held`: on tokens, and
    /// on cost when the model is priced.
    pub(super) fn output_allowed(&self, model: &str, prompt: u64, held: Spent) -> u64 {
        let on_tokens = held.tokens.saturating_sub(prompt);
        let per_million = self
            .prices
            .cost(model, &Usage::new(0, 1_000_000))
            .map_or(0, Cost::as_nanos);
        if per_million == 0 {
            return on_tokens;
        }
        let prompt_cost = self
            .prices
            .cost(model, &Usage::new(prompt, 0))
            .map_or(0, Cost::as_nanos);
        let left = u128::from(held.cost.as_nanos().saturating_sub(prompt_cost));
        let on_cost = u64::try_from(left * 1_000_000 / u128::from(per_million)).unwrap_or(u64::MAX);
        on_tokens.min(on_cost)
    }

    /// What an answer that has written `over` output tokens past its
    /// reservation asks for more: those at least, and the output every
    /// call reserves besides, priced for `model`.
    pub(super) fn more(&self, model: &str, over: u64) -> Wanted {
        let priced = |tokens: u64| Spent {
            tokens,
            cost: self
                .prices
                .cost(model, &Usage::new(0, tokens))
                .unwrap_or(Cost::ZERO),
        };
        Wanted {
            prompt: priced(over),
            whole: priced(over.saturating_add(self.reserve_output)),
        }
    }

    /// The error of a call that the store could not check, failing closed.
    pub(super) fn unchecked(
        store: &dyn SharedCounters,
        err: SharedStoreError,
        refused: Refused,
    ) -> ToolError {
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the spend limit could not be checked: its store ({}) is unreachable; {refused}",
                store.name()
            ),
        )
        .with_source(err)
    }

    /// Adds what a call used (`usage` on the model that `answered`, else
    /// the one `asked` for) to its counters: in process at once, and in
    /// the shared store by the future returned.
    ///
    /// An answering model without a price is priced as the one asked for
    /// (which was checked before the call): a provider's dated snapshot
    /// the table does not list still counts.
    /// Without usage, only the reservations are given back.
    pub(super) fn settle(
        &self,
        keys: &[CounterKey],
        reserved: Spent,
        shared: Vec<SharedReservation>,
        usage: Option<Usage>,
        answered: Option<&str>,
        asked: Option<&str>,
    ) -> Option<BoxFuture<'static, ()>> {
        let now = self.now();
        let spent = usage.map_or_else(Spent::default, |usage| {
            let model = answered.or(asked).unwrap_or_default();
            let cost = self
                .prices
                .cost(model, &usage)
                .or_else(|| self.prices.cost(asked.unwrap_or_default(), &usage))
                .unwrap_or_else(|| {
                    tracing::warn!(
                        gen_ai.response.model = model,
                        "the spend limit has no price for this model: its tokens count, its cost does not"
                    );
                    Cost::ZERO
                });
            Spent {
                tokens: usage.total_tokens(),
                cost,
            }
        });
        let released = shared.iter().fold(reserved, |mut all, shared| {
            all.add(shared.amount);
            all
        });
        // `monotonic_counter.` fields are counters for tracing-opentelemetry's
        // metrics layer.
        tracing::debug!(
            toolstack.spend.released_tokens = released.tokens,
            toolstack.spend.released_nanos = released.cost.as_nanos(),
            toolstack.spend.settled_tokens = spent.tokens,
            toolstack.spend.settled_nanos = spent.cost.as_nanos(),
            monotonic_counter.toolstack.spend.settled_tokens = spent.tokens,
            monotonic_counter.toolstack.spend.settled_nanos = spent.cost.as_nanos(),
            monotonic_counter.toolstack.spend.released_tokens = released.tokens,
            "spend settled"
        );
        if reserved != Spent::default() || spent != Spent::default() {
            self.memory
                .settle(keys, reserved, spent, now, self.bounds());
        }
        let store = self.store.as_ref()?;
        if shared.is_empty() && usage.is_none() {
            return None;
        }
        let name = store.name();
        let adding = store.settle(keys, shared, spent, now, self.run_ttl);
        Some(Box::pin(async move {
            if let Err(err) = adding.await {
                tracing::warn!(
                    toolstack.spend.store = name,
                    error = %err,
                    "what a model call spent could not be added to the shared spend limit; this process counted it"
                );
            }
        }))
    }
}

/// What a call (or more of its answer) reserved, on the call's span
/// (polled inside the trace layer's).
pub(super) fn reserved_event(reserved: Spent, wanted: Wanted) {
    tracing::debug!(
        toolstack.spend.reserved_tokens = reserved.tokens,
        toolstack.spend.reserved_nanos = reserved.cost.as_nanos(),
        toolstack.spend.prompt_tokens = wanted.prompt.tokens,
        monotonic_counter.toolstack.spend.reserved_tokens = reserved.tokens,
        "spend reserved"
    );
}

/// The error of a call a limit refused, logged on the call's span.
fn refusal(reached: super::LimitReached) -> ToolError {
    tracing::debug!(
        toolstack.spend.scope = reached.scope.as_str(),
        toolstack.spend.window = reached.window.map(|w| w.as_str()),
        toolstack.spend.tokens = reached.spent_tokens,
        toolstack.spend.cost_nanos = reached.spent.as_nanos(),
        toolstack.spend.reserved_tokens = reached.reserved_tokens,
        toolstack.spend.reserved_nanos = reached.reserved.as_nanos(),
        toolstack.spend.cut = reached.cut_an_answer(),
        monotonic_counter.toolstack.spend.refused_calls = u64::from(!reached.cut_an_answer()),
        monotonic_counter.toolstack.spend.cut_answers = u64::from(reached.cut_an_answer()),
        "spend limit reached"
    );
    reached.into_error()
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter")
            .field("prices", &self.prices)
            .field("rules", &self.rules)
            .field("counters", &self.memory.len())
            .field("store", &self.store)
            .field("run_ttl_s", &self.run_ttl)
            .field("unpriced", &self.unpriced)
            .field("reserve_output", &self.reserve_output)
            .finish_non_exhaustive()
    }
}
