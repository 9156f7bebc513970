use std::time::Duration;

use tower_layer::Layer;

use super::Timeout;

/// Applies a [`Timeout`] to a tool or a model: a deadline, a first-item
/// bound and an idle bound, each optional. See the [module docs](super).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeoutLayer {
    pub(super) deadline: Option<Duration>,
    pub(super) first_item: Option<Duration>,
    pub(super) idle: Option<Duration>,
}

impl TimeoutLayer {
    /// No bound yet; add them with the builder methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bounds the whole call, from `call` to the end of the stream.
    pub fn deadline(mut self, limit: Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    /// Bounds the time from `call` to the first item.
    pub fn first_item(mut self, limit: Duration) -> Self {
        self.first_item = Some(limit);
        self
    }

    /// Bounds the gap between consecutive items.
    pub fn idle(mut self, limit: Duration) -> Self {
        self.idle = Some(limit);
        self
    }

    /// The deadline, if set.
    pub fn deadline_limit(&self) -> Option<Duration> {
        self.deadline
    }

    /// The first-item bound, if set.
    pub fn first_item_limit(&self) -> Option<Duration> {
        self.first_item
    }

    /// The idle bound, if set.
    pub fn idle_limit(&self) -> Option<Duration> {
        self.idle
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout::new(inner, *self)
    }
}
