//! What a spend limit checks: its rules (a [`Limit`] per run, per caller
//! or for all calls, in a [`Window`]), the counters a call is counted in,
//! and the refusal ([`LimitReached`]) that names the limit and what was
//! spent.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::Extensions;
use toolstack::model::{thousands, Cost, OuterRuns, RunId};
use toolstack::{ErrorKind, ToolError};

use super::window::{Period, Window};
use crate::shared_store::StableHash;

/// A bound on what calls may spend: tokens (prompt and completion
/// together), cost, or both — whichever is reached first refuses the next
/// call.
///
/// ```
/// use toolstack::model::Cost;
/// use toolstack_layers::spend::Limit;
///
/// let limit = Limit::cost(Cost::from_cents(40)).and_tokens(100_000);
/// assert_eq!(limit.max_tokens(), Some(100_000));
/// assert_eq!(limit.max_cost(), Some(Cost::from_cents(40)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    tokens: Option<u64>,
    cost: Option<Cost>,
}

impl Limit {
    /// At most `tokens` tokens (prompt and completion together).
    pub fn tokens(tokens: u64) -> Limit {
        Limit {
            tokens: Some(tokens),
            cost: None,
        }
    }

    /// At most `cost`, at the layer's prices.
    pub fn cost(cost: Cost) -> Limit {
        Limit {
            tokens: None,
            cost: Some(cost),
        }
    }

    /// Also at most `tokens` tokens.
    pub fn and_tokens(mut self, tokens: u64) -> Limit {
        self.tokens = Some(tokens);
        self
    }

    /// Also at most `cost`.
    pub fn and_cost(mut self, cost: Cost) -> Limit {
        self.cost = Some(cost);
        self
    }

    /// The bound on tokens, if any.
    pub fn max_tokens(&self) -> Option<u64> {
        self.tokens
    }

    /// The bound on cost, if any.
    pub fn max_cost(&self) -> Option<Cost> {
        self.cost
    }
}

/// What a spend limit does with a model its [`Prices`](toolstack::model::Prices)
/// do not price, when a cost limit applies to the call (a limit on tokens
/// alone counts any model's tokens: it needs no price). Set with
/// [`SpendLimitLayer::unpriced`](super::SpendLimitLayer::unpriced).
///
/// To count an unpriced model at a fallback price, give the table a
/// default entry: `Prices::builder().model("*", Price::per_million_tokens(..))`
/// — checked with the rest of the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unpriced {
    /// Refuse the call before the model is called, as
    /// [`ErrorKind::Denied`](toolstack::ErrorKind::Denied), naming the
    /// model and how to price it (the default): a cost limit that cannot
    /// price a call does not hold, and must not look as if it did.
    #[default]
    Refuse,
    /// Call it, and count its tokens but not its cost — a warning on every
    /// such call says its cost is not covered.
    TokensOnly,
}

/// What a counter holds: tokens and their cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Spent {
    pub(super) tokens: u64,
    pub(super) cost: Cost,
}

impl Spent {
    pub(super) fn add(&mut self, other: Spent) {
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost = self.cost.saturating_add(other.cost);
    }

    pub(super) fn sub(&mut self, other: Spent) {
        self.tokens = self.tokens.saturating_sub(other.tokens);
        self.cost = Cost::from_nanos(self.cost.as_nanos().saturating_sub(other.cost.as_nanos()));
    }
}

/// Whose spending a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// One agent run (the request's [`RunId`]).
    Run,
    /// One caller (the per-caller key in the request's extensions).
    Caller,
    /// The calls that carry no caller key.
    Anonymous,
    /// Every call.
    All,
}

impl Scope {
    /// `run`, `caller`, `anonymous` or `all`, as the Redis keys name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Run => "run",
            Scope::Caller => "caller",
            Scope::Anonymous => "anonymous",
            Scope::All => "all",
        }
    }
}

/// Finds a per-caller rule's key, of the type it was made for, in a
/// request's extensions.
pub(super) trait FindCaller: Send + Sync {
    fn find<'a>(&self, extensions: &'a Extensions) -> Option<&'a dyn StableHash>;
}

pub(super) struct CallerOf<K>(pub(super) PhantomData<fn() -> K>);

