//! Spend limits on model calls: tokens and cost, counted per agent run,
//! per caller and for all calls, in UTC windows (hour, day, month), in
//! process or shared by processes in Redis. A call that would go over a
//! limit is refused before the model is called.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::model::{ChatRequest, Cost, Message, Price, Prices, RunId, ScriptedModel, Turn, Usage};
//! use toolstack::ErrorKind;
//! use toolstack_layers::spend::{Limit, SpendLimitLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let prices = Prices::builder()
//!     .model("gpt-4o", Price::per_million_tokens(2.50, 10.00))
//!     .build()?;
//! let answer = || Turn::new().text("…").usage(Usage::new(100_000, 20_000));
//! let model = ServiceBuilder::new()
//!     .layer(SpendLimitLayer::new(prices).per_run(Limit::cost(Cost::from_cents(40))))
//!     .service(ScriptedModel::new([answer(), answer()]));
//!
//! let request = || {
//!     ChatRequest::new(vec![Message::user("hi")])
//!         .with_model("gpt-4o")
//!         .with_extension(RunId::new("run-1"))
//! };
//! // $0.25 + $0.20: the first call is under the limit, and spends $0.45.
//! let answer: Vec<_> = model.clone().oneshot(request()).await?.collect().await;
//! assert!(answer.iter().all(Result::is_ok));
//! // The second is refused before the model is called.
//! let err = model.oneshot(request()).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::SpendLimited);
//! assert_eq!(
//!     err.message(),
//!     "this run has spent $0.45 of its $0.40 limit (120,000 tokens); the model was not called"
//! );
//! # Ok(()) }
//! ```
//!
//! # Limits
//!
//! A [`SpendLimitLayer`] has any number of limits, each a [`Limit`] —
//! tokens (prompt and completion together), cost (at the layer's
//! [`Prices`]), or both — on one counter:
//!
//! | limit | counts | in |
//! |---|---|---|
//! | [`per_run`](SpendLimitLayer::per_run) | one agent run (the [`RunId`](toolstack::model::RunId) the agent puts in every request) | the run's life (its counter is kept [`run_ttl`](SpendLimitLayer::run_ttl) after its last call) |
//! | [`per_caller::<K>`](SpendLimitLayer::per_caller) | one caller (the `K` in the extensions, as the rate limit's per-caller key; requests without one share the anonymous counter) | a [`Window`] |
//! | [`global`](SpendLimitLayer::global) | every call | a [`Window`] |
//!
//! Windows are fixed and aligned to UTC — an hour from its top, a day from
//! 00:00 UTC, a month from its 1st — read on the system clock (or the
//! layer's [`clock`](SpendLimitLayer::clock)); a call counts in the
//! windows it was admitted in.
//!
//! # Before and after a call
//!
//! Before a call, it is given what it may spend at most: its prompt,
//! estimated from its messages (bytes / 4, as compaction estimates them —
//! high for most text), and its output: the request's
//! [`max_tokens`](toolstack::model::ChatRequest::max_tokens) when set,
//! else the output tokens every call reserves
//! ([`reserve_output_tokens`](SpendLimitLayer::reserve_output_tokens),
//! 4,096 unless set: the model client's `max_tokens`), priced for the
//! model asked for. The counters it would count in are read — what was
//! spent, and what the calls in flight reserved — and, in one hold of
//! their lock, the call reserves its maximum, capped to what every limit
//! has left. It fails at once with
//! [`ErrorKind::SpendLimited`](toolstack::ErrorKind::SpendLimited) — not
//! retryable — when a limit is reached (spent ≥ limit), or when what is
//! left of one cannot take even its prompt; the message names the limit,
//! what was spent and reserved, the prompt's estimate and, for a window,
//! when it resets; its source is a [`LimitReached`] for code to read. The
//! model is not called. An agent run ends then with
//! [`StopReason::SpendLimit`](toolstack::agent::StopReason::SpendLimit).
//!
//! A call admitted with less than its maximum — the last to fit — goes to
//! the model with its request's `max_tokens` lowered to the output its
//! reservation pays for (never raised, never below 1; with the counters
//! in Redis, after the store's verdict). The model clients send the
//! smaller of it and their own limit, so a model that keeps to it ends
//! its answer within what the limits had left, rather than be cut.
//!
//! # While the answer streams
//!
//! The answer's output is counted as it comes: its text, reasoning and
//! tool-call bytes / 4 (as the prompt is estimated), or the endpoint's own
//! count when it streams a [`ModelDelta::Usage`] that says more. An answer
//! that writes past what its call reserved asks for more — what it wrote
//! past it and another `reserve_output_tokens` — from the same counters
//! (in Redis with the `redis` feature), capped to what every limit has
//! left. When no limit has room even for what it wrote, the answer ends
//! after the delta that crossed (written, so passed on and counted) with
//! an [`ErrorKind::SpendLimited`](toolstack::ErrorKind::SpendLimited)
//! error saying how far it got ("… the answer was cut after about 300
//! output tokens"); its [`LimitReached`] says
//! [`cut_an_answer`](LimitReached::cut_an_answer). The agent keeps what
//! was said before the cut, marked as cut, and stops the run with
//! [`StopReason::SpendLimit`](toolstack::agent::StopReason::SpendLimit).
//! Checking costs a comparison per delta: the output the reservation pays
//! for is worked out once, and again only when more is reserved.
//!
//! # After the call
//!
//! When the answer ends (after the last delta, or an error), its
//! reservations are given back and what it spent is priced for the model
//! that answered (its [`ModelDelta::Model`](toolstack::model::ModelDelta::Model),
//! else the one asked for) and added to every counter of the call: the
//! usage it reported — a [`ModelDelta::Usage`], usually last — when it
//! ended with one; otherwise (an answer cut, failed or dropped before its
//! end, or an endpoint that reports nothing) what it wrote, counted as
//! above, on its prompt (reported, else estimated): a provider bills what
//! it wrote. An answer that neither wrote nor reported anything adds
//! nothing. A call that fails, or whose future is dropped, gives its
//! reservation back at once. An answering model the table does not price
//! is priced as the model asked for.
//!
//! Calls made at the same time thus share what is left instead of each
//! being admitted on it, and no answer writes past what its limits have
//! left by more than the delta that crossed: together they overshoot a
//! limit only by the estimates' error — a prompt or an output that counts
//! more tokens than bytes / 4 — and one delta per answer.
//!
//! [`ModelDelta::Usage`]: toolstack::model::ModelDelta::Usage
//!
//! # Tools and sub-agents
//!
//! What a tool costs the model is what its result adds to the next prompt
//! (the agent's [`ToolCost`](toolstack::agent::ToolCost) attributes it):
//! the next call counts it — reserved from that prompt's estimate before
//! the call is sent, so a result a limit cannot take refuses the call
//! that would read it. A sub-agent run as a tool
//! ([`AgentTool`](toolstack::agent::AgentTool)) has its own run, and the
//! agent puts the runs it serves in its requests
//! ([`OuterRuns`](toolstack::model::OuterRuns)): a per-run limit counts
//! its calls against its own run and every run it serves, so a run's limit
//! holds for what its sub-agents spend too ("the run this one serves (as
//! its tool) has used …" when one of those refuses).
//!
//! # Models without a price
//!
//! A call to a model the price table does not price, when a cost limit
//! applies to it, is refused before the model is called —
//! [`ErrorKind::Denied`](toolstack::ErrorKind::Denied), naming the model
//! and how to price it: a cost limit that cannot count a call's cost does
//! not hold. A limit on tokens alone needs no price. To count such models
//! at a fallback price, give the table a default entry (`*`); to count
//! their tokens only, say so with
//! [`unpriced(Unpriced::TokensOnly)`](SpendLimitLayer::unpriced) (a
//! warning on every such call says its cost is not covered).
//!
//! [`ModelDelta::Usage`]: toolstack::model::ModelDelta::Usage
//!
//! # Shared by processes (feature `redis`)
//!
//! With the `redis` feature, `SpendLimitLayer::redis(RedisSpend::new(manager))`
//! keeps the counters and the reservations in Redis, shared by every
//! process using the same Redis and prefix: one Lua script reserves a
//! call's maximum on its counters atomically, one settles it. Each
//! reservation has a time to live (`RedisSpend::reservation_ttl`, 10
//! minutes by default), so a process that dies mid-call leaves nothing
//! reserved for longer. When Redis does not answer, the call is decided by
//! this process's own counts and reservations (fail open) or fails as
//! `Unavailable` (fail closed). See `RedisSpend`.
//!
//! # Differences from other spend limits
//!
//! | | provider budgets, pydantic-ai's usage limits | [`SpendLimit`] |
//! |---|---|---|
//! | where | the provider's account, or one run | any stack of model calls: per run, per caller, global |
//! | unit | dollars or tokens, floats | tokens and nano-dollars, integers: exact sums |
//! | windows | monthly | hour, day or month, UTC-aligned, several at once |
//! | across processes | the provider's | with `redis`: one count for every process on the same Redis and prefix |
//! | over the limit | an error from the provider, after the request | refused before the model is called, typed, naming the limit |
//! | concurrent calls | each admitted on what was spent before them all: overshoot by a call per concurrent call | each reserves its prompt and output first (in Redis for every replica): overshoot by the estimates' error |
//! | an answer that crosses a limit | finished, and billed | counted as it streams, and cut after the delta that crossed: typed, its text kept by the agent |
//! | a model without a price | counted by its tokens only, or not at all | refused under a cost limit, naming the model; a `*` fallback price or tokens-only, said explicitly |

mod future;
mod layer;
mod memory;
mod meter;
#[cfg(feature = "redis")]
mod redis;
mod rules;
mod service;
mod window;

pub use self::future::{ResponseFuture, ResponseStream};
pub use self::layer::{SpendLimitLayer, DEFAULT_MAX_COUNTERS, DEFAULT_RESERVED_OUTPUT};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisSpend;
pub use self::rules::{Limit, LimitReached, Scope, Unpriced};
pub use self::service::SpendLimit;
pub use self::window::Window;
pub use toolstack::model::{Cost, Price, PriceError, Prices};
