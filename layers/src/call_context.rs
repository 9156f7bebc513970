//! What the layers of one call tell each other, with no field in the
//! request and no allocation on the way of a call that does not wait.
//!
//! **Down, while a layer's `call` runs:** the call's [`Start`] — the
//! instant it started and its deadline — lent by the timeout to the layers
//! it calls into. A rate limit below takes its quota at that instant
//! instead of reading the clock again (one clock read per call), an inner
//! timeout counts from it, and a retry sees the deadline it must not wait
//! past. A call made later, after a wait (a retry's later attempt), is
//! lent the same deadline from the instant it is made. Without a timeout
//! above, [`now`] reads tokio's clock, so `tokio::time::pause` still
//! drives them all.
//!
//! **Up, while a layer polls the ones below it:** why a pending call has
//! not reached the tool — it is [`Waiting`] for capacity (a permit or a
//! rate limit's quota), or in a retry's backoff. The layer
//! that holds the call reports it on every poll that leaves it pending; a
//! retry above adds its attempts and the error of an attempt that ran; a
//! timeout above, whose bound expires in that poll, reads it and says what
//! happened — "waited 410ms for capacity over 3 attempts; the tool never
//! started" — instead of blaming the tool.
//!
//! **Never past the deadline:** a layer that makes its call after a wait
//! (a retry after its backoff, a rate limit once its quota allows it,
//! validation or a spend limit once the service below is ready) checks the
//! deadline first ([`too_late`]). Past it, the call is *held*, never made:
//! the layer reports what the call waits for and stays pending, and the
//! timeout whose deadline it is — its timer due now — ends the call with
//! that report. Such a layer lends the deadline again to the call it makes
//! ([`lend_later`]), so the layers below it see it too.
//!
//! **Refused here:** the errors with which this stack's own admission (a
//! concurrency limit's shed, a rate limit's refusal, a bound that expired
//! in the wait) refuses a call carry [`RefusedHere`] as their source, so
//! that a retry above tells them from the service's own refusals (an
//! endpoint's 429): only the latter are news of the service.
//!
//! Both travel in thread-local cells, set around a `call` or a poll: a
//! call's layers run on the thread that polls it, and neither a request's
//! clones (a retry's attempts, a caller's copies) nor `poll_ready` (where a
//! concurrency limit waits, with no request at hand) could carry them as
//! well. A layer that moves the call to another task (tower's `Buffer`)
//! cuts both: below it, the layers read the clock themselves and a timeout
//! above reports its bound as it always has.

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use toolstack::{ErrorKind, ToolError};

use crate::CallKind;

/// When a call started, and when it must be over.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Start {
    pub(crate) at: Instant,
    pub(crate) deadline: Option<Deadline>,
}

/// When a call must be over, and the bound that says so.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    // The timeout's bound, counted from its call's start, in whole
    // milliseconds: only messages read it, and a `Duration` would make
    // every future that keeps a deadline 8 bytes larger.
    limit_ms: u32,
}

impl Deadline {
    /// The deadline `limit` after `start`.
    pub(crate) fn after(start: Instant, limit: Duration) -> Self {
        Deadline {
            at: start + limit,
            limit_ms: u32::try_from(limit.as_millis()).unwrap_or(u32::MAX),
        }
    }

    /// The timeout's bound it comes from: what messages name ("the
    /// deadline of 400ms").
    pub(crate) fn limit(self) -> Duration {
        Duration::from_millis(self.limit_ms.into())
    }
}

/// What a pending call waits for, before it has reached the tool.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// A concurrency permit (or any inner service's readiness).
    Permit,
    /// A rate limit's quota, which allows the call at `ready_at`.
    Quota { ready_at: Instant },
    /// A retry's backoff after an attempt that ran and failed: not
    /// capacity, the retry's own pause.
    Backoff,
}

/// Why a pending call has not reached the tool, as the layer holding it
/// reports it.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) wait: Wait,
    /// Attempts so far, the one waiting included.
    pub(crate) attempts: u32,
    /// The error of an earlier attempt that did reach the tool.
    pub(crate) ran: Option<ToolError>,
}

thread_local! {
    static START: Cell<Option<Start>> = const { Cell::new(None) };
    static WAITING: Cell<Option<Waiting>> = const { Cell::new(None) };
}

/// The current call's start, if a layer above lent it.
#[inline]
pub(crate) fn start() -> Option<Start> {
    START.with(Cell::get)
}

/// The instant the current call started, if a layer above lent it, else
/// tokio's clock now (the rate limit's clock).
#[cfg(feature = "rate-limit")]
#[inline]
pub(crate) fn now() -> Instant {
    start().map_or_else(Instant::now, |start| start.at)
}

/// The current call's deadline, if a layer above lent one.
#[inline]
pub(crate) fn deadline() -> Option<Deadline> {
    start().and_then(|start| start.deadline)
}

