//! [`ServiceBuilderExt`]: the layers of this crate as `ServiceBuilder`
//! methods.

use tower::layer::util::Stack;
use tower::ServiceBuilder;

use crate::catch_panic::CatchPanicLayer;
use crate::concurrency::ConcurrencyLimitLayer;
#[cfg(feature = "rate-limit")]
use crate::rate_limit::RateLimitLayer;
use crate::retry::{RetryLayer, RetryPolicy};
use crate::timeout::TimeoutLayer;
use crate::trace::TraceLayer;
#[cfg(feature = "validate")]
use crate::validate::ValidateLayer;

/// Adds this crate's stream-aware layers to `tower::ServiceBuilder`.
///
/// The names say "tool" so that they do not collide with tower's own
/// `timeout`, `retry`, `rate_limit` and `concurrency_limit`, which are not
/// stream-aware. All but `validate_tool_arguments` apply to a model as
/// well (see the [crate docs](crate#tools-and-models)).
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
///     .trace_tool()
///     .tool_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
///     .tool_retry(RetryPolicy::new())
///     .tool_concurrency_limit(8)
///     .catch_tool_panic()
///     .service(tool::from_fn("ping", |_: Args| async { Ok::<_, ToolError>("pong") }));
/// # let _ = tool;
/// ```
pub trait ServiceBuilderExt<L>: sealed::Sealed {
    /// Adds a [`TraceLayer`] with the default callbacks.
    fn trace_tool(self) -> ServiceBuilder<Stack<TraceLayer, L>>;
    /// Adds a stream-aware [`TimeoutLayer`].
    fn tool_timeout(self, limits: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>>;
    /// Adds a [`RetryLayer`] (a tool below must carry its description,
    /// which says whether it is idempotent; a model needs none).
    fn tool_retry(self, policy: RetryPolicy) -> ServiceBuilder<Stack<RetryLayer, L>>;
    /// Adds a [`RateLimitLayer`].
    #[cfg(feature = "rate-limit")]
    fn tool_rate_limit(self, layer: RateLimitLayer) -> ServiceBuilder<Stack<RateLimitLayer, L>>;
    /// Adds a [`ConcurrencyLimitLayer`] of `max` calls in flight, streams
    /// included.
    fn tool_concurrency_limit(self, max: usize) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>>;
    /// Adds a [`CatchPanicLayer`].
    fn catch_tool_panic(self) -> ServiceBuilder<Stack<CatchPanicLayer, L>>;
    /// Adds a [`ValidateLayer`] (the tool below must carry its description).
    #[cfg(feature = "validate")]
    fn validate_tool_arguments(self) -> ServiceBuilder<Stack<ValidateLayer, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn trace_tool(self) -> ServiceBuilder<Stack<TraceLayer, L>> {
        self.layer(TraceLayer::new())
    }

    fn tool_timeout(self, limits: TimeoutLayer) -> ServiceBuilder<Stack<TimeoutLayer, L>> {
        self.layer(limits)
    }

    fn tool_retry(self, policy: RetryPolicy) -> ServiceBuilder<Stack<RetryLayer, L>> {
        self.layer(RetryLayer::new(policy))
    }

    #[cfg(feature = "rate-limit")]
    fn tool_rate_limit(self, layer: RateLimitLayer) -> ServiceBuilder<Stack<RateLimitLayer, L>> {
        self.layer(layer)
    }

    fn tool_concurrency_limit(self, max: usize) -> ServiceBuilder<Stack<ConcurrencyLimitLayer, L>> {
        self.layer(ConcurrencyLimitLayer::new(max))
    }

    fn catch_tool_panic(self) -> ServiceBuilder<Stack<CatchPanicLayer, L>> {
        self.layer(CatchPanicLayer::new())
    }

    #[cfg(feature = "validate")]
    fn validate_tool_arguments(self) -> ServiceBuilder<Stack<ValidateLayer, L>> {
        self.layer(ValidateLayer::new())
    }
}

mod sealed {
    pub trait Sealed {}
    impl<L> Sealed for tower::ServiceBuilder<L> {}
}
