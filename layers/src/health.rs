//! Whether a shared store (Redis) is worth asking, for the rate limit's
//! and the cache's Redis stores alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Whether Redis is worth asking: after it could not be reached, calls
/// fall back without asking for a pause; then the first call to come
/// claims the one retry (the others keep falling back until it answers).
#[derive(Debug)]
pub(crate) struct Health {
    start: Instant,
    /// Until when (microseconds since `start`, plus one) Redis is left
    /// alone; 0 while it answers.
    down_until: AtomicU64,
}

impl Health {
    pub(crate) fn new() -> Self {
        Health {
            start: Instant::now(),
            down_until: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        micros_ceil(self.start.elapsed()).saturating_add(1)
    }

    pub(crate) fn should_ask(&self, pause: Duration) -> bool {
        let until = self.down_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = self.now();
        now >= until
            && self
                .down_until
                .compare_exchange(
                    until,
                    now.saturating_add(micros_ceil(pause)),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    pub(crate) fn reachable(&self) {
        // A read first: calls on many threads would otherwise all write
        // the one shared line.
        if self.down_until.load(Ordering::Relaxed) != 0 {
            self.down_until.store(0, Ordering::Release);
        }
    }

    pub(crate) fn unreachable(&self, pause: Duration) {
        let until = self.now().saturating_add(micros_ceil(pause));
        self.down_until.store(until, Ordering::Release);
    }
}

/// `d` in microseconds, rounded up, saturating.
fn micros_ceil(d: Duration) -> u64 {
    let micros = d.as_nanos().div_ceil(1_000);
    u64::try_from(micros).unwrap_or(u64::MAX)
}
