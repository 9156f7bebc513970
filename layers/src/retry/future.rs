use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{sleep, Instant, Sleep};
use toolstack::{ErrorKind, ToolError, ToolRequest};
use tower_service::Service;

use super::policy::refused_before_running;
use super::{Idempotency, Inferred, RetryPolicy};
use crate::call_context::{Deadline, Wait};
use crate::Request;

/// What a call needs to be tried again: the request, the layer's shared
/// policy, and — made only when a retry happens — a service to retry on.
pub(super) struct Attempts<S, R, I> {
    pub(super) request: R,
    pub(super) shared: Arc<Shared<S, I>>,
    /// Attempts made so far.
    pub(super) attempt: u32,
    /// The call's deadline, as a timeout above lent it to `call`: a retry
    /// never waits past it, and no attempt starts after it.
    pub(super) deadline: Option<Deadline>,
    /// Made on the first failure: a call that succeeds at once carries a
    /// pointer, not the failure path's state.
    pub(super) failed: Option<Box<Failed<S>>>,
}

/// What a call keeps once an attempt has failed.
pub(super) struct Failed<S> {
    // Cloned from the shared template on the first retry: a clone of the
    // service the first attempt went to, as tower's retry makes.
    service: Option<S>,
    /// The error of the latest attempt that reached the service: what the
    /// call ends with if a later attempt is refused by this stack's
    /// admission.
    ran: Option<ToolError>,
    /// How many attempts never reached the service (refused for capacity,
    /// by this stack or by the service itself).
    refused: u32,
    /// What the latest failure leaves the call waiting for: a backoff
    /// after an attempt that ran; capacity after a refusal — a rate
    /// limit's quota when it said when.
    wait: Wait,
}

