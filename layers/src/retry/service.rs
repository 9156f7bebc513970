use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::ToolError;
use tower_service::Service;

use super::future::Attempts;
use super::{Idempotency, Inferred, ResponseFuture, RetryPolicy};
use crate::Request;

/// Retries a call — of a tool or of a model — that fails before its first
/// item. See the [module docs](super).
///
/// `I` says whether a call may be repeated once it may have reached the
/// service ([`Idempotency`]): a `bool` given when the `Retry` is made, or
/// [`Inferred`](super::Inferred) from the call, as
/// [`RetryLayer`](super::RetryLayer) does.
#[derive(Debug, Clone)]
pub struct Retry<S, I = Inferred> {
    inner: S,
    policy: RetryPolicy,
    idempotency: I,
}

impl<S> Retry<S> {
    /// Wraps a tool or a model; whether a call may be repeated is
    /// [`Inferred`] from the call (what [`RetryLayer`](super::RetryLayer)
    /// does).
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        Retry::with_idempotency(inner, policy, Inferred)
    }
}

impl<S, I> Retry<S, I> {
    /// Wraps any service, saying whether its calls are idempotent: a
    /// `bool` for every call, or [`Inferred`](super::Inferred).
    pub fn with_idempotency(inner: S, policy: RetryPolicy, idempotency: I) -> Self {
        Retry {
            inner,
            policy,
            idempotency,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R, I, St, T> Service<R> for Retry<S, I>
where
    R: Request + Clone,
    S: Service<R, Response = St> + Clone,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    I: Idempotency<R> + Clone,
{
    type Response = super::ResponseStream<S, R, I>;
    type Error = ToolError;
    type Future = ResponseFuture<S, R, I>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if let Some(budget) = &self.policy.budget {
            budget.deposit();
        }
        // The ready service takes the first attempt; a clone, readied
        // afterwards, takes any retry.
        let first = self.inner.call(request.clone());
        let attempts = Attempts {
            service: self.inner.clone(),
            request,
            policy: self.policy.clone(),
            idempotency: self.idempotency.clone(),
            attempt: 1,
        };
        ResponseFuture::new(first, attempts)
    }
}
