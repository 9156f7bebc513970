//! The Messages stream dialect: `message_start`, the content blocks (text,
//! `tool_use`, `thinking`, `redacted_thinking`) opened, streamed and
//! stopped one at a time, `message_delta` with the stop reason and the
//! final usage, `message_stop`; `ping` and unknown events are skipped, an
//! `error` event is typed.

use eventsource_stream::Event;
use serde_json::Value;

use crate::model::provider::refusal::stream_error;
use crate::model::provider::sse::{Dialect, Read, Unread};
use crate::model::provider::tool_call_index;
use crate::model::{FinishReason, ModelDelta, ReasoningDelta, ToolCallDelta, Usage};
use crate::ToolError;

/// What the stream has said so far: the block being streamed (the API
/// streams one at a time, so one is all there is to hold), how many tool
/// calls were opened, the usage `message_start` reported.
#[derive(Debug, Default)]
pub(super) struct Events {
    open: Option<(u64, Block)>,
    tool_calls: u64,
    started: Counts,
}

#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    Tool(u32),
    Thinking,
    /// A block this client does not read (a server tool's use or result,
    /// a withheld reasoning block, whole at its start).
    Skipped,
}

/// Anthropic's token counts: uncached input, cache reads and writes,
/// output.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    output: u64,
}

impl Counts {
    /// The counts `usage` gives, the others kept (`message_delta`'s are
    /// cumulative, and may leave the input out).
    fn updated(mut self, usage: &Value) -> Counts {
        let count = |name: &str| usage.get(name).and_then(Value::as_u64);
        self.input = count("input_tokens").unwrap_or(self.input);
        self.cache_read = count("cache_read_input_tokens").unwrap_or(self.cache_read);
        self.cache_creation = count("cache_creation_input_tokens").unwrap_or(self.cache_creation);
        self.output = count("output_tokens").unwrap_or(self.output);
        self
    }

    /// As [`Usage`]: the prompt is the input, the cache reads and the
    /// cache writes together.
    fn usage(self) -> Usage {
        let prompt = self
            .input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_creation);
        Usage::new(prompt, self.output)
            .cached(self.cache_read)
            .cache_creation(self.cache_creation)
    }
}

impl Dialect for Events {
    const END: &'static str = "message_stop";

    fn read(&mut self, event: &Event) -> Result<Read, Unread> {
        let data: Value = serde_json::from_str(&event.data).map_err(Unread::Malformed)?;
        let text = |pointer: &str| data.pointer(pointer).and_then(Value::as_str);
        let delta = |d: ModelDelta| Ok(Read::deltas(vec![d]));
        match data.get("type").and_then(Value::as_str).unwrap_or_default() {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.started = self.started.updated(usage);
                }
                Ok(Read {
                    model: text("/message/model").map(str::to_owned),
                    ..Read::default()
                })
            }
            "content_block_start" => {
                let index = block_index(&data)?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let field = |name: &str| {
                    block
                        .get(name)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                };
                let (kind, deltas) = match field("type").unwrap_or_default() {
                    "text" => (
                        Block::Text,
                        field("text").map(|t| ModelDelta::Text(t.to_owned())),
                    ),
                    "tool_use" => {
                        let call = tool_call_index(self.tool_calls)?;
                        self.tool_calls += 1;
                        let mut start = ToolCallDelta::new(call);
                        start.id = field("id").map(str::to_owned);
                        start.name = field("name").map(str::to_owned);
                        (Block::Tool(call), Some(ModelDelta::ToolCall(start)))
                    }
                    "thinking" => (
                        Block::Thinking,
                        field("thinking")
                            .map(|t| ModelDelta::Reasoning(ReasoningDelta::Text(t.to_owned()))),
                    ),
                    "redacted_thinking" => (
                        Block::Skipped,
                        field("data")
                            .map(|d| ModelDelta::Reasoning(ReasoningDelta::Redacted(d.to_owned()))),
                    ),
                    _ => (Block::Skipped, None),
                };
                self.open = Some((index, kind));
                Ok(Read::deltas(deltas.into_iter().collect()))
            }
            "content_block_delta" => {
                let index = block_index(&data)?;
                let block = match self.open {
                    Some((open, block)) if open == index => block,
                    _ => {
                        return Err(ToolError::failed(format!(
                            "the model sent a delta of content block {index}, which is not open"
                        ))
                        .into())
                    }
                };
                let piece = |name: &str| text(&format!("/delta/{name}")).unwrap_or_default();
                match (text("/delta/type").unwrap_or_default(), block) {
                    ("text_delta", Block::Text) => {
                        delta(ModelDelta::Text(piece("text").to_owned()))
                    }
                    ("input_json_delta", Block::Tool(call)) => delta(ModelDelta::ToolCall(
                        ToolCallDelta::new(call).arguments(piece("partial_json")),
                    )),
                    ("thinking_delta", Block::Thinking) => delta(ModelDelta::Reasoning(
                        ReasoningDelta::Text(piece("thinking").to_owned()),
                    )),
                    ("signature_delta", Block::Thinking) => delta(ModelDelta::Reasoning(
                        ReasoningDelta::Signature(piece("signature").to_owned()),
                    )),
                    (_, Block::Skipped) => Ok(Read::default()),
                    // A citation, or a delta added after this was written.
                    (
                        kind @ ("text_delta" | "input_json_delta" | "thinking_delta"
                        | "signature_delta"),
                        _,
                    ) => Err(ToolError::failed(format!(
                        "the model sent a {kind} in a content block of another type"
                    ))
                    .into()),
                    _ => Ok(Read::default()),
                }
            }
            "content_block_stop" => {
                self.open = None;
                Ok(Read::default())
            }
            "message_delta" => {
                let mut deltas = Vec::with_capacity(2);
                if let Some(reason) = text("/delta/stop_reason") {
                    deltas.push(ModelDelta::Finish(finish_reason(reason)));
                }
                if let Some(usage) = data.get("usage") {
                    deltas.push(ModelDelta::Usage(self.started.updated(usage).usage()));
                }
                Ok(Read::deltas(deltas))
            }
            "message_stop" => Ok(Read::end()),
            "error" => Err(stream_error(data.get("error").unwrap_or(&data)).into()),
            // `ping`, and events added after this was written.
            _ => Ok(Read::default()),
        }
    }
}

/// A content block's `index`, which every block event must carry.
fn block_index(data: &Value) -> Result<u64, ToolError> {
    data.get("index").and_then(Value::as_u64).ok_or_else(|| {
        ToolError::failed(format!(
            "the model sent a content-block event without a non-negative integer index: {}",
            data.get("index").unwrap_or(&Value::Null)
        ))
    })
}

/// A stop reason as a [`FinishReason`]: `end_turn` and `stop_sequence`
/// stop, `tool_use` asks for the calls, `max_tokens` and
/// `model_context_window_exceeded` cut the answer off, `refusal` withholds
/// it, `pause_turn` pauses it; any other is kept as sent (bounded).
fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        "pause_turn" => FinishReason::Paused,
        other => FinishReason::Other(other.chars().take(64).collect()),
    }
}
