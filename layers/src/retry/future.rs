//! The response future and stream of [`Retry`](super::Retry): the state
//! machine that drives a call's attempts until one opens a stream, and
//! retries a stream that fails before its first item.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{sleep, Sleep};
use toolstack::{ToolError, ToolRequest};
use tower_service::Service;

use super::attempts::Attempts;
use super::idempotency::{Idempotency, Inferred};
use crate::Request;

pin_project! {
    #[project = StateProj]
    enum State<F, St> {
        Calling { #[pin] future: F },
        // Boxed: a timer is large, and only a retry needs one.
        Backoff { sleep: Pin<Box<Sleep>> },
        Readying,
        Streaming { #[pin] stream: St, emitted: bool },
        Done,
    }
}

/// Drives the attempts until one opens a stream or the error is final.
fn poll_open<S, R, I>(
    mut state: Pin<&mut State<S::Future, S::Response>>,
    attempts: &mut Attempts<S, R, I>,
    cx: &mut Context<'_>,
) -> Poll<Result<S::Response, ToolError>>
where
    R: Request + Clone,
    S: Service<R> + Clone,
    S::Error: Into<ToolError>,
    I: Idempotency<R>,
{
    loop {
        let (err, reached) = match state.as_mut().project() {
            StateProj::Calling { future } => match future.poll(cx) {
                Poll::Ready(Ok(stream)) => {
                    state.set(State::Done);
                    return Poll::Ready(Ok(stream));
                }
                Poll::Ready(Err(err)) => (err.into(), true),
                Poll::Pending => {
                    attempts.amend();
                    return Poll::Pending;
                }
            },
            // Past the deadline, the call is held: no attempt starts, and
            // the timeout whose deadline it is ends the call with what the
            // report says (`call_context.rs`).
            StateProj::Backoff { sleep } => {
                if sleep.as_mut().poll(cx).is_pending() || attempts.too_late() {
                    attempts.report(true);
                    return Poll::Pending;
                }
                state.set(State::Readying);
                continue;
            }
            StateProj::Readying => {
                if attempts.too_late() {
                    attempts.report(false);
                    return Poll::Pending;
                }
                match attempts.service().poll_ready(cx) {
                    Poll::Ready(Ok(())) if attempts.too_late() => {
                        // Admitted as the deadline passed: the readiness
                        // (a permit) goes back unused.
                        if let Some(failed) = attempts.failed.as_mut() {
                            failed.service = None;
                        }
                        attempts.report(false);
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(())) => {
                        let request = attempts.request.clone();
                        let deadline = attempts.deadline;
                        let service = attempts.service();
                        let future =
                            crate::call_context::lend_later(deadline, || service.call(request));
                        state.set(State::Calling { future });
                        continue;
                    }
                    Poll::Ready(Err(err)) => (err.into(), false),
                    Poll::Pending => {
                        attempts.report(false);
                        return Poll::Pending;
                    }
                }
            }
            StateProj::Streaming { .. } | StateProj::Done => {
                return Poll::Ready(Err(ToolError::polled_after_completion(
                    "retry::ResponseFuture",
                )));
            }
        };
        match attempts.next(err, reached) {
            Ok(delay) => state.set(State::Backoff {
                sleep: Box::pin(sleep(delay)),
            }),
            Err(err) => {
                state.set(State::Done);
                return Poll::Ready(Err(err));
            }
        }
    }
}

pin_project! {
    /// The response future of [`Retry`](super::Retry): retries failures to
    /// open the stream.
    pub struct ResponseFuture<S, R = ToolRequest, I = Inferred>
    where
        S: Service<R>,
    {
        #[pin]
        state: State<S::Future, S::Response>,
        attempts: Option<Attempts<S, R, I>>,
    }
}

impl<S: Service<R>, R, I> ResponseFuture<S, R, I> {
    pub(super) fn new(first: S::Future, attempts: Attempts<S, R, I>) -> Self {
        ResponseFuture {
            state: State::Calling { future: first },
            attempts: Some(attempts),
        }
    }
}

impl<S, R, I> Future for ResponseFuture<S, R, I>
where
    R: Request + Clone,
    S: Service<R> + Clone,
    S::Error: Into<ToolError>,
    I: Idempotency<R>,
{
    type Output = Result<ResponseStream<S, R, I>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(attempts) = this.attempts.as_mut() else {
            return Poll::Ready(Err(ToolError::polled_after_completion(
                "retry::ResponseFuture",
            )));
        };
        let opened = ready!(poll_open(this.state, attempts, cx));
        let attempts = this.attempts.take();
        Poll::Ready(match (opened, attempts) {
            (Ok(stream), Some(attempts)) => Ok(ResponseStream {
                state: State::Streaming {
                    stream,
                    emitted: false,
                },
                attempts,
            }),
            (Err(err), _) => Err(err),
            (Ok(_), None) => Err(ToolError::polled_after_completion("retry::ResponseFuture")),
        })
    }
}

pin_project! {
    /// The response stream of [`Retry`](super::Retry): an error before the
    /// first item starts a new attempt; once an item has been emitted,
    /// errors pass through, so no item is ever duplicated.
    pub struct ResponseStream<S, R = ToolRequest, I = Inferred>
    where
        S: Service<R>,
    {
        #[pin]
        state: State<S::Future, S::Response>,
        attempts: Attempts<S, R, I>,
    }
}

impl<S, R, I, T> Stream for ResponseStream<S, R, I>
where
    R: Request + Clone,
    S: Service<R> + Clone,
    S::Error: Into<ToolError>,
    S::Response: Stream<Item = Result<T, ToolError>>,
    I: Idempotency<R>,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Streaming { stream, emitted } => match ready!(stream.poll_next(cx)) {
                    Some(Ok(item)) => {
                        *emitted = true;
                        return Poll::Ready(Some(Ok(item)));
                    }
                    Some(Err(err)) => {
                        let next = if *emitted {
                            Err(err)
                        } else {
                            this.attempts.next(err, true)
                        };
                        match next {
                            // Dropping the failed stream here ends that attempt.
                            Ok(delay) => this.state.set(State::Backoff {
                                sleep: Box::pin(sleep(delay)),
                            }),
                            Err(err) => {
                                // The last item: drop the stream behind it.
                                this.state.set(State::Done);
                                return Poll::Ready(Some(Err(err)));
                            }
                        }
                    }
                    None => {
                        this.state.set(State::Done);
                        return Poll::Ready(None);
                    }
                },
                StateProj::Done => return Poll::Ready(None),
                _ => match ready!(poll_open(this.state.as_mut(), this.attempts, cx)) {
                    Ok(stream) => this.state.set(State::Streaming {
                        stream,
                        emitted: false,
                    }),
                    Err(err) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(err)));
                    }
                },
            }
        }
    }
}

impl<S: Service<R>, R, I> fmt::Debug for ResponseFuture<S, R, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("retry::ResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<S: Service<R>, R, I> fmt::Debug for ResponseStream<S, R, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("retry::ResponseStream")
            .field("attempt", &self.attempts.attempt)
            .finish_non_exhaustive()
    }
}
