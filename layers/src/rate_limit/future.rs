use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use toolstack::{ToolError, ToolRequest};
use tower_service::Service;

use super::limiter::{CallKey, Limiter};
use super::shared::Asking;
use crate::Request;

pin_project! {
    /// Response future of [`RateLimit`](super::RateLimit).
    ///
    /// Resolves to the inner service's response when the call was within
    /// the limit; to a [`RateLimited`](toolstack::ErrorKind::RateLimited)
    /// error when it was not and the layer rejects; and, when the layer
    /// waits, sleeps until the call's bucket allows it, then gets a clone
    /// of the inner service ready and calls it. When the quota is shared
    /// by processes (Redis), it first asks the store, and sleeps for as
    /// long as the store says.
    #[derive(Debug)]
    pub struct ResponseFuture<S, F, R = ToolRequest> {
        #[pin]
        state: State<S, F, R>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    // `Asking` is made only with the `redis` feature.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    enum State<S, F, R> {
        Called {
            #[pin]
            future: F,
        },
        Rejected {
            error: Option<ToolError>,
        },
        Waiting {
            // Boxed: waiting is the slow path, and the common `Called`
            // future should not carry a timer's size.
            timer: Pin<Box<Timer>>,
            allowed: bool,
            service: S,
            request: Option<R>,
            limiter: Arc<dyn Limiter>,
        },
        Asking {
            // Boxed, as `Waiting` is: it holds a service and a request.
            asking: Box<Asking<S, R>>,
        },
        Done,
    }
}

pin_project! {
    /// What a waiting call sleeps on: until its bucket allows it, never
    /// past the call's deadline (lent to `call`), when no quota is taken
    /// and the call is not made.
    #[derive(Debug)]
    struct Timer {
        #[pin]
        sleep: Sleep,
        deadline: Option<crate::call_context::Deadline>,
    }
}

impl<S, F, R> ResponseFuture<S, F, R> {
    pub(super) fn called(future: F) -> Self {
        ResponseFuture {
            state: State::Called { future },
        }
    }

    pub(super) fn rejected(error: ToolError) -> Self {
        ResponseFuture {
            state: State::Rejected { error: Some(error) },
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) fn asking(asking: Asking<S, R>) -> Self {
        ResponseFuture {
            state: State::Asking {
                asking: Box::new(asking),
            },
        }
    }

    pub(super) fn waiting(
        service: S,
        request: R,
        limiter: Arc<dyn Limiter>,
        until: Instant,
    ) -> Self {
        ResponseFuture {
            state: State::Waiting {
                timer: Box::pin(Timer {
                    sleep: tokio::time::sleep_until(until),
                    deadline: crate::call_context::deadline(),
                }),
                allowed: false,
                service,
                request: Some(request),
                limiter,
            },
        }
    }
}

impl<S, F, R, St> Future for ResponseFuture<S, F, R>
where
    R: Request,
    S: Service<R, Response = St, Future = F>,
    S::Error: Into<ToolError>,
    F: Future<Output = Result<St, S::Error>>,
{
    type Output = Result<St, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let future = match state.as_mut().project() {
                StateProj::Called { future } => {
                    let result = ready!(future.poll(cx));
                    state.set(State::Done);
                    return Poll::Ready(result.map_err(Into::into));
                }
                StateProj::Rejected { error } => {
                    let error = error.take().unwrap_or_else(polled_after_completion);
                    state.set(State::Done);
                    return Poll::Ready(Err(error));
                }
                StateProj::Done => return Poll::Ready(Err(polled_after_completion())),
                StateProj::Asking { asking } => match ready!(asking.poll_call(cx)) {
                    Ok(future) => future,
                    Err(err) => {
                        state.set(State::Done);
                        return Poll::Ready(Err(err));
                    }
                },
                StateProj::Waiting {
                    timer,
                    allowed,
                    service,
                    request,
                    limiter,
                } => {
                    let Some(req) = request.as_ref() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let deadline = timer.deadline;
                    while !*allowed {
                        let mut sleep = timer.as_mut().project().sleep;
                        // Past the deadline the call is held, and takes
                        // no quota (`call_context.rs`).
                        if sleep.as_mut().poll(cx).is_pending()
                            || crate::call_context::too_late(deadline)
                        {
                            // A timeout above that expires now says so.
                            crate::call_context::report(crate::call_context::Wait::Quota {
                                ready_at: sleep.deadline(),
                            });
                            return Poll::Pending;
                        }
                        // Another call may have taken the cell this one woke
                        // up for; then sleep again until the next one.
                        match limiter.check(CallKey::of(req)) {
                            Ok(()) => *allowed = true,
                            Err(earliest) => sleep.reset(Instant::from_std(earliest)),
                        }
                    }
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) if !crate::call_context::too_late(deadline) => {}
                        Poll::Ready(Err(err)) => {
                            state.set(State::Done);
                            return Poll::Ready(Err(err.into()));
                        }
                        Poll::Ready(Ok(())) | Poll::Pending => {
                            crate::call_context::report(crate::call_context::Wait::Permit);
                            return Poll::Pending;
                        }
                    }
                    let Some(req) = request.take() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    crate::call_context::lend_later(deadline, || service.call(req))
                }
            };
            state.set(State::Called { future });
        }
    }
}

fn polled_after_completion() -> ToolError {
    ToolError::polled_after_completion("rate_limit::ResponseFuture")
}
