//! What a model streams back: [`ModelDelta`]s (text, reasoning, tool-call
//! fragments, a finish reason, usage), the complete [`ToolCall`] and
//! [`Reasoning`] blocks they fold into.

use serde::{Deserialize, Serialize};

/// One piece of a model's streamed answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelDelta {
    /// Text, as it is written.
    Text(String),
    /// A piece of the model's reasoning (Anthropic's extended thinking):
    /// its text as it is written, the signature that closes a block, or a
    /// block the provider withheld. Folded into [`Reasoning`] blocks
    /// ([`ReasoningDelta::fold_into`]), which the assistant message keeps
    /// so that the next request sends them back.
    Reasoning(ReasoningDelta),
    /// A fragment of a tool call.
    ToolCall(ToolCallDelta),
    /// Why the model stopped.
    Finish(FinishReason),
    /// Token usage, as the endpoint reported it (usually in the last
    /// chunk). An answer whose endpoint reports none has no `Usage` delta —
    /// which is not the same as a report of zero tokens.
    Usage(Usage),
    /// The model that answered, as the endpoint names it (OpenAI's
    /// `model` field; it may differ from the one asked for, as a dated
    /// snapshot does). Sent at most once, before the rest of the answer
    /// it belongs to; a trace records it as `gen_ai.response.model`.
    Model(String),
}

/// A piece of a model's reasoning, as a stream sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReasoningDelta {
    /// Reasoning text, appended to the open block.
    Text(String),
    /// The provider's signature of the open block, which closes it: the
    /// provider checks it when the block comes back.
    Signature(String),
    /// A whole block whose text the provider withheld (Anthropic's
    /// `redacted_thinking`), as opaque data to send back.
    Redacted(String),
}

impl ReasoningDelta {
    /// Folds this piece into `blocks`: text goes to the last block while it
    /// is unsigned (else it opens one), a signature closes the last
    /// unsigned block (or stands as a block of no text), a withheld block
    /// is a block of its own.
    ///
    /// ```
    /// use toolstack::model::{Reasoning, ReasoningDelta};
    ///
    /// let mut blocks = Vec::new();
    /// ReasoningDelta::Text("Let me ".into()).fold_into(&mut blocks);
    /// ReasoningDelta::Text("think.".into()).fold_into(&mut blocks);
    /// ReasoningDelta::Signature("sig".into()).fold_into(&mut blocks);
    /// ReasoningDelta::Text("Again.".into()).fold_into(&mut blocks);
    /// assert_eq!(blocks, [
    ///     Reasoning::Thinking { text: "Let me think.".into(), signature: Some("sig".into()) },
    ///     Reasoning::Thinking { text: "Again.".into(), signature: None },
    /// ]);
    /// ```
    pub fn fold_into(self, blocks: &mut Vec<Reasoning>) {
        let open = match blocks.last_mut() {
            Some(Reasoning::Thinking {
                text,
                signature: signature @ None,
            }) => Some((text, signature)),
            _ => None,
        };
        match (self, open) {
            (ReasoningDelta::Text(piece), Some((text, _))) => text.push_str(&piece),
            (ReasoningDelta::Text(piece), None) => blocks.push(Reasoning::Thinking {
                text: piece,
                signature: None,
            }),
            (ReasoningDelta::Signature(sig), Some((_, signature))) => *signature = Some(sig),
            (ReasoningDelta::Signature(sig), None) => blocks.push(Reasoning::Thinking {
                text: String::new(),
                signature: Some(sig),
            }),
            (ReasoningDelta::Redacted(data), _) => blocks.push(Reasoning::Redacted { data }),
        }
    }
}

/// One block of a model's reasoning, complete: kept in the assistant
/// [`Message`](crate::model::Message) it belongs to, and sent back with it
/// to a provider that asks for it (Anthropic requires the signed blocks of
/// a turn that called tools; the OpenAI-compatible client sends none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reasoning {
    /// Reasoning text, with the provider's signature when it sent one.
    Thinking {
        /// The text.
        text: String,
        /// The provider's signature of the text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A block whose text the provider withheld, as its opaque data.
    Redacted {
        /// The data, sent back as it came.
        data: String,
    },
}