impl<K: Hash + Send + Sync + 'static> FindCaller for CallerOf<K> {
    fn find<'a>(&self, extensions: &'a Extensions) -> Option<&'a dyn StableHash> {
        extensions.get::<K>().map(|key| key as &dyn StableHash)
    }
}

#[derive(Clone)]
pub(super) enum Who {
    Run,
    Caller(Arc<dyn FindCaller>),
    All,
}

/// One limit of a layer: whose spending, in which window, up to what.
#[derive(Clone)]
pub(super) struct Rule {
    pub(super) who: Who,
    /// `None` for a run: its whole life.
    pub(super) window: Option<Window>,
    pub(super) limit: Limit,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match self.who {
            Who::Run => "run",
            Who::Caller(_) => "caller",
            Who::All => "all",
        };
        f.debug_struct("Rule")
            .field("who", &who)
            .field("window", &self.window)
            .field("limit", &self.limit)
            .finish()
    }
}

/// One counter a call is counted in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CounterKey {
    pub(super) scope: Scope,
    /// The run's or caller's hash, seeded per layer (the memory's key).
    pub(super) id: u64,
    /// The run's or caller's hash the same in every process (a shared
    /// store's key), when the layer has one.
    pub(super) stable: Option<Arc<str>>,
    pub(super) period: Option<Period>,
    /// A run the call's run serves (its message says so; its counter is
    /// that run's own).
    pub(super) outer: bool,
}

/// The counters of one call and which rule reads which.
#[derive(Debug, Default)]
pub(super) struct Counted {
    pub(super) keys: Vec<CounterKey>,
    /// (rule, index in `keys`).
    pub(super) checks: Vec<(usize, usize)>,
}

/// The rules of a layer, and how it hashes runs and callers.
#[derive(Debug)]
pub(super) struct Rules {
    pub(super) rules: Vec<Rule>,
    pub(super) seed: RandomState,
    /// Whether keys need their stable form (a shared store is set).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) stable: bool,
}

impl Rules {
    /// The counters `extensions` are counted in at `now`: one per rule
    /// that applies (a per-run rule needs a [`RunId`]), the same counter
    /// once for rules that share it.
    pub(super) fn counted(&self, extensions: &Extensions, now: u64) -> Counted {
        let mut counted = Counted::default();
        for (index, rule) in self.rules.iter().enumerate() {
            match &rule.who {
                Who::Run => {
                    let Some(run) = extensions.get::<RunId>() else {
                        continue;
                    };
                    // A sub-agent's run counts against the runs it serves.
                    for outer in extensions
                        .get::<OuterRuns>()
                        .into_iter()
                        .flat_map(OuterRuns::iter)
                    {
                        self.count(
                            &mut counted,
                            index,
                            rule,
                            Scope::Run,
                            Some(outer),
                            true,
                            now,
                        );
                    }
                    self.count(&mut counted, index, rule, Scope::Run, Some(run), false, now);
                }
                Who::Caller(find) => match find.find(extensions) {
                    Some(caller) => {
                        self.count(
                            &mut counted,
                            index,
                            rule,
                            Scope::Caller,
                            Some(caller),
                            false,
                            now,
                        );
                    }
                    None => self.count(
                        &mut counted,
                        index,
                        rule,
                        Scope::Anonymous,
                        None,
                        false,
                        now,
                    ),
                },
                Who::All => self.count(&mut counted, index, rule, Scope::All, None, false, now),
            }
        }
        counted
    }

