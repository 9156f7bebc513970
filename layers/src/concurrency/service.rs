use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::{Semaphore, TryAcquireError};
use tokio::time::{sleep, Sleep};
use tokio_util::sync::PollSemaphore;
use toolstack::{ErrorKind, ToolError};
use tower_service::Service;

use super::permits::{Permit, Permits, Waiter};
use super::ResponseFuture;

/// Limits the calls of a service — a tool or a model — in flight, counting a
/// call until its response stream ends, errors or is dropped. See the
/// [module docs](super).
#[derive(Debug)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    source: Source,
    // Made only when no permit is free: creating one allocates, and a
    // clone is made per call by the toolbox and by retry.
    waiting: Option<Queued>,
    // Reserved by `poll_ready`, spent by `call`.
    permit: Option<Permit>,
    // How long a call may wait for a permit; `None`: as long as it takes.
    max_wait: Option<Duration>,
    // Armed when a call starts waiting (only with `max_wait`).
    give_up: Option<Pin<Box<Sleep>>>,
    // Set when the wait ran out: `poll_ready` is then ready (the service
    // is not broken), and the next `call` fails as overloaded.
    shed: bool,
}

/// Where a limit's permits come from. A clone of the limit's own is a new
/// handle on the same count.
#[derive(Debug)]
pub(super) enum Source {
    /// The limit's own: an atomic count, a queue only while calls wait.
    Own(Arc<Permits>),
    /// A semaphore the caller gave, which it may share or close.
    Semaphore(Arc<Semaphore>),
}

impl Clone for Source {
    fn clone(&self) -> Self {
        match self {
            Source::Own(permits) => Source::Own(Arc::new(permits.handle())),
            Source::Semaphore(semaphore) => Source::Semaphore(Arc::clone(semaphore)),
        }
    }
}

/// A call waiting in the queue for a permit.
#[derive(Debug)]
struct Queued {
    poll: PollSemaphore,
    // Registered with the limit's own permits (`None` on a caller's
    // semaphore); unregistered when served or dropped.
    waiter: Option<Waiter>,
}

impl<S> ConcurrencyLimit<S> {
    /// At most `max` calls of `inner` (and its clones) in flight.
    pub fn new(inner: S, max: usize) -> Self {
        Self::from_source(inner, Source::Own(Arc::new(Permits::new(max))))
    }

    /// Draws permits from a semaphore that may be shared with other services.
    pub fn with_semaphore(inner: S, semaphore: Arc<Semaphore>) -> Self {
        Self::from_source(inner, Source::Semaphore(semaphore))
    }

    pub(super) fn from_source(inner: S, source: Source) -> Self {
        ConcurrencyLimit {
            inner,
            source,
            waiting: None,
            permit: None,
            max_wait: None,
            give_up: None,
            shed: false,
        }
    }

    /// Lets a call wait at most `max` for a permit: past it, the call fails
    /// with [`ErrorKind::Overloaded`] — *"waited 100ms for capacity; the
    /// tool never started"* — without reaching the service, so a retry
    /// above may try it again whatever the tool's idempotency. As tower's
    /// `LoadShed` does, `poll_ready` is then ready and the call is what
    /// fails: one slow queue never marks the service broken.
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = Some(max);
        self
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

impl<S: Clone> Clone for ConcurrencyLimit<S> {
    fn clone(&self) -> Self {
        // The clone shares the semaphore but not the permit: a permit
        // reserved by this handle's `poll_ready` belongs to this handle's
        // next call only.
        ConcurrencyLimit {
            inner: self.inner.clone(),
            source: self.source.clone(),
            waiting: None,
            permit: None,
            max_wait: self.max_wait,
            give_up: None,
            shed: false,
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
        if self.shed {
            return Poll::Ready(Ok(()));
        }
        if self.permit.is_none() {
            if self.waiting.is_none() {
                self.permit = match &self.source {
                    Source::Own(permits) => match Permit::try_own(permits) {
                        Some(permit) => Some(permit),
                        None => match Waiter::register(permits) {
                            Err(permit) => Some(permit),
                            Ok(waiter) => {
                                self.waiting = Some(Queued {
                                    poll: PollSemaphore::new(waiter.queue()),
                                    waiter: Some(waiter),
                                });
                                None
                            }
                        },
                    },
                    Source::Semaphore(semaphore) => match semaphore.clone().try_acquire_owned() {
                        Ok(permit) => Some(Permit::Semaphore(permit)),
                        Err(TryAcquireError::Closed) => return Poll::Ready(Err(closed())),
                        Err(TryAcquireError::NoPermits) => {
                            self.waiting = Some(Queued {
                                poll: PollSemaphore::new(semaphore.clone()),
                                waiter: None,
                            });
                            None
                        }
                    },
                };
                // Queued up (in FIFO order): keep the place until served.
                if self.waiting.is_some() {
                    self.give_up = self.max_wait.map(|max| Box::pin(sleep(max)));
                }
            }
            if let Some(waiting) = &mut self.waiting {
                match waiting.poll.poll_acquire(cx) {
                    Poll::Ready(Some(permit)) => {
                        self.permit = Some(match self.waiting.take().and_then(|q| q.waiter) {
                            Some(waiter) => waiter.served(permit),
                            None => Permit::Semaphore(permit),
                        });
                        self.give_up = None;
                    }
                    Poll::Ready(None) => return Poll::Ready(Err(closed())),
                    Poll::Pending => {
                        let Some(give_up) = &mut self.give_up else {
                            return Poll::Pending;
                        };
                        ready!(give_up.as_mut().poll(cx));
                        // Out of patience: leave the queue, fail the call.
                        self.waiting = None;
                        self.give_up = None;
                        self.shed = true;
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if std::mem::take(&mut self.shed) {
            let waited = self.max_wait.unwrap_or_default();
            return ResponseFuture::overloaded(crate::call_context::refused_here(ToolError::new(
                ErrorKind::Overloaded,
                format!("waited {waited:?} for capacity; the tool never started"),
            )));
        }
        let permit = self
            .permit
            .take()
            .expect("ConcurrencyLimit::call before poll_ready returned Ready(Ok)");
        ResponseFuture::new(self.inner.call(request), permit)
    }
}
