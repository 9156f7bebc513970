use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use toolstack::{TimeoutPhase, ToolError};

use super::TimeoutLayer;

/// How many items a stream that never pauses may yield between two looks
/// at the clock for its deadline.
const DEADLINE_CHECK_EVERY: u8 = 64;

/// The bounds of one call: when it started and its limits (48 bytes, in
/// every call's future and stream); the instants they give are computed
/// when asked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// Read only when a deadline or first-item bound is set.
    pub(super) start: Option<Instant>,
    pub(super) limits: TimeoutLayer,
    /// What the error messages call the callee.
    pub(super) kind: crate::CallKind,
    /// Set when the first item arrives: the first-item bound is over.
    pub(super) first_item_seen: bool,
    /// Whether, and for how long, the call was heard waiting for capacity
    /// before it started: 0 never, 1 waiting now, `n` ≥ 2 admitted `n - 2`
    /// ms after its start.
    pub(super) waited: u32,
}

impl Bounds {
    #[inline]
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.start
            .zip(self.limits.deadline.get())
            .map(|(s, d)| s + d)
    }

    #[inline]
    fn first_item(&self) -> Option<Instant> {
        if self.first_item_seen {
            return None;
        }
        self.start
            .zip(self.limits.first_item.get())
            .map(|(s, d)| s + d)
    }

    /// After a listening poll of the layers below: note when the call,
    /// heard waiting for capacity, stops waiting (it was admitted).
    #[inline]
    fn heard(&mut self, pending: bool) {
        if pending && crate::call_context::is_waiting() {
            self.waited = 1;
        } else if self.waited == 1 {
            let ms = self.start.map_or(0, |start| start.elapsed().as_millis());
            self.waited = u32::try_from(ms).unwrap_or(u32::MAX - 2).min(u32::MAX - 2) + 2;
        }
    }

    /// What the message of a bound that expired while the callee ran adds
    /// when the call had waited for capacity first.
    fn started_late(&self) -> String {
        match self.waited {
            // Never waited, still waiting, or admitted within a millisecond.
            0..=2 => String::new(),
            n => format!(
                " (it started {:?} after the call, having waited for capacity)",
                Duration::from_millis(u64::from(n - 2))
            ),
        }
    }

    /// The bound that expires first, preferring the deadline on a tie.
    fn next_expiry(&self, idle_at: Option<Instant>) -> Option<(Instant, TimeoutPhase)> {
        let candidates = [
            self.deadline().map(|at| (at, TimeoutPhase::Deadline)),
            self.first_item().map(|at| (at, TimeoutPhase::FirstItem)),
            idle_at.map(|at| (at, TimeoutPhase::Idle)),
        ];
        candidates
            .into_iter()
            .flatten()
            .reduce(|best, next| if next.0 < best.0 { next } else { best })
    }

    /// Whether a bound that may expire before the callee has started is
    /// set: only then does a poll listen for what the layers below report.
    #[inline]
    fn listens(&self) -> bool {
        self.limits.deadline.is_set() || (self.limits.first_item.is_set() && !self.first_item_seen)
    }

    /// The error of `phase` expiring now: when the layers below reported
    /// in this poll that the call still waits for capacity (the callee
    /// never started, or an attempt that ran is waiting to be tried
    /// again), that is what the error says; else the bound's own.
    #[cold]
    #[inline(never)]
    fn expired(&self, phase: TimeoutPhase) -> ToolError {
        let (limit, what) = match phase {
            TimeoutPhase::Deadline => (self.limits.deadline.get(), "its deadline"),
            TimeoutPhase::FirstItem => (self.limits.first_item.get(), "its first-item bound"),
            _ => (None, ""),
        };
        if let (Some(start), Some(limit)) = (self.start, limit) {
            if let Some(waiting) = crate::call_context::take() {
                let waited = Instant::now().saturating_duration_since(start);
                return waiting.into_error(self.kind, waited, &format!("{what} of {limit:?}"));
            }
        }
        self.error(phase)
    }

    #[cold]
    #[inline(never)]
    fn error(&self, phase: TimeoutPhase) -> ToolError {
        let (limits, subject) = (&self.limits, self.kind);
        let message = match phase {
            TimeoutPhase::Deadline => format!(
                "the {subject} did not finish within its deadline of {:?}{}",
                limits.deadline.get().unwrap_or_default(),
                self.started_late()
            ),
            TimeoutPhase::FirstItem => format!(
                "the {subject} produced no output within {:?}{}",
                limits.first_item.get().unwrap_or_default(),
                self.started_late()
            ),
            TimeoutPhase::Idle => format!(
                "the {subject} produced no further output for {:?}",
                limits.idle.get().unwrap_or_default()
            ),
            _ => format!("the {subject} did not open its response in time"),
        };
        ToolError::timeout(phase, message)
    }
}

