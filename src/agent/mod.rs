//! The agent loop: a model and a toolbox, driven turn by turn, streaming
//! every event as it happens.
//!
//! [`Agent`] asks its model (any `Service<ChatRequest>` streaming
//! [`ModelDelta`](crate::model::ModelDelta)s — see [`crate::model`]), runs
//! the tool calls the model makes through its [`Toolbox`](crate::Toolbox)
//! (concurrently, with a bound), hands the results back, and repeats until
//! the model answers without calling a tool or a guard (steps, tool calls)
//! stops it. A run is a stream of [`AgentEvent`]s: text deltas, tool-call
//! input as it streams, each call, its streamed output and result, errors,
//! and one final [`AgentEvent::Done`].
//!
//! [`AgentTool`] makes an agent a tool: its input is `{"message": …}`, the
//! sub-agent's events stream out as the tool's output.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::agent::{Agent, AgentEvent, StopReason};
//! use toolstack::model::{Message, ScriptedModel, Turn};
//! use toolstack::{tool, ToolError, Toolbox};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let model = ScriptedModel::new([
//!     Turn::new().tool_call("add", r#"{"a":2,"b":3}"#),
//!     Turn::new().text("It is 5."),
//! ]);
//! let tools = Toolbox::new()
//!     .tool(tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) }));
//! let events: Vec<AgentEvent> = Agent::new(model, tools).run(vec![Message::user("2+3?")]).collect().await;
//! let Some(AgentEvent::Done(done)) = events.last() else { panic!() };
//! assert_eq!(done.stop, StopReason::Finished);
//! # }
//! ```

// The modules bottom to top, each importing only those before it in this
// list (the declarations below are in alphabetical order): the events
// (the store's state names a `StopReason`), the store, how a run's life
// ends outside its loop (`lifecycle`), the compaction strategies, the
// typed output (`output`), each step's tools and choice (`step_tools`),
// the search tool, the costs; what a resume takes; the sessions running in
// this process (`running_sessions`); the journal, the one writer of a
// run's state; the step in flight and its sinks (`step_state`); where
// model turns and tool calls run (`steps`: here, or as Restate steps);
// one call of a step (`step_call`); the agent's settings; the event stream; a run;
// the agent as a service; sessions (runs continuing a stored
// conversation); the agent as a tool last.
mod as_tool;
pub mod compaction;
mod cost;
mod event;
mod journal;
pub(crate) mod lifecycle;
mod output;
#[cfg(feature = "restate")]
pub mod restate;
mod resume;
mod run;
#[cfg(feature = "restate")]
pub mod run_events;
mod running_sessions;
mod search;
mod service;
mod session;
mod settings;
mod step_call;
mod step_state;
mod step_tools;
mod steps;
pub mod store;
mod stream;

pub use self::as_tool::{AgentTool, AgentToolStream};
pub use self::event::{AgentDone, AgentEvent, StopReason, ToolCost};
#[cfg(feature = "http")]
pub(crate) use self::journal::RideOut;
pub use self::journal::{
    OnStoreError, DEFAULT_CHECKPOINT_TIMEOUT, DEFAULT_LEASE, DEFAULT_STORE_OUTAGE,
};
pub use self::output::{partial_json, OutputMode, DEFAULT_OUTPUT_RETRIES, FINAL_ANSWER_TOOL};
pub use self::resume::{Resume, ResumeError};
pub use self::search::{
    search_tool_info, search_tool_info_with_names, LoadedTools, DEFAULT_SEARCH_LIMIT,
    MAX_NAMES_IN_VIEW, MAX_SEARCH_LIMIT, SEARCH_TOOLS,
};
pub use self::service::AgentRequest;
pub use self::session::{
    Session, SessionError, DEFAULT_MAX_SESSION_MESSAGES, MAX_SESSION_ID_BYTES,
};
pub use self::settings::Agent;
pub use self::step_tools::{StepContext, StepSettings};
pub use self::stream::AgentStream;
