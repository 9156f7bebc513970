//! [`ServiceBuilderExt`]: the layers of this crate as `ServiceBuilder`
//! methods.

use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::approval::ApprovalLayer;
use crate::budget::BudgetLayer;
use crate::catch_panic::CatchPanicLayer;
use crate::coalesce::CoalesceLayer;
use crate::concurrency::ConcurrencyLimitLayer;
use crate::guardrail::GuardrailLayer;
#[cfg(feature = "rate-limit")]
use crate::rate_limit::RateLimitLayer;
use crate::repair::RepairLayer;
use crate::retry::{RetryLayer, RetryPolicy};
use crate::timeout::TimeoutLayer;
use crate::trace::TraceLayer;
#[cfg(feature = "validate")]
use crate::validate::ValidateLayer;

/// Adds this crate's stream-aware layers to `tower::ServiceBuilder`.
///
/// One pattern, as tower-http's `ServiceBuilderExt` has one: every method
/// is `stream_` and the layer's name. The prefix says what sets these
/// layers apart — they watch the response stream — and keeps them from
/// clashing with tower's inherent `timeout`, `retry`, `rate_limit` and
/// `concurrency_limit` and with tower-http's `trace_for_http` and
/// `catch_panic`, which are not stream-aware. A method takes what tower's
/// method of the same name takes where there is one (a retry policy, a
/// count); otherwise the configured layer, or nothing for the default.
/// All but `stream_validate` apply to a model as well (see the
/// [crate docs](crate#tools-and-models)).
///
/// ```
/// use std::time::Duration;
/// use toolstack::{tool, ToolError};
/// use toolstack_layers::retry::RetryPolicy;
/// use toolstack_layers::timeout::TimeoutLayer;
/// use toolstack_layers::ServiceBuilderExt;
/// use tower::ServiceBuilder;
///
/// #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
/// #[schemars(crate = "toolstack::schemars")]
/// struct Args {}
///
/// let tool = ServiceBuilder::new()
///     .stream_trace()
///     .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
///     .stream_retry(RetryPolicy::new())
///     .stream_concurrency_limit(8)
///     .stream_catch_panic()
///     .service(tool::from_fn("ping", |_: Args| async { Ok::<_, ToolError>("pong") }));
/// # let _ = tool;
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed {
    /// Adds a [`TraceLayer`] with the default callbacks.
    fn stream_trace(self) -> ServiceBuilder<Stack<TraceLayer, L>>;
    /// Adds a stream-aware [`TimeoutLayer`].
    fn stream_timeout(self, limits: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a [`RetryLayer`] (a tool below must carry its description,
    /// which says whether it is idempotent; a model needs none).
    fn stream_retry(self, policy: RetryPolicy) -> ServiceBuilder<Stack<RetryLayer, L>>;
    /// Adds a [`RateLimitLayer`].
    #[cfg(feature = "rate-limit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "rate-limit")))]
    fn stream_rate_limit(self, layer: RateLimitLayer) -> ServiceBuilder<Stack<RateLimitLayer, L>>;
    /// Adds a [`ConcurrencyLimitLayer`] of `max` calls in flight, streams
    /// included.
    fn stream_concurrency_limit(
        self,
        max: usize,
    ) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>>;
    /// Adds a [`CatchPanicLayer`].
    fn stream_catch_panic(self) -> ServiceBuilder<Stack<CatchPanicLayer, L>>;
    /// Adds a [`ValidateLayer`] (the tool below must carry its description).
    #[cfg(feature = "validate")]
    #[cfg_attr(docsrs, doc(cfg(feature = "validate")))]
    fn stream_validate(self) -> ServiceBuilder<Stack<ValidateLayer, L>>;
    /// Adds a [`BudgetLayer`]: what reaches the model is capped.
    fn stream_budget(self, budget: BudgetLayer) -> ServiceBuilder<Stack<BudgetLayer, L>>;
    /// Adds a [`CoalesceLayer`]: runs of small text items are merged.
    fn stream_coalesce(self, coalesce: CoalesceLayer) -> ServiceBuilder<Stack<CoalesceLayer, L>>;
    /// Adds a [`RepairLayer`]: almost-JSON arguments are repaired.
    fn stream_repair(self, repair: RepairLayer) -> ServiceBuilder<Stack<RepairLayer, L>>;
    /// Adds an [`ApprovalLayer`]: calls are approved before they run.
    fn stream_approval(self, approval: ApprovalLayer) -> ServiceBuilder<Stack<ApprovalLayer, L>>;
    /// Adds a [`GuardrailLayer`].
    fn stream_guardrail(
        self,
        guardrail: GuardrailLayer,
    ) -> ServiceBuilder<Stack<GuardrailLayer, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn stream_trace(self) -> ServiceBuilder<Stack<TraceLayer, L>> {
        self.layer(TraceLayer::new())
    }

    fn stream_timeout(self, limits: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>> {
        self.layer(limits)
    }

    fn stream_retry(self, policy: RetryPolicy) -> ServiceBuilder<Stack<RetryLayer, L>> {
        self.layer(RetryLayer::new(policy))
    }

    #[cfg(feature = "rate-limit")]
    fn stream_rate_limit(self, layer: RateLimitLayer) -> ServiceBuilder<Stack<RateLimitLayer, L>> {
        self.layer(layer)
    }

    fn stream_concurrency_limit(
        self,
        max: usize,
    ) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>> {
        self.layer(ConcurrencyLimitLayer::new(max))
    }

    fn stream_catch_panic(self) -> ServiceBuilder<Stack<CatchPanicLayer, L>> {
        self.layer(CatchPanicLayer::new())
    }

    #[cfg(feature = "validate")]
    fn stream_validate(self) -> ServiceBuilder<Stack<ValidateLayer, L>> {
        self.layer(ValidateLayer::new())
    }

    fn stream_budget(self, budget: BudgetLayer) -> ServiceBuilder<Stack<BudgetLayer, L>> {
        self.layer(budget)
    }

    fn stream_coalesce(self, coalesce: CoalesceLayer) -> ServiceBuilder<Stack<CoalesceLayer, L>> {
        self.layer(coalesce)
    }

    fn stream_repair(self, repair: RepairLayer) -> ServiceBuilder<Stack<RepairLayer, L>> {
        self.layer(repair)
    }

    fn stream_approval(self, approval: ApprovalLayer) -> ServiceBuilder<Stack<ApprovalLayer, L>> {
        self.layer(approval)
    }

    fn stream_guardrail(
        self,
        guardrail: GuardrailLayer,
    ) -> ServiceBuilder<Stack<GuardrailLayer, L>> {
        self.layer(guardrail)
    }
}

mod sealed {
    pub trait Sealed {}
    impl<L> Sealed for tower::ServiceBuilder<L> {}
}
