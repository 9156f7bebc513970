use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::PollSemaphore;
use toolstack::{ErrorKind, ToolError};
use tower_service::Service;

use super::ResponseFuture;

/// Limits the calls of a service — a tool or a model — in flight, counting a
/// call until its response stream ends, errors or is dropped. See the
/// [module docs](super).
#[derive(Debug)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    semaphore: Arc<Semaphore>,
    // Made only when no permit is free: creating one allocates, and a
    // clone is made per call by the toolbox and by retry.
    waiting: Option<PollSemaphore>,
    // Reserved by `poll_ready`, spent by `call`.
    permit: Option<OwnedSemaphorePermit>,
}

impl<S> ConcurrencyLimit<S> {
    /// At most `max` calls of `inner` (and its clones) in flight.
    pub fn new(inner: S, max: usize) -> Self {
        Self::with_semaphore(inner, Arc::new(Semaphore::new(max)))
    }

    /// Draws permits from a semaphore that may be shared with other services.
    pub fn with_semaphore(inner: S, semaphore: Arc<Semaphore>) -> Self {
        ConcurrencyLimit {
            inner,
            semaphore,
            waiting: None,
            permit: None,
        }
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

impl<S: Clone> Clone for ConcurrencyLimit<S> {
    fn clone(&self) -> Self {
        // The clone shares the semaphore but not the permit: a permit
        // reserved by this handle's `poll_ready` belongs to this handle's
        // next call only.
        ConcurrencyLimit {
            inner: self.inner.clone(),
            semaphore: self.semaphore.clone(),
            waiting: None,
            permit: None,
        }
    }
}

fn closed() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        "the concurrency limit's semaphore was closed",
    )
}

impl<S, R, St, T> Service<R> for ConcurrencyLimit<S>
where
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
{
    type Response = super::ResponseStream<St>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        if self.permit.is_none() {
            if self.waiting.is_none() {
                match self.semaphore.clone().try_acquire_owned() {
                    Ok(permit) => self.permit = Some(permit),
                    Err(TryAcquireError::Closed) => return Poll::Ready(Err(closed())),
                    // Queue up (in FIFO order) and keep the place until served.
                    Err(TryAcquireError::NoPermits) => {
                        self.waiting = Some(PollSemaphore::new(self.semaphore.clone()))
                    }
                }
            }
            if let Some(waiting) = &mut self.waiting {
                match ready!(waiting.poll_acquire(cx)) {
                    Some(permit) => {
                        self.permit = Some(permit);
                        self.waiting = None;
                    }
                    None => return Poll::Ready(Err(closed())),
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let permit = self
            .permit
            .take()
            .expect("ConcurrencyLimit::call before poll_ready returned Ready(Ok)");
        ResponseFuture::new(self.inner.call(request), permit)
    }
}