/// Why a call that failed is not tried again: said after its error when
/// the policy would have tried it again ([`Stop::why`]).
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// The policy does not retry this error (not retryable, or a tool
    /// not idempotent that the call reached): the error is the call's.
    Final,
    /// Every attempt the policy allows was made.
    Spent,
    /// The error asks for a wait longer than the policy waits for.
    RetryAfter(Duration),
    /// The backoff would end at or past the call's deadline.
    Deadline { backoff: Duration, limit: Duration },
    /// The retry budget had no retry left.
    Budget,
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
    /// After `err`, the delay before the next attempt, or the error the
    /// call ends with. `reached` says whether the call may have reached
    /// the service.
    #[cold]
    #[inline(never)]
    fn next(&mut self, err: ToolError, reached: bool) -> Result<Duration, ToolError> {
        let refused = refused_before_running(&err);
        let delay = match self.retry_delay(&err, reached && !refused) {
            Ok(delay) => delay,
            Err(stop) => return Err(self.last_error(err, reached, stop)),
        };
        let failed = self.failed();
        if refused || !reached {
            failed.refused += 1;
            failed.wait = match err.kind() {
                ErrorKind::RateLimited { retry_after } => Wait::Quota {
                    ready_at: Instant::now() + retry_after.unwrap_or_default(),
                },
                _ => Wait::Permit,
            };
        } else {
            failed.ran = Some(err);
            failed.wait = Wait::Backoff;
        }
        Ok(delay)
    }

    /// The error a call ends with when `err` is final, and the policy
    /// stopped for `stop`.
    ///
    /// A refusal by this stack's own admission after an attempt that ran
    /// is not the call's story: that attempt's error is, with the refusal
    /// said after it. The service's own refusal (an endpoint's 429) is its
    /// latest word: its kind — and its retry-after — is the call's, with
    /// the attempt that ran said first. Refusals alone, over several
    /// attempts, say so. When the policy would have tried again, why it did
    /// not is said last.
    #[cold]
    #[inline(never)]
    fn last_error(&mut self, err: ToolError, reached: bool, stop: Stop) -> ToolError {
        let refused = refused_before_running(&err);
        let ran = self.failed.as_mut().and_then(|failed| failed.ran.take());
        let err = match ran {
            _ if !refused => err,
            Some(ran) => {
                let message = format!(
                    "{}; it was tried again, and that attempt was refused: {}",
                    ran.message(),
                    err.message()
                );
                if crate::call_context::is_refused_here(&err) {
                    ran.with_message(message)
                } else {
                    err.with_message(message)
                }
            }
            None if self.attempt == 1 => err,
            None => {
                let message = format!(
                    "refused for capacity {} times; the {} never started (the last refusal: {})",
                    self.attempt,
                    R::KIND,
                    err.message()
                );
                err.with_message(message)
            }
        };
        // The attempts that were refused, when the last one ran: what a
        // call that ran fewer times than it was allowed to says of it.
        let refused_before = match (stop, refused || !reached) {
            (Stop::Spent, false) => self.failed.as_ref().map_or(0, |failed| failed.refused),
            _ => 0,
        };
        match stop.why(self.attempt, refused_before, &self.shared.policy) {
            Some(why) => {
                let message = format!("{}; {why}", err.message());
                err.with_message(message)
            }
            None => err,
        }
    }

    /// What the call keeps once an attempt has failed, made on the first
    /// failure.
    fn failed(&mut self) -> &mut Failed<S> {
        self.failed.get_or_insert_with(|| {
            Box::new(Failed {
                service: None,
                ran: None,
                refused: 0,
                wait: Wait::Permit,
            })
        })
    }

    /// Whether the call's deadline has passed: no attempt starts then.
    #[inline]
    fn too_late(&self) -> bool {
        crate::call_context::too_late(self.deadline)
    }

    /// The service the next attempt goes to.
    fn service(&mut self) -> &mut S
    where
        S: Clone,
    {
        // A retry's path: a reference count, to lend the template while
        // the failure state is borrowed.
        let shared = Arc::clone(&self.shared);
        self.failed()
            .service
            .get_or_insert_with(|| shared.template.clone())
    }

    /// What this call is waiting for, for a timeout above to read if its
    /// bound expires now: its backoff (`backing_off`) or the readiness of
    /// the service for its next attempt.
    #[cold]
    #[inline(never)]
    fn report(&self, backing_off: bool) {
        let wait = match self.failed.as_ref().map(|failed| failed.wait) {
            Some(Wait::Backoff) if !backing_off => Wait::Permit,
            Some(wait) => wait,
            None => Wait::Permit,
        };
        crate::call_context::report(wait);
        self.amend();
    }

    /// Adds this call's attempts, and the error of one that ran, to what a
    /// layer below reported.
    #[inline(never)]
    fn amend(&self) {
        crate::call_context::amend(|waiting| {
            waiting.attempts = self.attempt;
            if waiting.ran.is_none() {
                waiting.ran = self.failed.as_ref().and_then(|failed| failed.ran.clone());
            }
        });
    }

    /// The delay before the next attempt after `err`, or why `err` is
    /// final. `reached` says whether the call may have reached the
    /// service.
    fn retry_delay(&mut self, err: &ToolError, reached: bool) -> Result<Duration, Stop> {
        let policy = &self.shared.policy;
        if !policy.is_retryable(err) {
            return Err(Stop::Final);
        }
        if self.attempt >= policy.max_attempts {
            return Err(Stop::Spent);
        }
        if let Some(after) = err
            .retry_after()
            .filter(|after| policy.honour_retry_after && *after > policy.max_retry_after)
        {
            tracing::info!(
                operation = R::KIND.operation(),
                target = self.request.name(),
                retry_after_ms = after.as_millis() as u64,
                max_retry_after_ms = policy.max_retry_after.as_millis() as u64,
                "not retrying: the retry-after is longer than the policy waits for"
            );
            return Err(Stop::RetryAfter(after));
        }
        // Asked only now, on the failure path: a call that succeeds pays
        // nothing for it.
        if reached
            && !policy.retry_non_idempotent
            && !self.shared.idempotency.is_idempotent(&self.request)
        {
            // At the level of the other "not retrying"s: a retry layer
            // that does nothing must say why, and what changes it.
            tracing::info!(
                operation = R::KIND.operation(),
                target = self.request.name(),
                error = %err,
                "not retrying: the call may have run, and the tool is not marked idempotent or \
                 read-only (mark it with ToolAnnotations::idempotent(true) or read_only(), or set \
                 RetryPolicy::retry_non_idempotent(true))"
            );
            return Err(Stop::Final);
        }
        let delay = policy.delay(self.attempt, err);
        // A retry that would start after the deadline would only wait for
        // it: the call ends now, with what it has.
        if let Some(deadline) = self.deadline {
            if Instant::now() + delay >= deadline.at {
                tracing::info!(
                    operation = R::KIND.operation(),
                    target = self.request.name(),
                    delay_ms = delay.as_millis() as u64,
                    error = %err,
                    "not retrying: the call's deadline would pass first"
                );
                return Err(Stop::Deadline {
                    backoff: delay,
                    limit: deadline.limit(),
                });
            }
        }
        if let Some(budget) = &policy.budget {
            if !budget.withdraw() {
                return Err(Stop::Budget);
            }
        }
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
        Ok(delay)
    }
}

impl Stop {
    /// What the message of a call that stopped here adds, when the policy
    /// would have tried it again: after `attempts`, of which
    /// `refused_before` — before the last, which ran — were refused for
    /// capacity.
    fn why(self, attempts: u32, refused_before: u32, policy: &RetryPolicy) -> Option<String> {
        Some(match self {
            Stop::Final => return None,
            Stop::Spent if refused_before == 0 => return None,
            Stop::Spent => {
                let refusals = match refused_before {
                    1 => "1 was refused".to_owned(),
                    n => format!("{n} were refused"),
                };
                format!(
                    "{attempts} attempts: {} ran, {refusals} for capacity",
                    attempts - refused_before
                )
            }
            Stop::RetryAfter(after) => format!(
                "not tried again: its retry-after of {:?} is longer than the {:?} the retry policy waits",
                whole_millis(after),
                policy.max_retry_after
            ),
            Stop::Deadline { backoff, limit } => format!(
                "not tried again: its backoff of {:?} would pass the deadline of {limit:?}",
                whole_millis(backoff)
            ),
            Stop::Budget => "not tried again: the retry budget is spent".to_owned(),
        })
    }
}

/// `d` rounded up to whole milliseconds, for a message (a jittered
/// backoff has nanoseconds no reader needs).
fn whole_millis(d: Duration) -> Duration {
    let millis = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
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
