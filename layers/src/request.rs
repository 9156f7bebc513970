//! [`Request`] and [`Output`]: what the layers need to know of a request and
//! of the items of its response, so that one layer serves tool calls
//! ([`ToolRequest`] answered by [`ToolOutput`]s) and model calls
//! ([`ChatRequest`] answered by [`ModelDelta`]s) alike; [`CallKind`] says
//! which of the two a request is.
//!
//! The stream-aware layers are generic over both: a `Service<R>` whose
//! response is a stream of `Result<T, ToolError>` can be wrapped when
//! `R: Request` and, for the trace, `T: Output`. What a layer asks of them is
//! what it cannot do without — a name for the span and the messages, a key
//! for a rate limit, something to record when asked to — and every method
//! is a field read on the tool path.
//!
//! ```
//! use toolstack::ToolRequest;
//! use toolstack::model::ChatRequest;
//! use toolstack_layers::{CallKind, Request};
//!
//! assert_eq!(<ToolRequest as Request>::KIND, CallKind::Tool);
//! assert_eq!(CallKind::Tool.operation(), "execute_tool");
//! assert_eq!(<ChatRequest as Request>::KIND.to_string(), "model");
//! ```

use std::fmt;
use std::io;

use http::Extensions;
use toolstack::model::{ChatRequest, ModelDelta};
use toolstack::{ToolOutput, ToolRequest};

/// What a layered call is: a tool call or a model call.
///
/// It names the call in spans and messages ("the tool produced no output
/// within 30s", "the model panicked: …") and picks the OpenTelemetry GenAI
/// operation and fields the trace fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallKind {
    /// A tool call ([`ToolRequest`]).
    Tool,
    /// A model call ([`ChatRequest`]).
    Model,
}

impl CallKind {
    /// What answers the call, as messages name it: `tool` or `model`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CallKind::Tool => "tool",
            CallKind::Model => "model",
        }
    }

    /// The OpenTelemetry GenAI operation (`gen_ai.operation.name`):
    /// `execute_tool` or `chat`.
    pub const fn operation(self) -> &'static str {
        match self {
            CallKind::Tool => "execute_tool",
            CallKind::Model => "chat",
        }
    }

    /// The span field that [`TraceLayer::record_arguments`] fills:
    /// `gen_ai.tool.call.arguments` or `gen_ai.input.messages`.
    ///
    /// [`TraceLayer::record_arguments`]: crate::trace::TraceLayer::record_arguments
    pub const fn input_field(self) -> &'static str {
        match self {
            CallKind::Tool => "gen_ai.tool.call.arguments",
            CallKind::Model => "gen_ai.input.messages",
        }
    }

    /// The span field that [`TraceLayer::record_output`] fills:
    /// `gen_ai.tool.call.result` or `gen_ai.output.messages`.
    ///
    /// [`TraceLayer::record_output`]: crate::trace::TraceLayer::record_output
    pub const fn output_field(self) -> &'static str {
        match self {
            CallKind::Tool => "gen_ai.tool.call.result",
            CallKind::Model => "gen_ai.output.messages",
        }
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the layers understand: a tool call or a model call.
pub trait Request {
    /// Whether this is a tool call or a model call.
    const KIND: CallKind;

    /// What is called: the tool's name, or the model's when the request
    /// names one (else empty). A `per_tool` rate limit keys its buckets
    /// on it.
    fn name(&self) -> &str;

    /// The call's id (a model's tool-call id); empty when it has none, as
    /// model calls do not.
    fn id(&self) -> &str;

    /// Per-call data: the caller's identity for a per-caller rate limit,
    /// options, …
    fn extensions(&self) -> &Extensions;

    /// Writes the call's input for the trace — a tool's arguments as sent,
    /// a model's conversation as JSON. `out` refuses bytes past the length
    /// to record, so an error here only means "enough".
    fn write_input(&self, out: &mut impl io::Write) -> io::Result<()>;
}

/// One output item of a response stream — a [`ToolOutput`] or a
/// [`ModelDelta`] — as the layers see it: its size and text (the trace,
/// coalescing, the budget) and what it says of the whole response (the
/// trace's span).
pub trait Output {
    /// About how many bytes the item carries (the trace's byte count; only
    /// asked when something listens).
    fn byte_len(&self) -> usize;

    /// Writes the item's text for [`TraceLayer::record_output`]; items
    /// with nothing worth recording write nothing. `out` refuses bytes past
    /// the length to record.
    ///
    /// [`TraceLayer::record_output`]: crate::trace::TraceLayer::record_output
    fn write_output(&self, out: &mut impl io::Write) -> io::Result<()>;

    /// The item's text, when it is plain text that more text may join (a
    /// tool's text item, a model's text delta): what
    /// [`coalesce`](crate::coalesce) merges and [`budget`](crate::budget)
    /// may cut. `None` for every other item.
    fn text_mut(&mut self) -> Option<&mut String> {
        None
    }

    /// What a model reads of the item, when it reads text: what a
    /// [`budget`](crate::budget) that keeps the whole output keeps of it
    /// (the items' texts joined by [`JOIN`](Self::JOIN)). `None` (the
    /// default) for items a model does not read as text.
    fn model_text(&self) -> Option<&str> {
        None
    }

