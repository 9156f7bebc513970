use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::ToolError;
use tower_service::Service;

use super::attempts::{Attempts, Shared};
use super::future::{ResponseFuture, ResponseStream};
use super::idempotency::{Idempotency, Inferred};
use super::policy::RetryPolicy;
use crate::Request;

/// Retries a call — of a tool or of a model — that fails before its first
/// item. See the [module docs](super).
///
/// `I` says whether a call may be repeated once it may have reached the
/// service ([`Idempotency`]): a `bool` given when the `Retry` is made, or
/// [`Inferred`] from the call, as
/// [`RetryLayer`](super::RetryLayer) does.
pub struct Retry<S, I = Inferred> {
    inner: S,
    // The policy, the idempotency rule and a template of the inner service
    // for retries, shared by every call (and copied for a clone): a call
    // costs one reference count, whatever the size of the stack below.
    shared: Arc<Shared<S, I>>,
}

/// A clone has its own copy of what the calls share (the policy — whose
/// budget stays shared —, the idempotency rule, the template): the
/// reference count each call takes is then the clone's, and a toolbox,
/// which keeps one clone per thread, has calls on several threads write
/// no common count.
impl<S: Clone, I: Clone> Clone for Retry<S, I> {
    fn clone(&self) -> Self {
        Retry {
            inner: self.inner.clone(),
            shared: Arc::new(Shared {
                policy: self.shared.policy.clone(),
                idempotency: self.shared.idempotency.clone(),
                template: self.shared.template.clone(),
            }),
        }
    }
}

impl<S: fmt::Debug, I> fmt::Debug for Retry<S, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

impl<S: Clone> Retry<S> {
    /// Wraps a tool or a model; whether a call may be repeated is
    /// [`Inferred`] from the call (what [`RetryLayer`](super::RetryLayer)
    /// does).
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        Retry::with_idempotency(inner, policy, Inferred)
    }
}

impl<S: Clone, I> Retry<S, I> {
    /// Wraps any service, saying whether its calls are idempotent: a
    /// `bool` for every call, or [`Inferred`].
    pub fn with_idempotency(inner: S, policy: RetryPolicy, idempotency: I) -> Self {
        Retry {
            shared: Arc::new(Shared {
                policy,
                idempotency,
                template: inner.clone(),
            }),
            inner,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.shared.policy
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
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
    I: Idempotency<R>,
{
    type Response = ResponseStream<S, R, I>;
    type Error = ToolError;
    type Future = ResponseFuture<S, R, I>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if let Some(budget) = &self.shared.policy.budget {
            budget.deposit();
        }
        // The ready service takes the first attempt; a clone of the
        // template, made and readied only then, takes any retry.
        let first = self.inner.call(request.clone());
        let attempts = Attempts {
            request,
            shared: self.shared.clone(),
            attempt: 1,
            deadline: crate::call_context::deadline(),
            failed: None,
        };
        ResponseFuture::new(first, attempts)
    }
}
