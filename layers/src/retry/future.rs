use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{sleep, Sleep};
use toolstack::{ToolError, ToolRequest};
use tower_service::Service;

use super::policy::refused_before_running;
use super::{Idempotency, Inferred, RetryPolicy};
use crate::Request;

/// What a call needs to be tried again: the request, the layer's shared
/// policy, and — made only when a retry happens — a service to retry on.
pub(super) struct Attempts<S, R, I> {
    // Cloned from the shared template, boxed, on the first retry: a call
    // that succeeds at once carries a pointer, not a copy of the stack.
    pub(super) service: Option<Box<S>>,
    pub(super) request: R,
    pub(super) shared: Arc<Shared<S, I>>,
    /// Attempts made so far.
    pub(super) attempt: u32,
}

/// What every call of one [`Retry`](super::Retry) service (and its clones)
/// shares.
pub(super) struct Shared<S, I> {
    pub(super) policy: RetryPolicy,
    pub(super) idempotency: I,
    // An unready copy of the inner service, cloned for each retry: a clone
    // of the service the first attempt went to, as tower's retry makes.
    pub(super) template: S,
}

impl<S, R: Request, I: Idempotency<R>> Attempts<S, R, I> {
    /// The delay before the next attempt after `err`, or `None` when `err`
    /// is final. `reached` says whether the call may have reached the
    /// service.
    fn retry_delay(&mut self, err: &ToolError, reached: bool) -> Option<Duration> {
        let policy = &self.shared.policy;
        if self.attempt >= policy.max_attempts || !policy.is_retryable(err) {
            return None;
        }
        if policy.honour_retry_after
            && err
                .retry_after()
                .is_some_and(|after| after > policy.max_retry_after)
        {
            tracing::info!(
                operation = R::KIND.operation(),
                target = self.request.name(),
                retry_after_ms = err.retry_after().map_or(0, |d| d.as_millis() as u64),
                max_retry_after_ms = policy.max_retry_after.as_millis() as u64,
                "not retrying: the retry-after is longer than the policy waits for"
            );
            return None;
        }
        // Asked only now, on the failure path: a call that succeeds pays
        // nothing for it.
        if reached
            && !policy.retry_non_idempotent
            && !refused_before_running(err)
            && !self.shared.idempotency.is_idempotent(&self.request)
        {
            return None;
        }
        if let Some(budget) = &policy.budget {
            if !budget.withdraw() {
                return None;
            }
        }
        let delay = policy.delay(self.attempt, err);
        self.attempt += 1;
        // At `info`: a wait of seconds must show, never be silence.
        tracing::info!(
            operation = R::KIND.operation(),
            target = self.request.name(),
            attempt = self.attempt,
            delay_ms = delay.as_millis() as u64,
            error = %err,
            "retrying the call"
        );
        Some(delay)
    }
}

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
            StateProj::Calling { future } => match ready!(future.poll(cx)) {
                Ok(stream) => {
                    state.set(State::Done);
                    return Poll::Ready(Ok(stream));
                }
                Err(err) => (err.into(), true),
            },
            StateProj::Backoff { sleep } => {
                ready!(sleep.as_mut().poll(cx));
                state.set(State::Readying);
                continue;
            }
            StateProj::Readying => {
                let service = attempts
                    .service
                    .get_or_insert_with(|| Box::new(attempts.shared.template.clone()));
                match ready!(service.poll_ready(cx)) {
                    Ok(()) => {
                        let future = service.call(attempts.request.clone());
                        state.set(State::Calling { future });
                        continue;
                    }
                    Err(err) => (err.into(), false),
                }
            }
            StateProj::Streaming { .. } | StateProj::Done => {
                return Poll::Ready(Err(ToolError::polled_after_completion(
                    "retry::ResponseFuture",
                )));
            }
        };
        match attempts.retry_delay(&err, reached) {
            Some(delay) => state.set(State::Backoff {
                sleep: Box::pin(sleep(delay)),
            }),
            None => {
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
                        let delay = if *emitted {
                            None
                        } else {
                            this.attempts.retry_delay(&err, true)
                        };
                        match delay {
                            // Dropping the failed stream here ends that attempt.
                            Some(delay) => this.state.set(State::Backoff {
                                sleep: Box::pin(sleep(delay)),
                            }),
                            None => {
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
