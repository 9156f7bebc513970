//! The hooks of [`Trace`](super::Trace): how the span is made and what is
//! reported when a call opens, ends, fails or is dropped early.
//!
//! Each hook is a trait implemented by a default type, by closures, and by
//! `()`, which turns the hook off.
//!
//! [`Trace`](super::Trace) calls the `*_of` method of each reporting hook,
//! which also receives what answers the call — `"tool"` or `"model"`
//! ([`Call::SUBJECT`](crate::Call::SUBJECT)) — and forwards to the plain
//! method unless overridden. The default hooks override it so that their
//! messages name the subject (`tool call ended`, `model call ended`);
//! closures get the plain method.

use std::fmt;
use std::time::Duration;

use toolstack::model::ChatRequest;
use toolstack::{ToolError, ToolRequest};
use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
use tracing::{Level, Span};

// `tracing`'s macros need a level known at compile time; these pick one of
// five call sites from a level chosen at run time.
macro_rules! event_dynamic_lvl {
    ($lvl:expr, $($tt:tt)*) => {
        match $lvl {
            Level::ERROR => tracing::event!(Level::ERROR, $($tt)*),
            Level::WARN => tracing::event!(Level::WARN, $($tt)*),
            Level::INFO => tracing::event!(Level::INFO, $($tt)*),
            Level::DEBUG => tracing::event!(Level::DEBUG, $($tt)*),
            Level::TRACE => tracing::event!(Level::TRACE, $($tt)*),
        }
    };
}

macro_rules! span_dynamic_lvl {
    ($lvl:expr, $($tt:tt)*) => {
        match $lvl {
            Level::ERROR => tracing::span!(Level::ERROR, $($tt)*),
            Level::WARN => tracing::span!(Level::WARN, $($tt)*),
            Level::INFO => tracing::span!(Level::INFO, $($tt)*),
            Level::DEBUG => tracing::span!(Level::DEBUG, $($tt)*),
            Level::TRACE => tracing::span!(Level::TRACE, $($tt)*),
        }
    };
}