/// Whether a call whose deadline is `deadline` may no longer be made: it
/// has passed. The layer that would make the call holds it instead (see
/// the module docs). Reads the clock only when there is a deadline.
#[inline]
pub(crate) fn too_late(deadline: Option<Deadline>) -> bool {
    deadline.is_some_and(|deadline| Instant::now() >= deadline.at)
}

/// Runs `f` — a call made after a wait, in a later poll than the `call`
/// that saw `deadline` — with that deadline lent again, from now: the
/// layers below see it, and count their own time from this call.
#[inline]
pub(crate) fn lend_later<T>(deadline: Option<Deadline>, f: impl FnOnce() -> T) -> T {
    match deadline {
        Some(_) => lend(
            Start {
                at: Instant::now(),
                deadline,
            },
            f,
        ),
        None => f(),
    }
}

/// Runs `f` (a layer's call into the service below it) with `start` lent
/// as the current call's.
#[inline]
pub(crate) fn lend<T>(start: Start, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Start>);
    impl Drop for Restore {
        fn drop(&mut self) {
            START.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(START.with(|cell| cell.replace(Some(start))));
    f()
}

/// Forgets any report: a layer that may read one clears it before it polls
/// the layers below, so what it reads is theirs, from this poll.
#[inline]
pub(crate) fn clear() {
    WAITING.with(|cell| cell.set(None));
}

/// Reports, during a poll that leaves the call pending, that it waits for
/// `wait` and has not reached the tool.
pub(crate) fn report(wait: Wait) {
    WAITING.with(|cell| {
        cell.set(Some(Waiting {
            wait,
            attempts: 1,
            ran: None,
        }))
    });
}

/// Lets a layer above the one that reported (a retry) add what it knows:
/// `f` runs on the report of this poll, if there is one.
pub(crate) fn amend(f: impl FnOnce(&mut Waiting)) {
    WAITING.with(|cell| {
        if let Some(mut waiting) = cell.take() {
            f(&mut waiting);
            cell.set(Some(waiting));
        }
    });
}

/// Whether a layer below reported, in this poll, that the call waits.
pub(crate) fn is_waiting() -> bool {
    WAITING.with(|cell| {
        let waiting = cell.take();
        let yes = waiting.is_some();
        cell.set(waiting);
        yes
    })
}

/// Takes the report of this poll: what a timeout whose bound just expired
/// asks before it blames the callee.
pub(crate) fn take() -> Option<Waiting> {
    WAITING.with(Cell::take)
}

impl Waiting {
    /// The error of a call whose bound (`what`, e.g. "its deadline of
    /// 400ms") expired while it waited, `waited` after it started.
    pub(crate) fn into_error(self, kind: CallKind, waited: Duration, what: &str) -> ToolError {
        if let Some(ran) = self.ran {
            // An attempt ran and failed; its error is the call's, and the
            // wait for another attempt is said after it.
            let waited_for = match self.wait {
                Wait::Backoff => "a retry backed off",
                Wait::Permit | Wait::Quota { .. } => "a retry waited for capacity",
            };
            let message = format!(
                "{}; {what} passed while {waited_for}, so it was not tried again",
                ran.message()
            );
            return ran.with_message(message);
        }
        let attempts = match self.attempts {
            1 => "1 attempt".to_owned(),
            n => format!("{n} attempts"),
        };
        let refusal = match self.wait {
            // A backoff follows an attempt that ran, whose error is above;
            // without one, the call waited to be tried again.
            Wait::Permit | Wait::Backoff => ToolError::new(
                ErrorKind::Overloaded,
                format!(
                    "waited {waited:?} for capacity over {attempts}, until {what} passed; the {kind} never started"
                ),
            ),
            Wait::Quota { ready_at } => {
                let retry_after = ready_at.saturating_duration_since(Instant::now());
                ToolError::new(
                    ErrorKind::RateLimited {
                        retry_after: Some(retry_after),
                    },
                    format!(
                        "waited {waited:?} for the rate limit's quota over {attempts}, until {what} passed; the {kind} never started; retry after {} ms",
                        retry_after.as_nanos().div_ceil(1_000_000)
                    ),
                )
            }
        };
        refused_here(refusal)
    }
}

/// The source of an error with which this stack's own admission refused a
/// call: a concurrency limit that shed it, a rate limit that refused it, a
/// bound that expired while it waited for either. The call never left the
/// stack, so the error says nothing of the service: a retry above keeps
/// the error of an attempt that reached the service as the call's, where
/// a refusal by the service itself (an endpoint's 429) is its latest word.
#[derive(Debug)]
pub(crate) struct RefusedHere;

impl fmt::Display for RefusedHere {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("refused by a concurrency or rate limit of this stack, before the call left it")
    }
}

impl std::error::Error for RefusedHere {}

/// `err`, marked as this stack's own refusal ([`RefusedHere`]).
pub(crate) fn refused_here(err: ToolError) -> ToolError {
    err.with_source(RefusedHere)
}

/// Whether `err` is this stack's own refusal ([`RefusedHere`]).
pub(crate) fn is_refused_here(err: &ToolError) -> bool {
    std::error::Error::source(err).is_some_and(|source| source.is::<RefusedHere>())
}
