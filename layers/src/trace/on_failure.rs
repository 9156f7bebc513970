//! [`OnFailure`]: called when a call fails.

use std::time::Duration;

use toolstack::ToolError;
use tracing::{Level, Span};

use super::{level_enabled, millis};
use crate::Request;

/// Called when the response future or the stream of a call of request
/// type `R` yields an error; `latency` is the time from `call` to the
/// error.
pub trait OnFailure<R> {
    /// Reports the call's error.
    fn on_failure(&mut self, error: &ToolError, latency: Duration, span: &Span);

    /// Whether this hook does anything; when no hook and no span is enabled
    /// the layer does not read the clock.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<R, F: FnMut(&ToolError, Duration, &Span)> OnFailure<R> for F {
    fn on_failure(&mut self, error: &ToolError, latency: Duration, span: &Span) {
        self(error, latency, span)
    }
}

impl<R> OnFailure<R> for () {
    fn on_failure(&mut self, _: &ToolError, _: Duration, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

default_callback!(
    /// The default [`OnFailure`]: a `tool call failed` (or `model call
    /// failed`) event with `error.type` (the
    /// [`ErrorKind`](toolstack::ErrorKind)), the message and `latency_ms`.
    ///
    /// `WARN` by default, not `ERROR`: most failures are the model's
    /// mistakes (invalid arguments, an unknown tool), not the system's.
    DefaultOnFailure,
    WARN
);

impl<R: Request> OnFailure<R> for DefaultOnFailure {
    fn on_failure(&mut self, error: &ToolError, latency: Duration, _: &Span) {
        event_dynamic_lvl!(
            self.level,
            error.type = error.kind().as_str(),
            error.message = error.message(),
            latency_ms = millis(latency),
            "{} call failed",
            R::KIND
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}