    /// Counts rule `index` in the counter of `scope` and `hashed` (`outer`:
    /// a run the call's run serves), the same counter once for rules that
    /// share it.
    #[allow(clippy::too_many_arguments)]
    fn count(
        &self,
        counted: &mut Counted,
        index: usize,
        rule: &Rule,
        scope: Scope,
        hashed: Option<&dyn StableHash>,
        outer: bool,
        now: u64,
    ) {
        let id = hashed.map_or(0, |key| {
            let mut hasher = self.seed.build_hasher();
            key.stable_hash(&mut hasher);
            hasher.finish()
        });
        let key = CounterKey {
            scope,
            id,
            stable: None,
            period: rule.window.map(|window| window.period(now)),
            outer,
        };
        let at = match counted.keys.iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                counted.keys.push(CounterKey {
                    stable: self.stable_form(hashed),
                    ..key
                });
                counted.keys.len() - 1
            }
        };
        counted.checks.push((index, at));
    }

    #[cfg(feature = "redis")]
    fn stable_form(&self, hashed: Option<&dyn StableHash>) -> Option<Arc<str>> {
        let hashed = hashed.filter(|_| self.stable)?;
        let mut text = String::with_capacity(32);
        crate::shared_store::push_caller(&mut text, hashed);
        Some(text.into())
    }

    #[cfg(not(feature = "redis"))]
    fn stable_form(&self, _: Option<&dyn StableHash>) -> Option<Arc<str>> {
        None
    }

    /// Whether a limit of `counted` is on cost (and so needs a price).
    pub(super) fn on_cost(&self, counted: &Counted) -> bool {
        counted
            .checks
            .iter()
            .any(|&(rule, _)| self.rules.get(rule).is_some_and(|r| r.limit.cost.is_some()))
    }

    /// The limits of `counted`, each with the index of its key.
    pub(super) fn limits(&self, counted: &Counted) -> Vec<(usize, Limit)> {
        counted
            .checks
            .iter()
            .filter_map(|&(rule, at)| Some((at, self.rules.get(rule)?.limit)))
            .collect()
    }

    /// What a call that may spend `wanted` reserves, given what each key
    /// of `counted` holds — (spent, reserved by calls in flight): all of
    /// it, capped to what every limit has left. Refused when a limit is
    /// reached (spent ≥ limit), or when what is left of one cannot pay
    /// for even the call's prompt.
    pub(super) fn fit(
        &self,
        counted: &Counted,
        held: &[(Spent, Spent)],
        wanted: Wanted,
    ) -> Result<Spent, Box<LimitReached>> {
        let mut take = wanted.whole;
        for &(rule, at) in &counted.checks {
            let (Some(rule), Some(&(spent, reserved)), Some(key)) =
                (self.rules.get(rule), held.get(at), counted.keys.get(at))
            else {
                continue;
            };
            let tokens_left = rule
                .limit
                .tokens
                .map(|max| max.saturating_sub(spent.tokens.saturating_add(reserved.tokens)));
            let nanos_left = rule.limit.cost.map(|max| {
                max.as_nanos().saturating_sub(
                    spent
                        .cost
                        .as_nanos()
                        .saturating_add(reserved.cost.as_nanos()),
                )
            });
            let tokens = rule.limit.tokens.is_some_and(|max| spent.tokens >= max);
            let cost = rule.limit.cost.is_some_and(|max| spent.cost >= max);
            let tokens_short = tokens_left.is_some_and(|left| wanted.prompt.tokens > left);
            let cost_short = nanos_left.is_some_and(|left| wanted.prompt.cost.as_nanos() > left);
            if tokens || cost || tokens_short || cost_short {
                let reached = tokens || cost;
                return Err(Box::new(LimitReached {
                    scope: key.scope,
                    outer: key.outer,
                    window: key.period.map(|p| p.window),
                    resets_at: key.period.map(|p| UNIX_EPOCH + Duration::from_secs(p.end)),
                    resets_text: key.period.map(|p| p.end_text()),
                    spent_tokens: spent.tokens,
                    spent: spent.cost,
                    reserved_tokens: reserved.tokens,
                    reserved: reserved.cost,
                    prompt: (!reached).then_some(wanted.prompt),
                    limit: rule.limit,
                    refused: Refused::Model,
                    on_tokens: if reached {
                        tokens && !cost
                    } else {
                        tokens_short && !cost_short
                    },
                }));
            }
            if let Some(left) = tokens_left {
                take.tokens = take.tokens.min(left);
            }
            if let Some(left) = nanos_left {
                take.cost = Cost::from_nanos(take.cost.as_nanos().min(left));
            }
        }
        Ok(take)
    }
}

/// What a call may spend at most, known before it starts: its prompt
/// (estimated) and, with it, the output reserved for it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Wanted {
    pub(super) prompt: Spent,
    pub(super) whole: Spent,
}