/// Polls the layers below (`poll`) hearing what they report: before the
/// callee's first item, where a bound may expire before it started. Kept
/// out of line: a stream's items after the first never come this way.
#[inline(never)]
fn poll_listening<T>(bounds: &mut Bounds, poll: impl FnOnce() -> Poll<T>) -> Poll<T> {
    crate::call_context::clear();
    let polled = poll();
    bounds.heard(polled.is_pending());
    polled
}

/// Arms (or re-arms) the lazily created timer for `at` and polls it.
fn poll_timer(timer: &mut Option<Pin<Box<Sleep>>>, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
    let sleep = match timer {
        Some(sleep) => {
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            sleep
        }
        None => timer.insert(Box::pin(sleep_until(at))),
    };
    sleep.as_mut().poll(cx)
}

pin_project! {
    /// The response future of [`Timeout`](super::Timeout): the stream opens
    /// within the deadline and the first-item bound, or the call fails with
    /// the bound that expired.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        bounds: Bounds,
        timer: Option<Pin<Box<Sleep>>>,
        done: bool,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, bounds: Bounds) -> Self {
        ResponseFuture {
            inner,
            bounds,
            timer: None,
            done: false,
        }
    }
}

impl<F, St, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
{
    type Output = Result<ResponseStream<St>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(Err(ToolError::polled_after_completion(
                "timeout::ResponseFuture",
            )));
        }
        // Polled here, not through `poll_listening`: the opened stream is
        // large, and a call out of line would copy it once more.
        let listens = this.bounds.listens();
        if listens {
            crate::call_context::clear();
        }
        let polled = this.inner.poll(cx);
        if listens {
            this.bounds.heard(polled.is_pending());
        }
        if let Poll::Ready(result) = polled {
            *this.done = true;
            return Poll::Ready(match result {
                Ok(inner) => Ok(ResponseStream {
                    inner: Some(inner),
                    bounds: *this.bounds,
                    timer: this.timer.take(),
                    idle_at: None,
                    seen_item: false,
                    countdown: DEADLINE_CHECK_EVERY,
                }),
                Err(err) => Err(err.into()),
            });
        }
        match this.bounds.next_expiry(None) {
            Some((at, phase)) if poll_timer(this.timer, at, cx).is_ready() => {
                *this.done = true;
                Poll::Ready(Err(this.bounds.expired(phase)))
            }
            _ => Poll::Pending,
        }
    }
}

pin_project! {
    /// The response stream of [`Timeout`](super::Timeout): the inner stream
    /// until it ends, or until a bound expires, which yields one timeout
    /// error, drops the inner stream and ends.
    #[derive(Debug)]
    pub struct ResponseStream<St> {
        #[pin]
        inner: Option<St>,
        bounds: Bounds,
        timer: Option<Pin<Box<Sleep>>>,
        // When the current quiet gap expires; armed when the tool first
        // has nothing ready after an item, cleared by the next item.
        idle_at: Option<Instant>,
        seen_item: bool,
        countdown: u8,
    }
}

impl<St, T> Stream for ResponseStream<St>
where
    St: Stream<Item = Result<T, ToolError>>,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        // A stream that never pauses arms no timer: every few dozen items,
        // a look at the clock. (Before the first item every poll that
        // returns arms the timer, which then sees why the call waits.)
        if *this.seen_item {
            if *this.countdown == 0 {
                *this.countdown = DEADLINE_CHECK_EVERY;
                if this
                    .bounds
                    .deadline()
                    .is_some_and(|deadline| Instant::now() >= deadline)
                {
                    this.inner.set(None);
                    *this.timer = None;
                    return Poll::Ready(Some(Err(this.bounds.error(TimeoutPhase::Deadline))));
                }
            } else {
                *this.countdown -= 1;
            }
        }
        // Until the first item the callee may not have started: hear what
        // the layers below say of it.
        let polled = if !*this.seen_item && this.bounds.listens() {
            poll_listening(this.bounds, || inner.poll_next(cx))
        } else {
            inner.poll_next(cx)
        };
        match polled {
            Poll::Ready(Some(Err(err))) => {
                // An error is the last item: drop the stream behind it.
                this.inner.set(None);
                *this.timer = None;
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(Some(item)) => {
                this.bounds.first_item_seen = true;
                *this.idle_at = None;
                *this.seen_item = true;
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => {
                this.inner.set(None);
                *this.timer = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let (Some(idle), true, None) = (
                    this.bounds.limits.idle.get(),
                    *this.seen_item,
                    *this.idle_at,
                ) {
                    *this.idle_at = Some(Instant::now() + idle);
                }
                match this.bounds.next_expiry(*this.idle_at) {
                    Some((at, phase)) if poll_timer(this.timer, at, cx).is_ready() => {
                        let error = if *this.seen_item {
                            this.bounds.error(phase)
                        } else {
                            this.bounds.expired(phase)
                        };
                        this.inner.set(None);
                        *this.timer = None;
                        Poll::Ready(Some(Err(error)))
                    }
                    _ => Poll::Pending,
                }
            }
        }
    }
}
