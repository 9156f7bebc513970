//! One clock read per call, shared by the layers that need the time as a
//! call starts.
//!
//! The timeout reads the clock when it is called (its deadline counts from
//! then) and lends that instant to the layers it calls into, for as long as
//! its `call` runs: a rate limit below it takes its quota at the same
//! instant instead of reading the clock again. Outside such a `call` (a
//! waiting call polled later, a stack without a timeout), [`now`] reads
//! tokio's clock, so `tokio::time::pause` still drives both.

use std::cell::Cell;

use tokio::time::Instant;

thread_local! {
    static CALL_START: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The instant the current call started, if a layer above lent it, else
/// tokio's clock now.
#[inline]
#[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
pub(crate) fn now() -> Instant {
    CALL_START.with(Cell::get).unwrap_or_else(Instant::now)
}

/// Runs `f` (a layer's call into the service below it) with `start` lent
/// as the current call's instant.
#[inline]
pub(crate) fn lend<T>(start: Instant, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALL_START.with(|cell| cell.set(self.0));
        }
    }
    let _restore = Restore(CALL_START.with(|cell| cell.replace(Some(start))));
    f()
}