/// A spend limit was reached: what refused a model call (the source of
/// its [`ErrorKind::SpendLimited`] error), naming the limit and what was
/// spent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitReached {
    /// Whose spending reached it.
    pub scope: Scope,
    // A run the call's run serves (as its tool), not the call's own.
    outer: bool,
    /// The window it counts in; `None` for a run (its whole life).
    pub window: Option<Window>,
    /// When the window ends and the limit no longer holds.
    pub resets_at: Option<SystemTime>,
    resets_text: Option<String>,
    /// The tokens spent in the counter.
    pub spent_tokens: u64,
    /// What they cost.
    pub spent: Cost,
    /// The tokens the calls in flight counted here have reserved.
    pub reserved_tokens: u64,
    /// What they may cost.
    pub reserved: Cost,
    // The call's prompt (estimated), when what is left could not pay for
    // it (the limit itself not reached).
    prompt: Option<Spent>,
    /// The limit.
    pub limit: Limit,
    // What it stopped: a model call before it was made, a tool call, or
    // an answer as it streamed.
    refused: Refused,
    // Whether the tokens, not the cost, reached it.
    on_tokens: bool,
}

/// What a reached limit stopped, for its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// A model call, before it was made.
    Model,
    /// An answer, as it streamed, after about this many output tokens.
    Cut(u64),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Model => f.write_str("the model was not called"),
            Refused::Cut(output) => write!(
                f,
                "the answer was cut after about {} output tokens",
                thousands(*output)
            ),
        }
    }
}

impl LimitReached {
    /// The same limit, stopping `refused` instead of a model call.
    pub(super) fn stopping(mut self, refused: Refused) -> Self {
        self.refused = refused;
        self
    }

    /// Whether it stopped an answer as it streamed (rather than a call
    /// before it was made).
    pub fn cut_an_answer(&self) -> bool {
        matches!(self.refused, Refused::Cut(_))
    }

    pub(super) fn into_error(self) -> ToolError {
        ToolError::new(ErrorKind::SpendLimited, self.to_string()).with_source(self)
    }
}

impl fmt::Display for LimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (who, its) = match self.scope {
            Scope::Run if self.outer => ("the run this one serves (as its tool) has", "its"),
            Scope::Run => ("this run has", "its"),
            Scope::Caller => ("this caller has", "its"),
            Scope::Anonymous => ("anonymous callers have", "their"),
            Scope::All => ("all model calls together have", "their"),
        };
        let window = match self.window {
            None => "",
            Some(Window::Hour) => " for this hour",
            Some(Window::Day) => " for today",
            Some(Window::Month) => " for this month",
        };
        let tokens = thousands(self.spent_tokens);
        if let Some(prompt) = self.prompt {
            match (self.on_tokens, self.limit.tokens, self.limit.cost) {
                (true, Some(max), _) | (false, Some(max), None) => write!(
                    f,
                    "{who} used {tokens} of {its} {} tokens{window}, and calls in flight have reserved {}: \
                     what is left cannot take {} (about {} tokens)",
                    thousands(max),
                    thousands(self.reserved_tokens),
                    self.wanted(),
                    thousands(prompt.tokens),
                )?,
                (_, _, max) => write!(
                    f,
                    "{who} spent {} of {its} {} limit{window}, and calls in flight have reserved {}: \
                     what is left cannot pay for {} (about {} tokens, {})",
                    self.spent,
                    max.unwrap_or_default(),
                    self.reserved,
                    self.wanted(),
                    thousands(prompt.tokens),
                    prompt.cost,
                )?,
            }
        } else {
            match (self.on_tokens, self.limit.tokens, self.limit.cost) {
                (true, Some(max), _) | (false, Some(max), None) => write!(
                    f,
                    "{who} used {tokens} of {its} {} tokens{window} ({} spent)",
                    thousands(max),
                    self.spent
                )?,
                (_, _, max) => write!(
                    f,
                    "{who} spent {} of {its} {} limit{window} ({tokens} tokens)",
                    self.spent,
                    max.unwrap_or_default()
                )?,
            }
        }
        write!(f, "; {}", self.refused)?;
        if let Some(resets) = &self.resets_text {
            write!(f, "; the limit resets at {resets}")?;
        }
        Ok(())
    }
}

impl LimitReached {
    /// What could not be paid for, in the message of a limit not reached
    /// but too short for it.
    fn wanted(&self) -> &'static str {
        match self.refused {
            Refused::Model => "this call's prompt",
            Refused::Cut(_) => "more of this answer",
        }
    }
}

impl std::error::Error for LimitReached {}
