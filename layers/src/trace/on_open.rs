//! [`OnOpen`]: called when a call's response stream opens.

use std::time::Duration;

use tracing::{Level, Span};

use super::{level_enabled, millis};
use crate::Request;

/// Called when the response future resolves with a stream, for a call of
/// request type `R`.
pub trait OnOpen<R> {
    /// Reports that the call's stream opened, `latency` after `call`.
    fn on_open(&mut self, latency: Duration, span: &Span);

    /// Whether this hook does anything; when no hook and no span is enabled
    /// the layer does not read the clock.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<R, F: FnMut(Duration, &Span)> OnOpen<R> for F {
    fn on_open(&mut self, latency: Duration, span: &Span) {
        self(latency, span)
    }
}

impl<R> OnOpen<R> for () {
    fn on_open(&mut self, _: Duration, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

default_callback!(
    /// The default [`OnOpen`]: a `tool call opened` (or `model call
    /// opened`) event with `latency_ms`.
    DefaultOnOpen,
    DEBUG
);

impl<R: Request> OnOpen<R> for DefaultOnOpen {
    fn on_open(&mut self, latency: Duration, _: &Span) {
        event_dynamic_lvl!(
            self.level,
            latency_ms = millis(latency),
            "{} call opened",
            R::KIND
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}
