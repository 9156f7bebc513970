//! What a call keeps between its attempts ([`Attempts`]): the request,
//! the count, the deadline, what the failures left; and the decisions made
//! on them — whether to try again, after which delay, and the error a call
//! ends with when it is not tried again.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use toolstack::{ErrorKind, ToolError};

use super::idempotency::Idempotency;
use super::policy::{refused_before_running, RetryPolicy};
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
    pub(super) service: Option<S>,
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
    pub(super) fn next(&mut self, err: ToolError, reached: bool) -> Result<Duration, ToolError> {
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
    pub(super) fn too_late(&self) -> bool {
        crate::call_context::too_late(self.deadline)
    }

    /// The service the next attempt goes to.
    pub(super) fn service(&mut self) -> &mut S
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
    pub(super) fn report(&self, backing_off: bool) {
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
    pub(super) fn amend(&self) {
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
