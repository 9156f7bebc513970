//! The time source of the rate limiter: tokio's clock, seen through
//! governor's [`Clock`] trait.

use std::time::Instant;

use governor::clock::Clock;

/// Reads tokio's clock rather than the OS clock (governor's own clocks), so
/// that a paused runtime (`tokio::time::pause`) moves the limiter's time
/// together with the timers that wait on it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TokioClock;

impl Clock for TokioClock {
    // governor implements its `Reference` for std's `Instant`.
    type Instant = Instant;

    fn now(&self) -> Instant {
        // The call's start when a timeout above lent it: one clock read
        // per call for both.
        crate::call_context::now().into_std()
    }
}
