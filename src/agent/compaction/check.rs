//! Whether a history pairs every call with its result, and whether a compaction kept it so.

use std::collections::HashMap;

use crate::model::{Message, ToolCall};

use super::plan::latest_user;
use super::CompactionError;

/// Checks that `messages` pairs every call with its result: each tool call
/// of an assistant message has exactly one result among the tool results
/// right after it (call ids unique in the message), and each tool result
/// answers a call of the assistant message before it. The error names
/// what is wrong, by message index and call id.
///
/// ```
/// use toolstack::agent::compaction::check;
/// use toolstack::model::{Message, ToolCall};
///
/// let call = ToolCall { id: "call_1".into(), name: "read".into(), arguments: "{}".into() };
/// let answered = [Message::user("read"), Message::assistant_calls(vec![call.clone()]), Message::tool("call_1", "text")];
/// assert!(check(&answered).is_ok());
/// let unanswered = [Message::user("read"), Message::assistant_calls(vec![call])];
/// assert_eq!(check(&unanswered).unwrap_err(), "message 1: call `call_1` (read) has no result");
/// ```
pub fn check(messages: &[Message]) -> Result<(), String> {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } => {
                let mut open: Vec<&ToolCall> = Vec::with_capacity(tool_calls.len());
                for call in tool_calls {
                    if open.iter().any(|c| c.id == call.id) {
                        return Err(format!("message {i}: call `{}` is made twice", call.id));
                    }
                    open.push(call);
                }
                let mut j = i + 1;
                while let Some(Message::Tool { tool_call_id, .. }) = messages.get(j) {
                    match open.iter().position(|c| c.id == *tool_call_id) {
                        Some(at) => {
                            open.remove(at);
                        }
                        None if tool_calls.iter().any(|c| c.id == *tool_call_id) => {
                            return Err(format!(
                                "message {j}: a second result of call `{tool_call_id}`"
                            ));
                        }
                        None => {
                            return Err(format!(
                                "message {j}: the result of call `{tool_call_id}` answers no call of the assistant message before it (message {i})"
                            ));
                        }
                    }
                    j += 1;
                }
                if let Some(call) = open.first() {
                    let later = messages[j..].iter().position(
                        |m| matches!(m, Message::Tool { tool_call_id, .. } if *tool_call_id == call.id),
                    );
                    return Err(match later {
                        Some(k) => format!(
                            "message {}: the result of call `{}` is not right after the assistant message that made it (message {i})",
                            j + k,
                            call.id
                        ),
                        None => format!("message {i}: call `{}` ({}) has no result", call.id, call.name),
                    });
                }
                i = j;
            }
            Message::Tool { tool_call_id, .. } => {
                return Err(format!(
                    "message {i}: the result of call `{tool_call_id}` follows no assistant message that made the call"
                ));
            }
            Message::System { .. } | Message::User { .. } => i += 1,
        }
    }
    Ok(())
}

/// Checks a compaction of `before` into `after`: `after` passes [`check`]
/// ([`CompactionError::Broken`] otherwise), keeps the latest user message
/// ([`CompactionError::WouldDropLatestUserMessage`]) — a compaction's own
/// note is not one —, keeps every system message, in order, and keeps
/// each assistant message's reasoning with it, unchanged
/// ([`CompactionError::Broken`]). What an agent runs on a strategy's
/// result before it uses it.
pub fn check_compaction(before: &[Message], after: &[Message]) -> Result<(), CompactionError> {
    check(after).map_err(CompactionError::Broken)?;
    if let Some(latest) = latest_user(before) {
        if !after.contains(&before[latest]) {
            return Err(CompactionError::WouldDropLatestUserMessage);
        }
    }
    let mut kept = after.iter().filter(|m| matches!(m, Message::System { .. }));
    let system = before
        .iter()
        .filter(|m| matches!(m, Message::System { .. }));
    for message in system {
        if !kept.any(|m| m == message) {
            return Err(CompactionError::Broken(
                "a system message was dropped or moved".to_owned(),
            ));
        }
    }
    // An answer that called tools is known by its first call's id; one
    // that called none and kept reasoning must be one of `before`'s.
    let by_call: HashMap<&str, &Message> = before
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some((tool_calls.first()?.id.as_str(), m)),
            _ => None,
        })
        .collect();
    for message in after {
        let Message::Assistant {
            tool_calls,
            reasoning,
            ..
        } = message
        else {
            continue;
        };
        let origin = match tool_calls.first() {
            Some(call) => by_call.get(call.id.as_str()).copied(),
            None if reasoning.is_empty() => continue,
            None => before.iter().find(|m| *m == message),
        };
        match origin {
            Some(Message::Assistant {
                reasoning: original,
                ..
            }) if original != reasoning => {
                return Err(CompactionError::Broken(
                    "the reasoning of an assistant message was changed or split from it".to_owned(),
                ));
            }
            None if !reasoning.is_empty() => {
                return Err(CompactionError::Broken(
                    "reasoning blocks were moved to a message they did not come with".to_owned(),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
