use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::ToolError;
use tower_service::Service;

use super::{BudgetLayer, ResponseFuture, Tap};
use crate::{Output, Request};

/// A tool (or model) whose output is capped; see the [module docs](super).
#[derive(Clone, Debug)]
pub struct Budget<S> {
    inner: S,
    config: BudgetLayer,
}

impl<S> Budget<S> {
    pub(super) fn new(inner: S, config: BudgetLayer) -> Self {
        Budget { inner, config }
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

impl<S, R, St, T> Service<R> for Budget<S>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output + 'static,
{
    type Response = super::Budgeted<St, T>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let tap = request.extensions().get::<Tap<T>>().cloned();
        ResponseFuture::new(self.inner.call(request), self.config.clone(), tap)
    }
}
