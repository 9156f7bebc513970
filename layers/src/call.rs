//! [`Call`] and [`CallOutput`]: what the layers need to know of a request
//! and of the items of its response, so that one layer serves tool calls
//! ([`ToolRequest`] answered by [`ToolOutput`]s) and model calls
//! ([`ChatRequest`] answered by [`ModelDelta`]s) alike.
//!
//! The stream-aware layers are generic over both: a service of
//! `Service<R>` whose response is a stream of `Result<T, ToolError>` can be
//! wrapped when `R: Call` and, for the trace, `T: CallOutput`. What a layer
//! asks of them is what it cannot do without — a name for the span and the
//! messages, a key for a rate limit, something to record when asked to —
//! and every method is a field read on the tool path.

use std::io;

use http::Extensions;
use toolstack::model::{ChatRequest, ModelDelta};
use toolstack::{ToolOutput, ToolRequest};

/// A request the layers understand: a tool call or a model call.
pub trait Call {
    /// The OpenTelemetry GenAI operation: `execute_tool` for a tool call,
    /// `chat` for a model call.
    const OPERATION: &'static str;

    /// What answers the call, as log and error messages name it: `tool` or
    /// `model` ("the model produced no output within 30s").
    const SUBJECT: &'static str;

    /// The span field that [`TraceLayer::record_arguments`] fills:
    /// `gen_ai.tool.call.arguments` or `gen_ai.input.messages`.
    ///
    /// [`TraceLayer::record_arguments`]: crate::trace::TraceLayer::record_arguments
    const INPUT_FIELD: &'static str;

    /// The span field that [`TraceLayer::record_output`] fills:
    /// `gen_ai.tool.call.result` or `gen_ai.output.messages`.
    ///
    /// [`TraceLayer::record_output`]: crate::trace::TraceLayer::record_output
    const OUTPUT_FIELD: &'static str;

    /// What is called: the tool's name, or the model's when the request
    /// names one (else empty). A `per_tool` rate limit keys its buckets
    /// on it.
    fn target(&self) -> &str;

    /// The call's id (a model's tool-call id); empty when it has none, as
    /// model calls do not.
    fn call_id(&self) -> &str;

    /// Per-call data: the caller's identity for a per-caller rate limit,
    /// options, …
    fn extensions(&self) -> &Extensions;

    /// Writes the call's input for the trace — a tool's arguments as sent,
    /// a model's conversation as JSON. `out` refuses bytes past the length
    /// to record, so an error here only means "enough".
    fn write_input(&self, out: &mut impl io::Write) -> io::Result<()>;
}

/// An item of a response stream, as the trace sees it.
pub trait CallOutput {
    /// About how many bytes the item carries (the trace's byte count; only
    /// asked when something listens).
    fn size_hint(&self) -> usize;

    /// Writes the item's text for [`TraceLayer::record_output`]; items
    /// with nothing worth recording write nothing. `out` refuses bytes past
    /// the length to record.
    ///
    /// [`TraceLayer::record_output`]: crate::trace::TraceLayer::record_output
    fn write_output(&self, out: &mut impl io::Write) -> io::Result<()>;
}

impl Call for ToolRequest {
    const OPERATION: &'static str = "execute_tool";
    const SUBJECT: &'static str = "tool";
    const INPUT_FIELD: &'static str = "gen_ai.tool.call.arguments";
    const OUTPUT_FIELD: &'static str = "gen_ai.tool.call.result";

    #[inline]
    fn target(&self) -> &str {
        self.name()
    }

    #[inline]
    fn call_id(&self) -> &str {
        self.id()
    }

    #[inline]
    fn extensions(&self) -> &Extensions {
        ToolRequest::extensions(self)
    }

    fn write_input(&self, out: &mut impl io::Write) -> io::Result<()> {
        out.write_all(self.arguments().as_bytes())
    }
}

/// Text items as they are, JSON items serialized; media, resources and
/// progress are not recorded.
impl CallOutput for ToolOutput {
    #[inline]
    fn size_hint(&self) -> usize {
        ToolOutput::size_hint(self)
    }

    fn write_output(&self, out: &mut impl io::Write) -> io::Result<()> {
        match self {
            ToolOutput::Text { text } => out.write_all(text.as_bytes()),
            ToolOutput::Json { value } => {
                serde_json::to_writer(out, value).map_err(io::Error::from)
            }
            _ => Ok(()),
        }
    }
}

impl Call for ChatRequest {
    const OPERATION: &'static str = "chat";
    const SUBJECT: &'static str = "model";
    const INPUT_FIELD: &'static str = "gen_ai.input.messages";
    const OUTPUT_FIELD: &'static str = "gen_ai.output.messages";

    #[inline]
    fn target(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }

    #[inline]
    fn call_id(&self) -> &str {
        ""
    }

    #[inline]
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// The conversation in the OpenAI chat shape (a JSON array of messages).
    fn write_input(&self, out: &mut impl io::Write) -> io::Result<()> {
        serde_json::to_writer(out, &*self.messages).map_err(io::Error::from)
    }
}

/// The answer's text is recorded; tool-call fragments, the finish reason
/// and usage are not.
impl CallOutput for ModelDelta {
    #[inline]
    fn size_hint(&self) -> usize {
        match self {
            ModelDelta::Text(text) => text.len(),
            ModelDelta::ToolCall(call) => {
                call.id.as_ref().map_or(0, String::len)
                    + call.name.as_ref().map_or(0, String::len)
                    + call.arguments.len()
            }
            _ => 0,
        }
    }

    fn write_output(&self, out: &mut impl io::Write) -> io::Result<()> {
        match self {
            ModelDelta::Text(text) => out.write_all(text.as_bytes()),
            _ => Ok(()),
        }
    }
}
