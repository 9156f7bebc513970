use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::{Describe, ToolError, ToolInfo, ToolItem, ToolRequest};
use tower_service::Service;

use super::future::Attempts;
use super::{ResponseFuture, RetryPolicy};

/// Retries a tool call that fails before its first item. See the
/// [module docs](super).
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    policy: RetryPolicy,
    idempotent: bool,
}

impl<S: Describe> Retry<S> {
    /// Wraps a described tool; whether it is idempotent comes from its
    /// annotations ([`ToolAnnotations::is_idempotent`](toolstack::ToolAnnotations::is_idempotent)).
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        let idempotent = inner.info().annotations().is_idempotent();
        Retry {
            inner,
            policy,
            idempotent,
        }
    }
}

impl<S> Retry<S> {
    /// Wraps any tool service, saying whether it is idempotent.
    pub fn with_idempotency(inner: S, policy: RetryPolicy, idempotent: bool) -> Self {
        Retry {
            inner,
            policy,
            idempotent,
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

impl<S: Describe> Describe for Retry<S> {
    fn info(&self) -> &ToolInfo {
        self.inner.info()
    }
}

impl<S, St> Service<ToolRequest> for Retry<S>
where
    S: Service<ToolRequest, Response = St> + Clone,
    S::Error: Into<ToolError>,
    St: Stream<Item = ToolItem>,
{
    type Response = super::ResponseStream<S>;
    type Error = ToolError;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
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
            idempotent: self.idempotent,
            attempt: 1,
        };
        ResponseFuture::new(first, attempts)
    }
}
