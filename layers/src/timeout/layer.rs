use std::fmt;
use std::time::Duration;

use tower_layer::Layer;

use super::Timeout;

/// Applies a [`Timeout`] to a tool or a model: a deadline, a first-item
/// bound and an idle bound, each optional. See the [module docs](super).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutLayer {
    // Each bound in 8 bytes (every call's future and stream carry a copy).
    pub(super) deadline: Bound,
    pub(super) first_item: Bound,
    pub(super) idle: Bound,
}

/// A bound in whole nanoseconds, 8 bytes instead of an `Option<Duration>`'s
/// 16; `u64::MAX` for none. A bound longer than 584 years is that long.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Bound(u64);

impl Default for Bound {
    fn default() -> Self {
        Bound(u64::MAX)
    }
}

impl Bound {
    fn new(limit: Duration) -> Self {
        Bound(u64::try_from(limit.as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1)))
    }

    #[inline]
    pub(super) fn get(self) -> Option<Duration> {
        (self.0 != u64::MAX).then_some(Duration::from_nanos(self.0))
    }

    #[inline]
    pub(super) fn is_set(self) -> bool {
        self.0 != u64::MAX
    }
}

impl fmt::Debug for TimeoutLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimeoutLayer")
            .field("deadline", &self.deadline.get())
            .field("first_item", &self.first_item.get())
            .field("idle", &self.idle.get())
            .finish()
    }
}

impl TimeoutLayer {
    /// No bound yet; add them with the builder methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bounds the whole call, from `call` to the end of the stream.
    pub fn deadline(mut self, limit: Duration) -> Self {
        self.deadline = Bound::new(limit);
        self
    }

    /// Bounds the time from `call` to the first item.
    pub fn first_item(mut self, limit: Duration) -> Self {
        self.first_item = Bound::new(limit);
        self
    }

    /// Bounds the gap between consecutive items.
    pub fn idle(mut self, limit: Duration) -> Self {
        self.idle = Bound::new(limit);
        self
    }

    /// The deadline, if set.
    pub fn deadline_limit(&self) -> Option<Duration> {
        self.deadline.get()
    }

    /// The first-item bound, if set.
    pub fn first_item_limit(&self) -> Option<Duration> {
        self.first_item.get()
    }

    /// The idle bound, if set.
    pub fn idle_limit(&self) -> Option<Duration> {
        self.idle.get()
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout::new(inner, *self)
    }
}
