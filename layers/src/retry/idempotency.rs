use toolstack::model::ChatRequest;
use toolstack::ToolRequest;

/// Whether a call may be tried again once it may have reached the service
/// — that is, whether repeating it can repeat no effect.
///
/// [`Retry`](super::Retry) asks only when an attempt failed after it may
/// have reached the service, so a call that succeeds pays nothing for the
/// answer. Implemented by `bool` (said once, when the `Retry` is made) and
/// by [`Inferred`] (what [`RetryLayer`](super::RetryLayer) uses).
pub trait Idempotency<R> {
    /// Whether `request` may be sent again.
    fn is_idempotent(&self, request: &R) -> bool;
}

/// Said when the [`Retry`](super::Retry) was made, for every call.
impl<R> Idempotency<R> for bool {
    #[inline]
    fn is_idempotent(&self, _: &R) -> bool {
        *self
    }
}

/// Idempotency inferred from the call, as [`RetryLayer`](super::RetryLayer)
/// does:
///
/// * a tool call ([`ToolRequest`]) is idempotent when the description it
///   carries ([`ToolRequest::info`], set by the toolbox at dispatch) has
///   annotations that say it is idempotent or read-only
///   ([`ToolAnnotations::is_idempotent`](toolstack::ToolAnnotations::is_idempotent)).
///   A request that carries no description — a tool called directly, not
///   through a [`Toolbox`](toolstack::Toolbox) or a
///   [`BoxTool`](toolstack::BoxTool) — is taken as not idempotent, the
///   safe answer; say it with [`Retry::with_idempotency`] instead;
/// * a model call ([`ChatRequest`]) is always idempotent: asking a model
///   again has no effect beyond the tokens it costs, which is what a retry
///   is for.
///
/// [`Retry::with_idempotency`]: super::Retry::with_idempotency
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inferred;

impl Idempotency<ToolRequest> for Inferred {
    #[inline]
    fn is_idempotent(&self, request: &ToolRequest) -> bool {
        request
            .info()
            .is_some_and(|info| info.annotations().is_idempotent())
    }
}

impl Idempotency<ChatRequest> for Inferred {
    #[inline]
    fn is_idempotent(&self, _: &ChatRequest) -> bool {
        true
    }
}
