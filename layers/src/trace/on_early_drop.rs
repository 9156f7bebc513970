//! [`OnEarlyDrop`]: called when the consumer walks away before a call's end.

use tracing::{Level, Span};

use super::{level_enabled, report_summary, StreamSummary};
use crate::Request;

/// Called when the consumer drops the future or the stream of a call of
/// request type `R` before its end (instead of [`OnEnd`](super::OnEnd));
/// the outcome is [`Outcome::Cancelled`](super::Outcome::Cancelled) and
/// `summary` counts the items yielded before the drop.
pub trait OnEarlyDrop<R> {
    /// Reports that the consumer dropped the call before its end.
    fn on_early_drop(&mut self, summary: &StreamSummary, span: &Span);

    /// Whether this hook does anything; when no hook and no span is enabled
    /// the layer does not read the clock.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<R, F: FnMut(&StreamSummary, &Span)> OnEarlyDrop<R> for F {
    fn on_early_drop(&mut self, summary: &StreamSummary, span: &Span) {
        self(summary, span)
    }
}

impl<R> OnEarlyDrop<R> for () {
    fn on_early_drop(&mut self, _: &StreamSummary, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

default_callback!(
    /// The default [`OnEarlyDrop`]: a `tool call dropped before its end`
    /// (or `model call …`) event with `items`, `bytes`, `duration_ms` and
    /// `outcome = cancelled`.
    DefaultOnEarlyDrop,
    INFO
);

impl<R: Request> OnEarlyDrop<R> for DefaultOnEarlyDrop {
    fn on_early_drop(&mut self, summary: &StreamSummary, _: &Span) {
        report_summary(self.level, R::KIND, "call dropped before its end", summary);
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}
