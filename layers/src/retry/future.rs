use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{sleep, Sleep};
use toolstack::{ToolError, ToolItem, ToolRequest};
use tower_service::Service;

use super::policy::refused_before_running;
use super::RetryPolicy;

/// What a call needs to be tried again.
pub(super) struct Attempts<S> {
    pub(super) service: S,
    pub(super) request: ToolRequest,
    pub(super) policy: RetryPolicy,
    pub(super) idempotent: bool,
    /// Attempts made so far.
    pub(super) attempt: u32,
}

impl<S> Attempts<S> {
    /// The delay before the next attempt after `err`, or `None` when `err`
    /// is final. `reached` says whether the call may have reached the tool.
    fn retry_delay(&mut self, err: &ToolError, reached: bool) -> Option<Duration> {
        let policy = &self.policy;
        if self.attempt >= policy.max_attempts || !policy.is_retryable(err) {
            return None;
        }
        if reached
            && !self.idempotent
            && !policy.retry_non_idempotent
            && !refused_before_running(err)
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
        tracing::debug!(
            tool = self.request.name(),
            attempt = self.attempt,
            delay_ms = delay.as_millis() as u64,
            error = %err,
            "retrying tool call"
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
fn poll_open<S>(
    mut state: Pin<&mut State<S::Future, S::Response>>,
    attempts: &mut Attempts<S>,
    cx: &mut Context<'_>,
) -> Poll<Result<S::Response, ToolError>>
where
    S: Service<ToolRequest>,
    S::Error: Into<ToolError>,
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
            StateProj::Readying => match ready!(attempts.service.poll_ready(cx)) {
                Ok(()) => {
                    let future = attempts.service.call(attempts.request.clone());
                    state.set(State::Calling { future });
                    continue;
                }
                Err(err) => (err.into(), false),
            },
            StateProj::Streaming { .. } | StateProj::Done => {
                return Poll::Ready(Err(ToolError::failed("retry: polled after completion")));
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
    pub struct ResponseFuture<S>
    where
        S: Service<ToolRequest>,
    {
        #[pin]
        state: State<S::Future, S::Response>,
        attempts: Option<Attempts<S>>,
    }
}

impl<S: Service<ToolRequest>> ResponseFuture<S> {
    pub(super) fn new(first: S::Future, attempts: Attempts<S>) -> Self {
        ResponseFuture {
            state: State::Calling { future: first },
            attempts: Some(attempts),
        }
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<ToolRequest>,
    S::Error: Into<ToolError>,
{
    type Output = Result<ResponseStream<S>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(attempts) = this.attempts.as_mut() else {
            return Poll::Ready(Err(ToolError::failed("retry: polled after completion")));
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
            (Ok(_), None) => Err(ToolError::failed("retry: polled after completion")),
        })
    }
}

pin_project! {
    /// The response stream of [`Retry`](super::Retry): an error before the
    /// first item starts a new attempt; once an item has been emitted,
    /// errors pass through, so no item is ever duplicated.
    pub struct ResponseStream<S>
    where
        S: Service<ToolRequest>,
    {
        #[pin]
        state: State<S::Future, S::Response>,
        attempts: Attempts<S>,
    }
}

impl<S> Stream for ResponseStream<S>
where
    S: Service<ToolRequest>,
    S::Error: Into<ToolError>,
    S::Response: Stream<Item = ToolItem>,
{
    type Item = ToolItem;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
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
                            None => return Poll::Ready(Some(Err(err))),
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
                    Err(err) => return Poll::Ready(Some(Err(err))),
                },
            }
        }
    }
}

impl<S: Service<ToolRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("retry::ResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<S: Service<ToolRequest>> fmt::Debug for ResponseStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("retry::ResponseStream")
            .field("attempt", &self.attempts.attempt)
            .finish_non_exhaustive()
    }
}
