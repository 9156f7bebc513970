//! Tracing for tool and model calls: one span per call that lives as long
//! as the response stream, with the OpenTelemetry GenAI attributes.
//!
//! [`Trace`] makes a span named `execute_tool` (`otel.name` =
//! `execute_tool {tool}`) with `gen_ai.operation.name = "execute_tool"`,
//! `gen_ai.tool.name`, `gen_ai.tool.call.id` and, on failure, `error.type`
//! (the [`ErrorKind`](toolstack::ErrorKind)) and `otel.status_code =
//! "ERROR"`. The tool's `call`, and every poll of its future and of its
//! stream, runs inside the span, so the tool's own events are its children.
//!
//! Over a model (`Service<ChatRequest>`) the span is named `chat`
//! (`otel.name` = `chat {model}`, or `chat` when the request names no
//! model; see [`ChatRequest::model`](toolstack::model::ChatRequest::model))
//! with `gen_ai.operation.name = "chat"` and `gen_ai.request.model`; the
//! items counted are the deltas, and the default events say `model call …`
//! instead of `tool call …`.
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

mod callbacks;
mod future;
mod layer;
mod service;

pub use self::callbacks::{
    DefaultMakeSpan, DefaultOnEarlyDrop, DefaultOnEnd, DefaultOnFailure, DefaultOnOpen, MakeSpan,
    OnEarlyDrop, OnEnd, OnFailure, OnOpen, Outcome, StreamSummary,
};
pub use self::future::{ResponseFuture, ResponseStream};
pub use self::layer::TraceLayer;
pub use self::service::Trace;