/// A fragment of a tool call, as OpenAI-style streams send them in
/// `delta.tool_calls[i]`: the index says which call; the id and name come
/// (usually) only in the first fragment; the argument text is split
/// anywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// Which call of the response this fragment belongs to.
    pub index: u32,
    /// The call id, when this fragment carries it.
    pub id: Option<String>,
    /// The tool name, when this fragment carries it.
    pub name: Option<String>,
    /// A piece of the argument text (JSON, possibly cut anywhere).
    pub arguments: String,
}

impl ToolCallDelta {
    /// An empty fragment of call `index`.
    pub fn new(index: u32) -> Self {
        ToolCallDelta {
            index,
            ..Self::default()
        }
    }

    /// Sets the call id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the tool name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the argument fragment.
    pub fn arguments(mut self, fragment: impl Into<String>) -> Self {
        self.arguments = fragment.into();
        self
    }
}

/// A complete tool call requested by the model. Serializes in the OpenAI
/// shape (`{"id", "type": "function", "function": {"name", "arguments"}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "WireToolCall", from = "WireToolCall")]
pub struct ToolCall {
    /// The call id, echoed in the tool result.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The argument text exactly as the model wrote it.
    pub arguments: String,
}

/// Why a model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The answer is complete.
    Stop,
    /// The model asked for tool calls.
    ToolCalls,
    /// The token limit was reached: the answer is cut off.
    Length,
    /// Content was filtered: the answer is cut off or withheld (Anthropic's
    /// `refusal` too).
    ContentFilter,
    /// The provider paused a long turn (Anthropic's `pause_turn`): the
    /// answer so far is to be sent back as it is, for the model to go on.
    /// The agent asks again, as one more step, and the rest of the
    /// answer extends the same assistant message.
    Paused,
    /// Any other reason, as sent.
    #[serde(untagged)]
    Other(String),
}

/// Token usage of one model call, as reported. Where a total may lack a
/// report, it is an `Option<Usage>` ([`AgentDone::usage`]).
///
/// The cached, cache-creation and reasoning counts are *parts* of the
/// prompt and completion counts (as OpenAI reports them: `prompt_tokens_details.cached_tokens`,
/// `completion_tokens_details.reasoning_tokens`), not more tokens; zero
/// when the endpoint does not say. Anthropic reports its uncached input,
/// its cache reads and its cache writes apart: the prompt count is their
/// sum, as the OpenTelemetry GenAI conventions count input tokens.
/// Serialized, a zero part is left out, and a missing one reads as zero.
///
/// ```
/// use toolstack::model::Usage;
///
/// let usage = Usage::new(1_200, 300).cached(1_000).reasoning(120);
/// assert_eq!(usage.uncached_prompt_tokens(), 200);
/// assert_eq!(usage.total_tokens(), 1_500);
/// ```
///
/// [`AgentDone::usage`]: crate::agent::AgentDone::usage
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens in the prompt, the cached ones included.
    pub prompt_tokens: u64,
    /// Tokens generated, the reasoning ones included.
    pub completion_tokens: u64,
    /// Of the prompt's tokens, those the endpoint read from its prompt
    /// cache (usually billed at a lower price).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
    /// Of the generated tokens, those the model spent reasoning (not in
    /// the answer's text, billed as output).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Of the prompt's tokens, those the endpoint wrote to its prompt
    /// cache (Anthropic's `cache_creation_input_tokens`; usually billed at
    /// a higher price than uncached input). Not among the cached ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_tokens: u64,
}

