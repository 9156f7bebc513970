//! The chat-completions dialect: one `chat.completion.chunk` as model
//! deltas, its tool-call indices bounded; `[DONE]` ends the answer.

use eventsource_stream::Event;
use serde_json::Value;

use crate::model::provider::refusal::stream_error;
use crate::model::provider::sse::{Dialect, Read, Unread};
use crate::model::provider::tool_call_index;
use crate::model::{FinishReason, ModelDelta, ToolCallDelta, Usage};
use crate::ToolError;

/// The chat-completions stream format; it holds no state between chunks.
#[derive(Debug, Default)]
pub(super) struct Chunks;

impl Dialect for Chunks {
    const END: &'static str = "[DONE]";

    fn read(&mut self, event: &Event) -> Result<Read, Unread> {
        if event.data.trim() == "[DONE]" {
            return Ok(Read::end());
        }
        let chunk: Value = serde_json::from_str(&event.data).map_err(Unread::Malformed)?;
        if let Some(error) = chunk.get("error") {
            return Err(stream_error(error).into());
        }
        let mut read = Read::deltas(deltas_of(&chunk)?);
        read.model = chunk
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(read)
    }
}

/// The deltas of one `chat.completion.chunk`; a tool-call index out of
/// bounds refuses the chunk.
fn deltas_of(chunk: &Value) -> Result<Vec<ModelDelta>, ToolError> {
    let mut out = Vec::new();
    if let Some(choice) = chunk.pointer("/choices/0") {
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            if !text.is_empty() {
                out.push(ModelDelta::Text(text.to_owned()));
            }
        }
        if let Some(calls) = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
        {
            for call in calls {
                let mut delta = ToolCallDelta::new(index_of(call)?);
                delta.id = call.get("id").and_then(Value::as_str).map(str::to_owned);
                delta.name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                delta.arguments = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                out.push(ModelDelta::ToolCall(delta));
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            let reason = serde_json::from_value(Value::String(reason.to_owned()))
                .unwrap_or_else(|_| FinishReason::Other(reason.to_owned()));
            out.push(ModelDelta::Finish(reason));
        }
    }
    if let Some(usage) = chunk.get("usage").and_then(usage_of) {
        out.push(ModelDelta::Usage(usage));
    }
    Ok(out)
}

/// A chunk's `usage`: the two counts it must have, and the cached and
/// reasoning parts when its details give them. Usage without the counts
/// (or with counts that are not non-negative integers) is no report.
fn usage_of(usage: &Value) -> Option<Usage> {
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    let reported = Usage::new(count("/prompt_tokens")?, count("/completion_tokens")?)
        .cached(count("/prompt_tokens_details/cached_tokens").unwrap_or(0))
        .reasoning(count("/completion_tokens_details/reasoning_tokens").unwrap_or(0));
    Some(reported)
}

/// A fragment's `index`, read as the full JSON integer and bounded. A
/// missing index is 0: a server streaming one call may leave it out.
fn index_of(call: &Value) -> Result<u32, ToolError> {
    let Some(index) = call.get("index") else {
        return Ok(0);
    };
    match index.as_u64() {
        Some(i) => tool_call_index(i),
        None => Err(ToolError::failed(format!(
            "the model sent a tool-call index that is not a non-negative integer: {index}"
        ))),
    }
}
