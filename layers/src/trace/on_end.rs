//! [`OnEnd`]: called once per call, when it ends.

use tracing::{Level, Span};

use super::{level_enabled, report_summary, StreamSummary};
use crate::Request;

/// Called once per call of request type `R`, when it ends: the stream
/// ended, or the call failed (after [`OnFailure`](super::OnFailure)).
///
/// `summary` counts the items and says how the call ended.
pub trait OnEnd<R> {
    /// Reports the end of the call.
    fn on_end(&mut self, summary: &StreamSummary, span: &Span);

    /// Whether this hook does anything; when no hook and no span is enabled
    /// the layer does not read the clock.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<R, F: FnMut(&StreamSummary, &Span)> OnEnd<R> for F {
    fn on_end(&mut self, summary: &StreamSummary, span: &Span) {
        self(summary, span)
    }
}

impl<R> OnEnd<R> for () {
    fn on_end(&mut self, _: &StreamSummary, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

default_callback!(
    /// The default [`OnEnd`]: a `tool call ended` (or `model call ended`)
    /// event with `items`, `bytes`, `duration_ms` and `outcome`.
    DefaultOnEnd,
    INFO
);

impl<R: Request> OnEnd<R> for DefaultOnEnd {
    fn on_end(&mut self, summary: &StreamSummary, _: &Span) {
        report_summary(self.level, R::KIND, "call ended", summary);
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}
