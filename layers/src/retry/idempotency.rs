use toolstack::model::ChatRequest;
use toolstack::{Describe, ToolRequest};

/// Whether a call may be tried again once it may have reached the service
/// — that is, whether repeating it can repeat no effect.
///
/// [`Retry`](super::Retry) asks only when an attempt failed after it may
/// have reached the service, so a call that succeeds pays nothing for the
/// answer. Implemented by `bool` (said once, when the `Retry` is made) and
/// by [`Inferred`] (what [`RetryLayer`](super::RetryLayer) uses).
pub trait Idempotency<S, R> {
    /// Whether `request`, sent to `service`, may be sent again.
    fn is_idempotent(&self, service: &S, request: &R) -> bool;
}

/// Said when the [`Retry`](super::Retry) was made, for every call.
impl<S, R> Idempotency<S, R> for bool {
    #[inline]
    fn is_idempotent(&self, _: &S, _: &R) -> bool {
        *self
    }
}

/// Idempotency inferred from the call, as [`RetryLayer`](super::RetryLayer)
/// does:
///
/// * a tool call ([`ToolRequest`]) is idempotent when the tool's
///   annotations say it is idempotent or read-only
///   ([`ToolAnnotations::is_idempotent`](toolstack::ToolAnnotations::is_idempotent)),
///   so the tool below must carry its description ([`Describe`]); over a
///   tool service without one, use [`Retry::with_idempotency`] with a
///   `bool`;
/// * a model call ([`ChatRequest`]) is always idempotent: asking a model
///   again has no effect beyond the tokens it costs, which is what a retry
///   is for.
///
/// [`Retry::with_idempotency`]: super::Retry::with_idempotency
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inferred;

impl<S: Describe> Idempotency<S, ToolRequest> for Inferred {
    #[inline]
    fn is_idempotent(&self, service: &S, _: &ToolRequest) -> bool {
        service.info().annotations().is_idempotent()
    }
}

impl<S> Idempotency<S, ChatRequest> for Inferred {
    #[inline]
    fn is_idempotent(&self, _: &S, _: &ChatRequest) -> bool {
        true
    }
}
