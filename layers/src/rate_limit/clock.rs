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
        tokio::time::Instant::now().into_std()
    }
}
