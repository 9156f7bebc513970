//! The agent side: what a model streams back, and folding it into complete
//! tool calls.
//!
//! A model is a service whose response is a stream of [`ModelDelta`]s: text
//! as it is written, tool-call fragments by index (the id and name usually
//! only in the first fragment, the arguments split anywhere), a finish
//! reason and usage. [`Accumulator`] folds the fragments into complete
//! [`ToolCall`]s.
//!
//! ```
//! use toolstack::agent::{Accumulator, ToolCallDelta};
//!
//! let mut acc = Accumulator::new();
//! acc.push(&ToolCallDelta::new(0).id("call_1").name("get_weather").arguments("{\"ci"));
//! acc.push(&ToolCallDelta::new(1).id("call_2").name("get_time").arguments("{}"));
//! acc.push(&ToolCallDelta::new(0).arguments("ty\":\"Paris\"}"));
//! let calls = acc.finish().unwrap();
//! assert_eq!(calls[0].name, "get_weather");
//! assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
//! assert_eq!(calls[1].id, "call_2");
//! ```

mod accumulate;
mod as_tool;
mod delta;
mod message;
#[cfg(feature = "openai")]
mod openai;
mod run;
mod scripted;

pub use self::accumulate::{AccumulateError, Accumulator, Pushed};
pub use self::as_tool::{AgentTool, AgentToolStream};
pub use self::delta::{FinishReason, ModelDelta, ToolCall, ToolCallDelta, Usage};
pub use self::message::{ChatRequest, Message};
#[cfg(feature = "openai")]
pub use self::openai::{OpenAiModel, OpenAiStream};
pub use self::run::{Agent, AgentDone, AgentEvent, AgentRequest, AgentStream, StopReason};
pub use self::scripted::{ScriptedModel, ScriptedStream, Turn};
