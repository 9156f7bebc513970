//! # toolstack-layers
//!
//! Stream-aware tower middleware for [`toolstack`] tools and models.
//!
//! A tool's response is a stream, and its work goes on after the response
//! future resolves; the layers here watch the stream, not only the future:
//! a timeout can fire between items, a retry never duplicates an emitted
//! item, a concurrency permit lives as long as the stream.
//!
//! Every layer is an ordinary [`tower_layer::Layer`]: it stacks in a
//! `tower::ServiceBuilder` (also through [`ServiceBuilderExt`]), is `Clone`
//! when the inner service is, answers with [`ToolError`](toolstack::ToolError)
//! and forwards [`Describe`], so a layered tool keeps its description.
//!
//! ## Tools and models
//!
//! A model is a service too — `Service<ChatRequest>` answering with a
//! stream of `Result<ModelDelta, ToolError>` (see [`toolstack::agent`]) —
//! and the trace, timeout, retry, rate-limit, concurrency-limit and
//! catch-panic layers apply to it as they do to tools: the deltas are the
//! items. What a layer needs of a request or an item comes through
//! [`Call`] and [`CallOutput`], implemented for [`ToolRequest`] /
//! [`ToolOutput`](toolstack::ToolOutput) and for
//! [`ChatRequest`](toolstack::model::ChatRequest) /
//! [`ModelDelta`](toolstack::model::ModelDelta). Validation is for tools
//! only.
//!
//! ```
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use toolstack::agent::{Agent, AgentEvent};
//! use toolstack::model::{Message, ScriptedModel, Turn};
//! use toolstack::Toolbox;
//! use toolstack_layers::retry::RetryPolicy;
//! use toolstack_layers::timeout::TimeoutLayer;
//! use toolstack_layers::ServiceBuilderExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let model = tower::ServiceBuilder::new()
//!     .trace_tool()                        // span `chat {model}`, gen_ai.operation.name = chat
//!     .tool_retry(RetryPolicy::default())  // only before the first delta
//!     .tool_timeout(TimeoutLayer::new()
//!         .first_item(Duration::from_secs(30))
//!         .idle(Duration::from_secs(10)))  // between deltas
//!     .tool_concurrency_limit(4)           // permit held while the answer streams
//!     .service(ScriptedModel::new([Turn::new().text("Hello!")]));
//! let agent = Agent::new(model, Toolbox::new()).model_name("scripted");
//! let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
//! assert!(matches!(events.last(), Some(AgentEvent::Done(_))));
//! # }
//! ```
//!
//! ## Keeping a tool's description
//!
//! [`Layered`] wraps a tool in any tower layer — tower's own do not forward
//! [`Describe`] — and keeps its description:
//!
//! ```
//! use toolstack::{tool, Describe, ToolError};
//! use toolstack_layers::Layered;
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Args {}
//!
//! let t = tool::from_fn("noop", |_: Args| async { Ok::<_, ToolError>("ok") });
//! let wrapped = Layered::new(t, tower_layer::Identity::new());
//! assert_eq!(wrapped.info().name(), "noop");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod builder;
mod call;
pub mod catch_panic;
pub mod concurrency;
#[cfg(feature = "rate-limit")]
pub mod rate_limit;
pub mod retry;
pub mod timeout;
pub mod trace;
#[cfg(feature = "validate")]
pub mod validate;

pub use builder::ServiceBuilderExt;
pub use call::{Call, CallOutput};

use std::sync::Arc;
use std::task::{Context, Poll};

use toolstack::{Describe, ToolInfo, ToolRequest};
use tower_layer::Layer;
use tower_service::Service;

/// A tool wrapped in any tower layer, keeping the tool's description.
#[derive(Clone, Debug)]
pub struct Layered<S> {
    info: Arc<ToolInfo>,
    service: S,
}

impl<S> Layered<S> {
    /// Wraps `tool` in `layer`, remembering the tool's description.
    pub fn new<T, L>(tool: T, layer: L) -> Self
    where
        T: Describe,
        L: Layer<T, Service = S>,
    {
        Layered {
            info: Arc::new(tool.info().clone()),
            service: layer.layer(tool),
        }
    }
}

impl<S> Describe for Layered<S> {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl<S: Service<ToolRequest>> Service<ToolRequest> for Layered<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: ToolRequest) -> S::Future {
        self.service.call(request)
    }
}