/// Whether some subscriber may want events at `level`: a compile-time
/// bound, then one atomic load.
/// Whether an event of this module at `level` would be seen. Asks the
/// callsite's cached interest, so with no subscriber (or one that filters
/// this target out) it is a load and a branch, and the call path then reads
/// no clock and sizes no item.
fn level_enabled(level: Level) -> bool {
    if STATIC_MAX_LEVEL < level || LevelFilter::current() < level {
        return false;
    }
    match level {
        Level::TRACE => tracing::enabled!(Level::TRACE),
        Level::DEBUG => tracing::enabled!(Level::DEBUG),
        Level::INFO => tracing::enabled!(Level::INFO),
        Level::WARN => tracing::enabled!(Level::WARN),
        _ => tracing::enabled!(Level::ERROR),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Makes the span of one call of request type `R`.
///
/// [`Trace`](super::Trace) records `error.type`, `otel.status_code` and the
/// request's [`INPUT_FIELD`](crate::Call::INPUT_FIELD) and
/// [`OUTPUT_FIELD`](crate::Call::OUTPUT_FIELD) on it; a span that does not
/// declare those fields (as `Empty`) simply does not get them.
pub trait MakeSpan<R> {
    /// The span of the call `request`.
    fn make_span(&mut self, request: &R) -> Span;
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
///   `execute_tool {tool}`, with `gen_ai.operation.name = "execute_tool"`,
///   `gen_ai.tool.name` and `gen_ai.tool.call.id`;
/// * for a model call, a span named `chat` whose `otel.name` is
///   `chat {model}` (`chat` when the request names no model), with
///   `gen_ai.operation.name = "chat"` and `gen_ai.request.model` when
///   known.
#[derive(Debug, Clone, Copy)]
pub struct DefaultMakeSpan {
    level: Level,
}

impl DefaultMakeSpan {
    /// A span at level `INFO`.
    pub fn new() -> Self {
        DefaultMakeSpan { level: Level::INFO }
    }

    /// Sets the span's level.
    pub fn level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }
}

impl Default for DefaultMakeSpan {
    fn default() -> Self {
        Self::new()
    }
}

impl MakeSpan<ToolRequest> for DefaultMakeSpan {
    fn make_span(&mut self, request: &ToolRequest) -> Span {
        let name = request.name();
        span_dynamic_lvl!(
            self.level,
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", name),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %name,
            gen_ai.tool.call.id = %request.id(),
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
        )
    }
}

impl MakeSpan<ChatRequest> for DefaultMakeSpan {
    fn make_span(&mut self, request: &ChatRequest) -> Span {
        let model = request.model.as_deref();
        span_dynamic_lvl!(
            self.level,
            "chat",
            otel.name = %ChatSpanName(model),
            gen_ai.operation.name = "chat",
            gen_ai.request.model = model,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
        )
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

/// How a call's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The stream ended after its last item.
    Completed,
    /// The call failed: the response future or the stream yielded an error.
    Failed,
    /// The consumer dropped the future or the stream before its end.
    Cancelled,
}

impl Outcome {
    /// A short lowercase name: `completed`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call produced, reported once when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSummary {
    pub(super) items: u64,
    pub(super) bytes: u64,
    pub(super) duration: Duration,
    pub(super) outcome: Outcome,
}

impl StreamSummary {
    /// The number of `Ok` items the stream yielded.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The items' total [`size_hint`](crate::CallOutput::size_hint);
    /// zero when nothing was listening when the call started, as then the
    /// sizes are not computed.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Time from `call` to the end; zero when nothing was listening when the
    /// call started, as then the clock is not read.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// How the stream ended.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// Called when the response future resolves with a stream.
pub trait OnOpen {
    /// `latency` is the time from `call` to the stream opening.
    fn on_open(&mut self, latency: Duration, span: &Span);

    /// What [`Trace`](super::Trace) calls: [`on_open`](Self::on_open) for a
    /// call answered by a `subject` (`"tool"`, `"model"`).
    fn on_open_of(&mut self, subject: &'static str, latency: Duration, span: &Span) {
        let _ = subject;
        self.on_open(latency, span)
    }

    /// Whether this hook does anything; when no hook and no span is enabled
    /// the layer does not read the clock.
    fn is_enabled(&self) -> bool {
        true
    }
}

/// Called once per call, when it ends: the stream ended, or the call failed
/// (after [`OnFailure`]).
pub trait OnEnd {
    /// `summary` counts the items and says how the call ended.
    fn on_end(&mut self, summary: &StreamSummary, span: &Span);

    /// What [`Trace`](super::Trace) calls: [`on_end`](Self::on_end) for a
    /// call answered by a `subject` (`"tool"`, `"model"`).
    fn on_end_of(&mut self, subject: &'static str, summary: &StreamSummary, span: &Span) {
        let _ = subject;
        self.on_end(summary, span)
    }

    /// Whether this hook does anything.
    fn is_enabled(&self) -> bool {
        true
    }
}

/// Called when the response future or the stream yields an error.
pub trait OnFailure {
    /// `latency` is the time from `call` to the error.
    fn on_failure(&mut self, error: &ToolError, latency: Duration, span: &Span);

    /// What [`Trace`](super::Trace) calls: [`on_failure`](Self::on_failure)
    /// for a call answered by a `subject` (`"tool"`, `"model"`).
    fn on_failure_of(
        &mut self,
        subject: &'static str,
        error: &ToolError,
        latency: Duration,
        span: &Span,
    ) {
        let _ = subject;
        self.on_failure(error, latency, span)
    }

    /// Whether this hook does anything.
    fn is_enabled(&self) -> bool {
        true
    }
}

/// Called when the consumer drops the future or the stream before its end
/// (instead of [`OnEnd`]); the outcome is [`Outcome::Cancelled`].
pub trait OnEarlyDrop {
    /// `summary` counts the items yielded before the drop.
    fn on_early_drop(&mut self, summary: &StreamSummary, span: &Span);

    /// What [`Trace`](super::Trace) calls:
    /// [`on_early_drop`](Self::on_early_drop) for a call answered by a
    /// `subject` (`"tool"`, `"model"`).
    fn on_early_drop_of(&mut self, subject: &'static str, summary: &StreamSummary, span: &Span) {
        let _ = subject;
        self.on_early_drop(summary, span)
    }

    /// Whether this hook does anything.
    fn is_enabled(&self) -> bool {
        true
    }
}

impl<F: FnMut(Duration, &Span)> OnOpen for F {
    fn on_open(&mut self, latency: Duration, span: &Span) {
        self(latency, span)
    }
}

impl<F: FnMut(&StreamSummary, &Span)> OnEnd for F {
    fn on_end(&mut self, summary: &StreamSummary, span: &Span) {
        self(summary, span)
    }
}

impl<F: FnMut(&ToolError, Duration, &Span)> OnFailure for F {
    fn on_failure(&mut self, error: &ToolError, latency: Duration, span: &Span) {
        self(error, latency, span)
    }
}

impl<F: FnMut(&StreamSummary, &Span)> OnEarlyDrop for F {
    fn on_early_drop(&mut self, summary: &StreamSummary, span: &Span) {
        self(summary, span)
    }
}

impl OnOpen for () {
    fn on_open(&mut self, _: Duration, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

impl OnEnd for () {
    fn on_end(&mut self, _: &StreamSummary, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

impl OnFailure for () {
    fn on_failure(&mut self, _: &ToolError, _: Duration, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

impl OnEarlyDrop for () {
    fn on_early_drop(&mut self, _: &StreamSummary, _: &Span) {}

    fn is_enabled(&self) -> bool {
        false
    }
}

macro_rules! default_callback {
    ($(#[$doc:meta])* $name:ident, $level:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            level: Level,
        }

        impl $name {
            #[doc = concat!("Reports at level `", stringify!($level), "`.")]
            pub fn new() -> Self {
                $name { level: Level::$level }
            }

            /// Sets the level of the event.
            pub fn level(mut self, level: Level) -> Self {
                self.level = level;
                self
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

default_callback!(
    /// The default [`OnOpen`]: a `tool call opened` (or `model call
    /// opened`) event with `latency_ms`.
    DefaultOnOpen,
    DEBUG
);

default_callback!(
    /// The default [`OnEnd`]: a `tool call ended` (or `model call ended`)
    /// event with `items`, `bytes`, `duration_ms` and `outcome`.
    DefaultOnEnd,
    INFO
);

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

default_callback!(
    /// The default [`OnEarlyDrop`]: a `tool call dropped before its end`
    /// (or `model call …`) event with `items`, `bytes`, `duration_ms` and
    /// `outcome = cancelled`.
    DefaultOnEarlyDrop,
    INFO
);

impl OnOpen for DefaultOnOpen {
    fn on_open(&mut self, latency: Duration, span: &Span) {
        self.on_open_of("tool", latency, span);
    }

    fn on_open_of(&mut self, subject: &'static str, latency: Duration, _: &Span) {
        event_dynamic_lvl!(
            self.level,
            latency_ms = millis(latency),
            "{subject} call opened"
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}

impl OnEnd for DefaultOnEnd {
    fn on_end(&mut self, summary: &StreamSummary, span: &Span) {
        self.on_end_of("tool", summary, span);
    }

    fn on_end_of(&mut self, subject: &'static str, summary: &StreamSummary, _: &Span) {
        event_dynamic_lvl!(
            self.level,
            items = summary.items,
            bytes = summary.bytes,
            duration_ms = millis(summary.duration),
            outcome = summary.outcome.as_str(),
            "{subject} call ended"
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}

impl OnFailure for DefaultOnFailure {
    fn on_failure(&mut self, error: &ToolError, latency: Duration, span: &Span) {
        self.on_failure_of("tool", error, latency, span);
    }

    fn on_failure_of(
        &mut self,
        subject: &'static str,
        error: &ToolError,
        latency: Duration,
        _: &Span,
    ) {
        event_dynamic_lvl!(
            self.level,
            error.type = error.kind().as_str(),
            error.message = error.message(),
            latency_ms = millis(latency),
            "{subject} call failed"
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}

impl OnEarlyDrop for DefaultOnEarlyDrop {
    fn on_early_drop(&mut self, summary: &StreamSummary, span: &Span) {
        self.on_early_drop_of("tool", summary, span);
    }

    fn on_early_drop_of(&mut self, subject: &'static str, summary: &StreamSummary, _: &Span) {
        event_dynamic_lvl!(
            self.level,
            items = summary.items,
            bytes = summary.bytes,
            duration_ms = millis(summary.duration),
            outcome = summary.outcome.as_str(),
            "{subject} call dropped before its end"
        );
    }

    fn is_enabled(&self) -> bool {
        level_enabled(self.level)
    }
}
