//! Tracing for tool and model calls: one span per call that lives as long
//! as the response stream, with the OpenTelemetry GenAI attributes.
//!
//! [`Trace`] makes a span named `execute_tool` (`otel.name` =
//! `execute_tool {tool}`, kind `INTERNAL`) with `gen_ai.operation.name =
//! "execute_tool"`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
//! `gen_ai.tool.type = "function"`, `gen_ai.tool.description` (when the
//! layer is inside a toolbox, which gives it the tool's description) and,
//! on failure, `error.type` (the [`ErrorKind`](toolstack::ErrorKind)) and
//! `otel.status_code = "ERROR"`. The tool's `call`, and every poll of its
//! future and of its stream, runs inside the span, so the tool's own
//! events are its children.
//!
//! Over a model (`Service<ChatRequest>`) the span is named `chat`
//! (`otel.name` = `chat {model}`, or `chat` when the request names no
//! model; see [`ChatRequest::model`](toolstack::model::ChatRequest::model);
//! kind `CLIENT`) with `gen_ai.operation.name = "chat"`,
//! `gen_ai.provider.name` (name it with [`TraceLayer::provider`]: a model
//! service does not say who serves it), `gen_ai.request.model` and
//! `gen_ai.request.stream = true` (every model call here streams); the
//! items counted are the deltas, and the default events say `model call …`
//! instead of `tool call …`.
//!
//! Inside an agent's run the spans are children of its `invoke_agent`
//! span: the agent polls its model and tools inside it. To send them to
//! an OpenTelemetry collector, see `otel` (feature `otel`).
//!
//! Each call ends exactly once, reported by one hook:
//!
//! * the stream ends: [`OnEnd`] with [`Outcome::Completed`];
//! * the future or the stream yields an error (a stream's last item):
//!   [`OnFailure`], then [`OnEnd`] with [`Outcome::Failed`];
//! * the consumer drops the future or the stream before either:
//!   [`OnEarlyDrop`] with [`Outcome::Cancelled`].
//!
//! [`OnOpen`] reports the stream opening. The hooks are set in the
//! tower-http way: a default type, any closure, or `()` to turn one off.
//! Arguments and output are recorded on the span only when asked for
//! ([`TraceLayer::record_arguments`], [`TraceLayer::record_output`]), cut to
//! a length.
//!
//! When nothing listens — the span is disabled and no hook is enabled —
//! the layer reads no clock and sizes no item.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::{tool, ToolError, ToolRequest};
//! use toolstack_layers::trace::{StreamSummary, TraceLayer};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use tracing::Span;
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Args {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let layer = TraceLayer::new()
//!     .record_arguments(256)
//!     .on_open(())
//!     .on_end(|summary: &StreamSummary, _: &Span| {
//!         println!("{} items, {}", summary.items(), summary.outcome());
//!     });
//! let mut tool = ServiceBuilder::new()
//!     .layer(layer)
//!     .service(tool::from_fn("ping", |_: Args| async { Ok::<_, ToolError>("pong") }));
//!
//! let request = ToolRequest::new("ping", "{}").with_id("call_1");
//! let stream = tool.ready().await.unwrap().call(request).await.unwrap();
//! let items: Vec<_> = stream.collect().await;
//! assert_eq!(items.len(), 1);
//! # }
//! ```
//!
//! # What a chat span records
//!
//! The answer tells more as it streams, and the span records it then
//! (the names are the OpenTelemetry GenAI conventions'):
//!
//! | attribute | from |
//! |---|---|
//! | `gen_ai.response.time_to_first_chunk` | seconds (a float) from the call to the first delta |
//! | `gen_ai.response.model` | [`ModelDelta::Model`](toolstack::model::ModelDelta::Model): the model that answered |
//! | `gen_ai.response.finish_reasons` | [`ModelDelta::Finish`](toolstack::model::ModelDelta::Finish) (`stop`, `tool_calls`, `length`, …); `error` when the answer failed or was dropped before it |
//! | `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens` | [`ModelDelta::Usage`](toolstack::model::ModelDelta::Usage) |
//! | `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.reasoning.output_tokens` | its cached and reasoning tokens, when the endpoint reported some |
//!
//! The conventions make the finish reasons a string array, one per
//! choice, which a `tracing` field cannot hold. With the feature
//! `opentelemetry`, a span that an OpenTelemetry layer records gets the
//! array (`["stop"]`) on its OpenTelemetry span directly; otherwise the
//! one reason is a string field. (A `fmt` layer next to an OpenTelemetry
//! one then does not see it.) What an item records is its
//! [`Output::record_on`](crate::Output::record_on).
//!
//! # Metrics
//!
//! With the feature `opentelemetry`, a call also records the GenAI
//! conventions' metrics when it ends, on OpenTelemetry's global meter
//! provider (instrumentation scope `toolstack`; `otel::init_from_env`
//! installs one that exports over OTLP):
//!
//! | metric | instrument | on | attributes |
//! |---|---|---|---|
//! | `gen_ai.execute_tool.duration` | histogram, `s`, buckets [`DURATION_BUCKETS`] | a tool call | `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.type`, `error.type` on failure |
//! | `gen_ai.client.operation.duration` | histogram, `s`, buckets [`DURATION_BUCKETS`] | a model call | `gen_ai.operation.name = chat`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `error.type` on failure |
//! | `gen_ai.client.token.usage` | histogram, `{token}`, buckets [`TOKEN_BUCKETS`] | a model call that reported usage | the model call's, and `gen_ai.token.type` (`input`, `output`) |
//! | `gen_ai.client.inference.usage.input_tokens`, `….output_tokens`, `….cache_read.input_tokens`, `….reasoning.output_tokens` | counters, `{token}` | every model call (`0` when it reported no usage) | the model call's, and `gen_ai.token.modality = unknown` (a model's usage does not split by modality) |
//!
//! A consumer that leaves a call before its end records it with
//! `error.type = cancelled`. The histograms carry the conventions'
//! recommended bucket boundaries as advice, which the SDK follows unless a
//! view says otherwise.
//!
//! The global provider's instruments are taken at the layer's first
//! recorded call, so install the provider before the first call, and the
//! metrics are recorded for the calls that are watched (a span or a hook
//! enabled: with `init_from_env`, every `INFO` span). A meter of one's own
//! ([`TraceLayer::meter`]) records every call, watched or not;
//! [`TraceLayer::no_metrics`] records none. Without a meter provider the
//! global meter is OpenTelemetry's no-op one.
//!
//! # Differences from tower-http's `Trace`
//!
//! The shape is tower-http's — a [`MakeSpan`] and one hook trait per moment,
//! each with a default type, closures and `()` — made for calls instead of
//! HTTP: the span carries the OpenTelemetry GenAI attributes, lives as long
//! as the response *stream* (tower-http's follows the body the same way),
//! counts items and bytes, and reports a consumer that walked away
//! ([`OnEarlyDrop`]). There is no failure classifier: a
//! [`ToolError`](toolstack::ToolError) already says its kind.

use std::time::Duration;

use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
use tracing::Level;

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

/// Whether an event of this module at `level` would be seen. Asks the
/// callsite's cached interest, so with no subscriber (or one that filters
/// this target out) it is a load and a branch, and the call path then reads
/// no clock and sizes no item.
#[inline]
fn level_enabled(level: Level) -> bool {
    if STATIC_MAX_LEVEL < level || LevelFilter::current() < level {
        return false;
    }
    callsite_enabled(level)
}

/// The callsite's interest, once the global level lets `level` through.
#[inline(never)]
fn callsite_enabled(level: Level) -> bool {
    match level {
        Level::TRACE => tracing::enabled!(Level::TRACE),
        Level::DEBUG => tracing::enabled!(Level::DEBUG),
        Level::INFO => tracing::enabled!(Level::INFO),
        Level::WARN => tracing::enabled!(Level::WARN),
        _ => tracing::enabled!(Level::ERROR),
    }
}

/// The default end and early-drop event: the summary's fields and `{kind}
/// {what}` ("tool call ended", "model call dropped before its end").
fn report_summary(level: Level, kind: crate::CallKind, what: &str, summary: &StreamSummary) {
    event_dynamic_lvl!(
        level,
        items = summary.items(),
        bytes = summary.bytes(),
        duration_ms = millis(summary.duration()),
        outcome = summary.outcome().as_str(),
        "{kind} {what}"
    );
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
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

mod future;
pub(crate) mod item;
mod layer;
mod make_span;
mod metrics;
mod on_early_drop;
mod on_end;
mod on_failure;
mod on_open;
mod service;
mod summary;

pub use self::future::{ResponseFuture, ResponseStream};
pub use self::layer::TraceLayer;
pub use self::make_span::{DefaultMakeSpan, MakeSpan};
pub use self::metrics::{DURATION_BUCKETS, TOKEN_BUCKETS};
pub use self::on_early_drop::{DefaultOnEarlyDrop, OnEarlyDrop};
pub use self::on_end::{DefaultOnEnd, OnEnd};
pub use self::on_failure::{DefaultOnFailure, OnFailure};
pub use self::on_open::{DefaultOnOpen, OnOpen};
pub use self::service::Trace;
pub use self::summary::{Outcome, StreamSummary};
