use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::time::Instant;
use toolstack::ToolError;
use tower_service::Service;

use super::future::Bounds;
use super::{ResponseFuture, TimeoutLayer};
use crate::Request;

/// Bounds a call — of a tool or of a model — in time, stream included. See
/// the [module docs](super).
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

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R, St, T> Service<R> for Timeout<S>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
{
    type Response = super::ResponseStream<St>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let limits = self.limits;
        let lent = crate::call_context::start();
        // Only bounds counted from `call` need the clock now; a timeout
        // above lent the instant its call started (this one's, give or take
        // the layers between).
        let start = (limits.deadline.is_set() || limits.first_item.is_set())
            .then(|| lent.map_or_else(Instant::now, |lent| lent.at));
        let bounds = Bounds {
            start,
            limits,
            kind: R::KIND,
            first_item_seen: false,
            waited: 0,
        };
        let inner = match start {
            // The layers below take their time from this instant, and see
            // the nearer of this deadline and one lent from above.
            Some(at) => {
                let outer = lent.and_then(|lent| lent.deadline);
                let own = limits
                    .deadline
                    .get()
                    .map(|limit| crate::call_context::Deadline::after(at, limit));
                let deadline = match (own, outer) {
                    (Some(own), Some(outer)) if outer.at < own.at => Some(outer),
                    (own, outer) => own.or(outer),
                };
                crate::call_context::lend(crate::call_context::Start { at, deadline }, || {
                    self.inner.call(request)
                })
            }
            None => self.inner.call(request),
        };
        ResponseFuture::new(inner, bounds)
    }
}
