//! Installing a subscriber that captures what one test logs — the only way
//! the tests here install one.
//!
//! # The pitfall
//!
//! `tracing` caches, per callsite and for the whole process, whether any
//! subscriber is interested in it (its *interest*). The cache is built
//! from the dispatchers the process has registered — but while only **one**
//! dispatcher is alive (say the `set_default` of the one test that
//! captures), `tracing-core` takes a shortcut and asks *the registering
//! thread's own* default instead. A callsite first hit then on another
//! test's thread, where no subscriber is set, is cached as "never", and
//! from then on the capturing test never sees that callsite's events, even
//! on its own thread: the test fails at random, with an empty log (about
//! one run in ten in `retry.rs`, where a sibling test hits the same
//! `info!` at the same moment).
//!
//! # The fix
//!
//! [`set_default`] first makes sure a second dispatcher is alive for the
//! whole test binary: a [`Dispatch`] kept in a static, never installed
//! anywhere, which answers every callsite "sometimes" and enables nothing.
//! With two dispatchers alive the shortcut is never taken, and since this
//! one is never certain, no callsite is ever cached as "never" (or
//! "always"): each event asks the subscriber of the thread that emits it.
//! It takes no global default, so a test may still install the process's
//! global subscriber (as `otel::init_from_env` does).
//!
//! So: capture with `logs::set_default(subscriber)`, never with
//! `tracing::subscriber::set_default` directly; keep the emitting work on
//! the test's thread (a current-thread runtime), since a thread-local
//! subscriber sees only its own thread.

use std::sync::OnceLock;

use tracing::metadata::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Dispatch, Event, Metadata, Subscriber};

/// Installs `subscriber` as this thread's default while the guard lives,
/// with the interest cache kept honest (see the module docs).
pub fn set_default(subscriber: impl Into<Dispatch>) -> DefaultGuard {
    undecided();
    tracing::dispatcher::set_default(&subscriber.into())
}

/// The dispatcher kept alive for the whole binary (registered when built).
pub fn undecided() -> &'static Dispatch {
    static UNDECIDED: OnceLock<Dispatch> = OnceLock::new();
    UNDECIDED.get_or_init(|| Dispatch::new(Undecided))
}

/// Interested in every callsite "sometimes", enabled for nothing.
struct Undecided;

impl Subscriber for Undecided {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // Never lowers the process's maximum level below what a test's
        // subscriber wants.
        Some(LevelFilter::TRACE)
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    // Never called: it enables nothing, and it is nobody's default.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
