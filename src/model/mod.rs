//! The model's vocabulary and its backends.
//!
//! A model is a `Service<`[`ChatRequest`]`>` whose response is a stream of
//! `Result<`[`ModelDelta`]`, ToolError>`: text as it is written, tool-call
//! fragments by index (the id and name usually only in the first fragment,
//! the arguments split anywhere), a finish reason and usage. The same
//! stream-aware layers that wrap tools wrap a model (`toolstack-layers`),
//! and the [agent loop](crate::agent) drives one.
//!
//! | item | what it is |
//! |---|---|
//! | [`ChatRequest`], [`Message`] | what the model is asked: the conversation, the tools it may call, extensions |
//! | [`ModelDelta`], [`ToolCallDelta`], [`ReasoningDelta`], [`FinishReason`], [`Usage`] | what it streams back |
//! | [`Reasoning`] | a reasoning block, complete: kept in the assistant message, sent back to a provider that requires it |
//! | [`Accumulator`], [`ToolCall`] | fragments folded into complete tool calls, at most [`MAX_TOOL_CALLS_PER_ANSWER`] per answer |
//! | [`Prices`], [`Price`], [`Cost`] | what model calls cost: a price table per model, checked when built; money in whole nano-dollars |
//! | [`RunId`] | which agent run a request belongs to, in its extensions (a per-run spend limit keys on it) |
//! | [`OuterRuns`] | the runs a sub-agent's run serves, beside its `RunId` (a per-run spend limit counts it against them too) |
//! | [`ScriptedModel`], [`Turn`] | a deterministic model: examples and tests with no network and no key |
//! | [`record`]: `RecordLayer`, `ReplayModel` | a model's traffic recorded to a file once, and replayed from it in tests |
//! | `OpenAiModel` (feature `openai`) | an OpenAI-compatible chat-completions endpoint, streamed over SSE |
//! | `AnthropicModel`, `CachePoint` (feature `anthropic`) | Anthropic's Messages API, streamed natively: tool use, extended thinking sent back signed, prompt-cache usage, every stop reason |
//! | `MAX_SSE_EVENT_BYTES` (either) | the bound on one event of their streams, which read by the same rules |
//!
//! ```
//! use toolstack::model::{Accumulator, ToolCallDelta};
//!
//! let mut acc = Accumulator::new();
//! acc.push(&ToolCallDelta::new(0).id("call_1").name("get_weather").arguments("{\"ci"))?;
//! acc.push(&ToolCallDelta::new(1).id("call_2").name("get_time").arguments("{}"))?;
//! acc.push(&ToolCallDelta::new(0).arguments("ty\":\"Paris\"}"))?;
//! let calls = acc.finish()?;
//! assert_eq!(calls[0].name, "get_weather");
//! assert_eq!(calls[0].arguments, r#"{"city":"Paris"}"#);
//! assert_eq!(calls[1].id, "call_2");
//! # Ok::<(), toolstack::model::AccumulateError>(())
//! ```

mod accumulate;
#[cfg(feature = "anthropic")]
mod anthropic;
mod delta;
mod message;
#[cfg(feature = "openai")]
mod openai;
mod price;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) mod provider;
pub mod record;
mod scripted;
mod service;

pub use self::accumulate::{AccumulateError, Accumulator, Pushed, MAX_TOOL_CALLS_PER_ANSWER};
#[cfg(feature = "anthropic")]
#[doc(hidden)]
pub use self::anthropic::fuzzing as anthropic_fuzzing;
#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub use self::anthropic::{AnthropicModel, AnthropicStream, CachePoint, ANTHROPIC_VERSION};
pub use self::delta::{
    ContextExceeded, FinishReason, ModelDelta, Reasoning, ReasoningDelta, ToolCall, ToolCallDelta,
    Usage,
};
pub use self::message::{
    ChatRequest, LoadedTools, Message, OuterRuns, OutputSchema, RunId, ToolChoice,
};
#[cfg(feature = "openai")]
#[doc(hidden)]
pub use self::openai::fuzzing;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use self::openai::{OpenAiModel, OpenAiStream};
#[doc(hidden)]
pub use self::price::thousands;
pub use self::price::{
    Cost, Price, PriceError, Prices, PricesBuilder, MAX_PRICE_PER_MILLION_TOKENS,
};
#[cfg(any(feature = "openai", feature = "anthropic"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "openai", feature = "anthropic"))))]
pub use self::provider::MAX_SSE_EVENT_BYTES;
pub use self::scripted::{ScriptedModel, ScriptedStream, Turn};
pub use self::service::ModelService;
