//! [`MakeSpan`]: how the span of a call is made, and the default one with
//! the OpenTelemetry GenAI attributes.

use std::fmt;

use toolstack::model::ChatRequest;
use toolstack::ToolRequest;
use tracing::{Level, Span};

/// Makes the span of one call of request type `R`.
///
/// [`Trace`](super::Trace) records `error.type`, `otel.status_code` and the
/// request kind's [`input_field`](crate::CallKind::input_field) and
/// [`output_field`](crate::CallKind::output_field) on it, and on a chat
/// span what the answer tells (`gen_ai.response.model`,
/// `gen_ai.response.finish_reasons`,
/// `gen_ai.response.time_to_first_chunk`, `gen_ai.usage.input_tokens`,
/// `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`,
/// `gen_ai.usage.reasoning.output_tokens`); a span that does not declare those
/// fields (as `Empty`) simply does not get them.
pub trait MakeSpan<R> {
    /// The span of the call `request`.
    fn make_span(&mut self, request: &R) -> Span;

    /// Whether a span made now could be enabled; when it cannot and no
    /// hook is enabled either, the trace layer makes no span and the call
    /// passes through. The default says yes: a closure is always asked.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<R, F> MakeSpan<R> for F
where
    F: FnMut(&R) -> Span,
{
    fn make_span(&mut self, request: &R) -> Span {
        self(request)
    }
}

/// The default [`MakeSpan`], with the OpenTelemetry GenAI attributes:
///
/// * for a tool call, a span named `execute_tool` whose `otel.name` is
///   `execute_tool {tool}` (kind `INTERNAL`), with `gen_ai.operation.name
///   = "execute_tool"`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
///   `gen_ai.tool.type = "function"` and, when the tool has one,
///   `gen_ai.tool.description`, and for a call that came over MCP
///   ([`McpAttributes`](toolstack::McpAttributes) in its extensions)
///   `mcp.method.name` and `mcp.protocol.version`; when the call ends,
///   `toolstack.tool.result_tokens`, the tokens its output adds to the
///   model's next prompt, estimated at
///   [`BYTES_PER_TOKEN`](crate::budget::BYTES_PER_TOKEN) bytes a token
///   (the agent's `AgentDone::tool_costs` has the measured share);
/// * for a model call, a span named `chat` whose `otel.name` is
///   `chat {model}` (`chat` when the request names no model; kind
///   `CLIENT`), with `gen_ai.operation.name = "chat"`,
///   `gen_ai.provider.name` when [set](Self::provider),
///   `gen_ai.request.model` when known and `gen_ai.request.stream = true`
///   (every model call here streams), `gen_ai.output.type = "json"` for a
///   request asking for a typed answer, `toolstack.request.tool_choice`
///   (`auto`, `none`, `required`, `tool:{name}`) and
///   `toolstack.request.tools` (the names of the tools offered,
///   comma-separated) and, for an agent whose toolbox has deferred tools,
///   `toolstack.request.tools_loaded` (those a tool search has loaded so
///   far, comma-separated; empty before any); what the answer tells is recorded
///   as it streams (see the [module docs](super#what-a-chat-span-records)).
///
/// The tool's description comes from the request
/// ([`ToolRequest::info`]), which a [`Toolbox`](toolstack::Toolbox) sets
/// at dispatch: a trace layer *inside* the toolbox
/// ([`Toolbox::layer`](toolstack::Toolbox::layer),
/// [`layered`](toolstack::Toolbox::layered)) records it, one around the
/// whole toolbox sees no description and leaves the field out.
///
/// ```
/// use toolstack_layers::trace::{DefaultMakeSpan, TraceLayer};
///
/// let layer = TraceLayer::new().make_span_with(DefaultMakeSpan::new().provider("openai"));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DefaultMakeSpan {
    level: Level,
    provider: Option<&'static str>,
}

impl DefaultMakeSpan {
    /// A span at level `INFO`, with no provider named.
    pub fn new() -> Self {
        DefaultMakeSpan {
            level: Level::INFO,
            provider: None,
        }
    }

    /// Sets the span's level.
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// Names the model's provider on chat spans, as
    /// `gen_ai.provider.name`: `openai`, `anthropic`, `aws.bedrock`,
    /// `gcp.gemini`, … (the conventions list the well-known names; use one
    /// of them when it applies).
    ///
    /// A model service does not say who serves it, so the trace cannot
    /// tell; the conventions *require* the attribute on a chat span, so
    /// set it. An OpenAI-compatible endpoint of another provider is named
    /// after what the client believes it talks to (the conventions: "the
    /// instrumentation's best knowledge"). Tool spans do not carry it.
    pub fn provider(mut self, name: &'static str) -> Self {
        self.provider = Some(name);
        self
    }
}

impl Default for DefaultMakeSpan {
    fn default() -> Self {
        Self::new()
    }
}

impl MakeSpan<ToolRequest> for DefaultMakeSpan {
    fn is_enabled(&self) -> bool {
        super::level_enabled(self.level)
    }

    fn make_span(&mut self, request: &ToolRequest) -> Span {
        let name = request.name();
        let mcp = request.extensions().get::<toolstack::McpAttributes>();
        span_dynamic_lvl!(
            self.level,
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", name),
            otel.kind = "internal",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            gen_ai.tool.call.id = %request.id(),
            // Every tool here is a function the application runs with the
            // model's arguments: the conventions' `function`.
            gen_ai.tool.type = "function",
            gen_ai.tool.description = request.info().and_then(|info| info.description()),
            mcp.method.name = mcp.map(|m| &*m.method),
            mcp.protocol.version = mcp.and_then(|m| m.protocol_version.as_deref()),
            gen_ai.tool.call.decision = tracing::field::Empty,
            gen_ai.tool.call.decided_by = tracing::field::Empty,
            toolstack.cache = tracing::field::Empty,
            toolstack.tool.result_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
        )
    }
}

impl MakeSpan<ChatRequest> for DefaultMakeSpan {
    fn is_enabled(&self) -> bool {
        super::level_enabled(self.level)
    }

    fn make_span(&mut self, request: &ChatRequest) -> Span {
        let model = request.model.as_deref();
        span_dynamic_lvl!(
            self.level,
            "chat",
            otel.name = %ChatSpanName(model),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = self.provider,
            gen_ai.request.model = model,
            // Every model call here streams its answer (`ModelDelta`s).
            gen_ai.request.stream = true,
            gen_ai.output.type = request.output.as_ref().map(|_| "json"),
            toolstack.request.tool_choice = %request.tool_choice.as_str(),
            toolstack.request.tools = %ToolNames(&request.tools),
            toolstack.request.tools_loaded = request
                .extensions
                .get::<toolstack::model::LoadedTools>()
                .map(|loaded| tracing::field::display(loaded.0.join(","))),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.response.finish_reasons = tracing::field::Empty,
            gen_ai.response.time_to_first_chunk = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.reasoning.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
        )
    }
}

/// The names of the tools a model request offers, comma-separated.
struct ToolNames<'a>(&'a [toolstack::ToolInfo]);

impl std::fmt::Display for ToolNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (at, tool) in self.0.iter().enumerate() {
            if at > 0 {
                f.write_str(",")?;
            }
            f.write_str(tool.name())?;
        }
        Ok(())
    }
}

/// `chat {model}`, or `chat` when the model is not known.
struct ChatSpanName<'a>(Option<&'a str>);

impl fmt::Display for ChatSpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(model) => write!(f, "chat {model}"),
            None => f.write_str("chat"),
        }
    }
}
