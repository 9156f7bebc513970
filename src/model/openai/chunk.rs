//! One `chat.completion.chunk` as model deltas, its tool-call indices
//! bounded.

use serde_json::Value;

use crate::model::{
    AccumulateError, FinishReason, ModelDelta, ToolCallDelta, Usage, MAX_TOOL_CALLS_PER_ANSWER,
};
use crate::ToolError;

/// The deltas of one `chat.completion.chunk`; a tool-call index out of
/// bounds refuses the chunk.
pub(super) fn deltas_of(chunk: &Value) -> Result<Vec<ModelDelta>, ToolError> {
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
                let mut delta = ToolCallDelta::new(tool_call_index(call)?);
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

/// A fragment's `index`, read as the full JSON integer and checked against
/// the bound before it becomes a `u32` (so no value wraps into range). A
/// missing index is 0: a server streaming one call may leave it out.
pub(super) fn tool_call_index(call: &Value) -> Result<u32, ToolError> {
    let Some(index) = call.get("index") else {
        return Ok(0);
    };
    let too_many = |index: u64| {
        let err = AccumulateError::TooManyCalls {
            index,
            max: MAX_TOOL_CALLS_PER_ANSWER,
        };
        ToolError::failed(format!("the model's answer was refused: {err}")).with_source(err)
    };
    match index.as_u64() {
        Some(i) if i < MAX_TOOL_CALLS_PER_ANSWER as u64 => Ok(i as u32),
        Some(i) => Err(too_many(i)),
        None => Err(ToolError::failed(format!(
            "the model sent a tool-call index that is not a non-negative integer: {index}"
        ))),
    }
}
