use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::time::Instant;
use toolstack::{Describe, ToolError, ToolInfo, ToolItem, ToolRequest};
use tower_service::Service;

use super::future::Bounds;
use super::{ResponseFuture, TimeoutLayer};

/// Bounds a tool call in time, stream included. See the [module docs](super).
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    limits: TimeoutLayer,
}

impl<S> Timeout<S> {
    /// Wraps `inner` with the bounds configured in `limits`.
    pub fn new(inner: S, limits: TimeoutLayer) -> Self {
        Timeout { inner, limits }
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

impl<S: Describe> Describe for Timeout<S> {
    fn info(&self) -> &ToolInfo {
        self.inner.info()
    }
}

impl<S, St> Service<ToolRequest> for Timeout<S>
where
    S: Service<ToolRequest, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = ToolItem>,
{
    type Response = super::ResponseStream<St>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let limits = self.limits;
        // Only bounds counted from `call` need the clock now.
        let start = (limits.deadline.is_some() || limits.first_item.is_some()).then(Instant::now);
        let bounds = Bounds {
            deadline: start.zip(limits.deadline).map(|(s, d)| s + d),
            first_item: start.zip(limits.first_item).map(|(s, d)| s + d),
            limits,
        };
        ResponseFuture::new(self.inner.call(request), bounds)
    }
}
