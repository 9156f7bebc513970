//! The wait between tries of a store call that met an unavailable store:
//! the ride-out's (`durability.rs`) and the release of runs given up on
//! (`release.rs`) share it.

use std::time::Duration;

/// The first wait before a store call is tried again; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Exponential backoff with jitter: 50 ms doubling to 1 s, each wait
/// drawn between half and all of it (so runs that lost the store together
/// do not all come back at once).
pub(super) struct Backoff {
    next: Duration,
    seed: u64,
}

impl Backoff {
    pub(super) fn new(run_id: &str) -> Self {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(run_id);
        Backoff {
            next: FIRST_BACKOFF,
            seed,
        }
    }

    pub(super) fn next(&mut self) -> Duration {
        // xorshift: cheap, and good enough to spread retries.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let full = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        let half = full / 2;
        half + half.mul_f64((self.seed % 1024) as f64 / 1024.0)
    }
}