impl Usage {
    /// Records the counts on `span` as the GenAI conventions name them:
    /// `gen_ai.usage.input_tokens` and `output_tokens`, and the parts
    /// reported (`cache_read.input_tokens`, `cache_creation.input_tokens`,
    /// `reasoning.output_tokens`; left out when zero). As `i64`:
    /// tracing-opentelemetry keeps an `i64` an integer but writes a `u64`
    /// as text, and the conventions say int. The span must declare the
    /// fields.
    pub fn record_on(&self, span: &tracing::Span) {
        let int = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
        span.record("gen_ai.usage.input_tokens", int(self.prompt_tokens));
        span.record("gen_ai.usage.output_tokens", int(self.completion_tokens));
        for (field, tokens) in [
            ("gen_ai.usage.cache_read.input_tokens", self.cached_tokens),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                self.cache_creation_tokens,
            ),
            (
                "gen_ai.usage.reasoning.output_tokens",
                self.reasoning_tokens,
            ),
        ] {
            if tokens > 0 {
                span.record(field, int(tokens));
            }
        }
    }

    /// `prompt_tokens` in, `completion_tokens` out, none of them cached or
    /// reasoning.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            cached_tokens: 0,
            reasoning_tokens: 0,
            cache_creation_tokens: 0,
        }
    }

    /// Says that `tokens` of the prompt's were read from the cache.
    pub fn cached(mut self, tokens: u64) -> Self {
        self.cached_tokens = tokens;
        self
    }

    /// Says that `tokens` of the prompt's were written to the cache.
    pub fn cache_creation(mut self, tokens: u64) -> Self {
        self.cache_creation_tokens = tokens;
        self
    }

    /// Says that `tokens` of the generated ones were reasoning.
    pub fn reasoning(mut self, tokens: u64) -> Self {
        self.reasoning_tokens = tokens;
        self
    }

    /// The prompt's tokens not read from the cache (an endpoint that says
    /// more were cached than were sent counts none).
    pub fn uncached_prompt_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_sub(self.cached_tokens)
    }

    /// Prompt and completion tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cache_creation_tokens = self
            .cache_creation_tokens
            .saturating_add(other.cache_creation_tokens);
    }
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunction,
}

#[derive(Serialize, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

fn function_type() -> String {
    "function".to_owned()
}

impl From<ToolCall> for WireToolCall {
    fn from(call: ToolCall) -> Self {
        WireToolCall {
            id: call.id,
            kind: function_type(),
            function: WireFunction {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }
}

impl From<WireToolCall> for ToolCall {
    fn from(wire: WireToolCall) -> Self {
        ToolCall {
            id: wire.id,
            name: wire.function.name,
            arguments: wire.function.arguments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn usage_json_without_the_parts_still_reads_and_zero_parts_are_left_out() {
        let old: Usage = serde_json::from_str(r#"{"prompt_tokens":3,"completion_tokens":4}"#)
            .expect("a checkpoint written before the parts existed");
        assert_eq!(old, Usage::new(3, 4));
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"prompt_tokens":3,"completion_tokens":4}"#
        );
        let new = Usage::new(3, 4).cached(2).reasoning(1);
        let text = serde_json::to_string(&new).unwrap();
        assert_eq!(
            text,
            r#"{"prompt_tokens":3,"completion_tokens":4,"cached_tokens":2,"reasoning_tokens":1}"#
        );
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), new);
        let mut sum = new;
        sum += new;
        assert_eq!(sum, Usage::new(6, 8).cached(4).reasoning(2));
        let written = Usage::new(10, 1).cached(2).cache_creation(5);
        let text = serde_json::to_string(&written).unwrap();
        assert_eq!(
            text,
            r#"{"prompt_tokens":10,"completion_tokens":1,"cached_tokens":2,"cache_creation_tokens":5}"#
        );
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), written);
        let mut sum = written;
        sum += written;
        assert_eq!(sum.cache_creation_tokens, 10);
    }
}

/// Why an endpoint refused a request for its length: the conversation is
/// longer than the model's context (OpenAI's `context_length_exceeded`,
/// Anthropic's "prompt is too long"). The source of such a refusal's
/// [`ToolError`](crate::ToolError): an agent with a compaction policy
/// compacts its history and asks once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextExceeded;

impl ContextExceeded {
    /// Whether `err` is such a refusal.
    pub fn is(err: &crate::ToolError) -> bool {
        std::error::Error::source(err).is_some_and(|source| source.is::<ContextExceeded>())
    }
}

impl std::fmt::Display for ContextExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the conversation is longer than the model's context")
    }
}

impl std::error::Error for ContextExceeded {}