    /// What joins the texts of two items as a model reads them: a newline
    /// for a tool's items (a tool message), nothing for a model's text
    /// deltas (pieces of one text).
    const JOIN: &'static str = "\n";

    /// Whether the item is output that reaches a model (and counts against
    /// a [`budget`](crate::budget)): `false` for progress, and for a
    /// model's tool-call fragments, finish reason and usage.
    fn is_output(&self) -> bool {
        true
    }

    /// Whether the item is output for programs only, which no model reads
    /// (a tool's [`ToolOutput::Structured`]): a budget lets it pass
    /// uncounted; a guardrail checks it, and drops it where it would
    /// redact it.
    fn is_for_programs(&self) -> bool {
        false
    }

    /// A text item (what a [`budget`](crate::budget) says when it cuts).
    fn from_text(text: String) -> Self
    where
        Self: Sized;

    /// Records on the call's `span` what the item says of the whole
    /// response: a model's [`ModelDelta::Model`] as
    /// `gen_ai.response.model`, its [`ModelDelta::Usage`] as
    /// `gen_ai.usage.input_tokens` and `gen_ai.usage.output_tokens`. A
    /// tool's items say nothing (the default).
    fn record_on(&self, span: &tracing::Span) {
        let _ = span;
    }

    /// The finish reason the item carries, as the provider spells it
    /// (`stop`, `tool_calls`, `length`, `content_filter`, …); the trace
    /// records it as `gen_ai.response.finish_reasons`. `None` (the
    /// default) for every other item.
    fn finish_reason(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }

    /// The tokens the call used, when the item reports them (a model's
    /// [`ModelDelta::Usage`]); the trace's metrics count them. `None` (the
    /// default) for every other item.
    fn usage(&self) -> Option<&toolstack::model::Usage> {
        None
    }

    /// The model that answered, when the item names it (a model's
    /// [`ModelDelta::Model`]); the trace's metrics say it as
    /// `gen_ai.response.model`. `None` (the default) for every other item.
    fn response_model(&self) -> Option<&str> {
        None
    }
}

impl Request for ToolRequest {
    const KIND: CallKind = CallKind::Tool;

    #[inline]
    fn name(&self) -> &str {
        ToolRequest::name(self)
    }

    #[inline]
    fn id(&self) -> &str {
        ToolRequest::id(self)
    }

    #[inline]
    fn extensions(&self) -> &Extensions {
        ToolRequest::extensions(self)
    }

    fn write_input(&self, out: &mut impl io::Write) -> io::Result<()> {
        out.write_all(self.arguments().as_bytes())
    }
}

/// Text items as they are, JSON items as their JSON text; media, resources and
/// progress are not recorded.
impl Output for ToolOutput {
    #[inline]
    fn byte_len(&self) -> usize {
        ToolOutput::byte_len(self)
    }

    fn write_output(&self, out: &mut impl io::Write) -> io::Result<()> {
        match self {
            ToolOutput::Text { text } => out.write_all(text.as_bytes()),
            ToolOutput::Json { value } | ToolOutput::Structured { value } => {
                out.write_all(value.as_str().as_bytes())
            }
            _ => Ok(()),
        }
    }

    #[inline]
    fn text_mut(&mut self) -> Option<&mut String> {
        match self {
            ToolOutput::Text { text } => Some(text),
            _ => None,
        }
    }

    #[inline]
    fn model_text(&self) -> Option<&str> {
        ToolOutput::model_text(self)
    }

    #[inline]
    fn is_output(&self) -> bool {
        !matches!(self, ToolOutput::Progress(_))
    }

    #[inline]
    fn is_for_programs(&self) -> bool {
        matches!(self, ToolOutput::Structured { .. })
    }

    fn from_text(text: String) -> Self {
        ToolOutput::text(text)
    }
}

impl Request for ChatRequest {
    const KIND: CallKind = CallKind::Model;

    #[inline]
    fn name(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }

    #[inline]
    fn id(&self) -> &str {
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
impl Output for ModelDelta {
    #[inline]
    fn record_on(&self, span: &tracing::Span) {
        crate::trace::item::record_delta(self, span);
    }

    #[inline]
    fn finish_reason(&self) -> Option<std::borrow::Cow<'_, str>> {
        crate::trace::item::delta_finish_reason(self)
    }

    #[inline]
    fn usage(&self) -> Option<&toolstack::model::Usage> {
        match self {
            ModelDelta::Usage(usage) => Some(usage),
            _ => None,
        }
    }

    #[inline]
    fn response_model(&self) -> Option<&str> {
        match self {
            ModelDelta::Model(model) => Some(model),
            _ => None,
        }
    }

    #[inline]
    fn byte_len(&self) -> usize {
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

    #[inline]
    fn text_mut(&mut self) -> Option<&mut String> {
        match self {
            ModelDelta::Text(text) => Some(text),
            _ => None,
        }
    }

    #[inline]
    fn model_text(&self) -> Option<&str> {
        match self {
            ModelDelta::Text(text) => Some(text),
            _ => None,
        }
    }

    const JOIN: &'static str = "";

    #[inline]
    fn is_output(&self) -> bool {
        matches!(self, ModelDelta::Text(_))
    }

    fn from_text(text: String) -> Self {
        ModelDelta::Text(text)
    }
}
