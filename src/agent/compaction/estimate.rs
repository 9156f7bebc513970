//! What a history costs in tokens, estimated.

use crate::model::{Message, Reasoning};

/// Tokens a message costs besides its text: its role and framing.
pub(super) const MESSAGE_TOKENS: u64 = 4;

/// What an image in a tool result is counted as: about what Anthropic
/// charges for the largest image it takes without scaling it down.
pub(super) const IMAGE_TOKENS: u64 = 1_600;

/// An estimate of the tokens `messages` cost a model: per message, the
/// bytes of its text, tool calls (id, name, arguments) and reasoning
/// (text, withheld data) divided by 4, rounded up, plus 4; and 1,600 per
/// image of a tool result. No tokenizer: about right for English and
/// code, high for most other text — which errs the safe way. The sum of
/// the estimates of two slices is the estimate of both.
///
/// ```
/// use toolstack::agent::compaction::estimate_tokens;
/// use toolstack::model::Message;
///
/// // 10 bytes: 3 tokens, and 4 for the message.
/// assert_eq!(estimate_tokens(&[Message::user("0123456789")]), 7);
/// ```
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

pub(super) fn message_tokens(message: &Message) -> u64 {
    let (bytes, images) = match message {
        Message::System { content } | Message::User { content } => (content.len(), 0),
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => {
            let calls: usize = tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum();
            let thought: usize = reasoning
                .iter()
                .map(|block| match block {
                    Reasoning::Thinking { text, .. } => text.len(),
                    Reasoning::Redacted { data } => data.len(),
                })
                .sum();
            (content.as_deref().map_or(0, str::len) + calls + thought, 0)
        }
        Message::Tool {
            tool_call_id,
            content,
            images,
            ..
        } => (tool_call_id.len() + content.len(), images.len()),
    };
    (bytes as u64).div_ceil(4) + MESSAGE_TOKENS + images as u64 * IMAGE_TOKENS
}
