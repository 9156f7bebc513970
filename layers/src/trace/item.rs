//! What the trace records of a model's answer on its span, from the
//! deltas that speak for the whole answer (see
//! [`Output::record_on`](crate::Output::record_on)).

use std::borrow::Cow;

use toolstack::model::{FinishReason, ModelDelta};
use tracing::Span;

/// What a model's delta says of the whole answer, on the call's span
/// ([`Output::record_on`](crate::Output::record_on)).
pub(crate) fn record_delta(delta: &ModelDelta, span: &Span) {
    match delta {
        ModelDelta::Model(model) => {
            span.record("gen_ai.response.model", model.as_str());
        }
        ModelDelta::Usage(usage) => usage.record_on(span),
        _ => {}
    }
}

/// The finish reason a delta carries
/// ([`Output::finish_reason`](crate::Output::finish_reason)).
pub(crate) fn delta_finish_reason(delta: &ModelDelta) -> Option<Cow<'_, str>> {
    match delta {
        ModelDelta::Finish(reason) => Some(finish_reason(reason)),
        _ => None,
    }
}

/// The reason as OpenAI-style endpoints send it (and as it serializes).
fn finish_reason(reason: &FinishReason) -> Cow<'_, str> {
    match reason {
        FinishReason::Stop => Cow::Borrowed("stop"),
        FinishReason::ToolCalls => Cow::Borrowed("tool_calls"),
        FinishReason::Length => Cow::Borrowed("length"),
        FinishReason::ContentFilter => Cow::Borrowed("content_filter"),
        FinishReason::Other(other) => Cow::Borrowed(other),
        // A reason added after this was written: its wire name.
        other => match serde_json::to_value(other) {
            Ok(serde_json::Value::String(name)) => Cow::Owned(name),
            _ => Cow::Borrowed("_OTHER"),
        },
    }
}

/// The field a chat span declares for the finish reasons.
const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";

/// Records the answer's finish reason. The conventions want a string
/// array, which a `tracing` field cannot carry: when an OpenTelemetry layer
/// records the span (feature `opentelemetry`), the array goes straight to
/// the OpenTelemetry span; otherwise the one reason is a string field.
/// Never both, so an exported span does not carry the key twice.
pub(super) fn record_finish_reason(span: &Span, reason: &str) {
    // A span made without the field (a `MakeSpan` of one's own) asked not
    // to have it.
    if span.field(FINISH_REASONS).is_none() {
        return;
    }
    #[cfg(feature = "opentelemetry")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        if span.context().span().is_recording() {
            let reasons = opentelemetry::Array::String(vec![reason.to_owned().into()]);
            span.set_attribute(FINISH_REASONS, opentelemetry::Value::Array(reasons));
            return;
        }
    }
    span.record(FINISH_REASONS, reason);
}
