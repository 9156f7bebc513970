//! [`AnthropicModel`]: Anthropic's Messages API as a model service,
//! streamed natively — tool calls, extended thinking with its signatures,
//! prompt-cache usage and every stop reason — with every failure a typed
//! [`ToolError`].
//!
//! It reads its stream by the rules the OpenAI-compatible client reads its
//! own (the shared `provider` module: the event bound, the order of the
//! answering model's name, a malformed event before the first delta
//! retryable, the refusals and `Retry-After`); what differs is the
//! request's shape and the events (`events.rs`).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::future::BoxFuture;
use serde_json::{json, Map, Value};
use tower_service::Service;

use super::provider;
use super::{ChatRequest, Message, ModelDelta, Reasoning, ToolChoice};
use crate::ToolError;

mod events;

use events::Events;

/// The API version this client speaks, sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The least thinking budget the API takes.
const MIN_THINKING_BUDGET: u32 = 1024;

/// The delta stream of an [`AnthropicModel`] answer.
pub type AnthropicStream = Pin<Box<dyn Stream<Item = Result<ModelDelta, ToolError>> + Send>>;

/// Where a prompt-cache breakpoint goes (`cache_control: {"type":
/// "ephemeral"}`): the API caches the prompt up to each one it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CachePoint {
    /// After the tool definitions: the last tool.
    Tools,
    /// After the system prompt: its last block.
    System,
    /// After the conversation so far: the last block of the last message,
    /// so that the next turn reads the whole history from the cache.
    Conversation,
}

/// A model behind Anthropic's Messages API (`POST /v1/messages`, `stream:
/// true`), its stream read natively.
///
/// | Anthropic | here |
/// |---|---|
/// | `text_delta` | [`ModelDelta::Text`] |
/// | `tool_use` block, its `input_json_delta`s | [`ModelDelta::ToolCall`] fragments, indexed by tool call (the first with the id and name), folded by the same [`Accumulator`](crate::model::Accumulator) |
/// | `thinking_delta`, `signature_delta`, `redacted_thinking` | [`ModelDelta::Reasoning`]: kept in the assistant message and sent back as `thinking` / `redacted_thinking` blocks before its text and tool calls |
/// | `message_start`'s `model` | [`ModelDelta::Model`] |
/// | `usage` of `message_start` and `message_delta` | one [`ModelDelta::Usage`]: prompt = `input_tokens` + cache reads + cache writes, [`cached_tokens`](crate::model::Usage::cached_tokens) the reads, [`cache_creation_tokens`](crate::model::Usage::cache_creation_tokens) the writes |
/// | `end_turn`, `stop_sequence` / `tool_use` / `max_tokens` / `refusal` / `pause_turn` | [`FinishReason`](crate::model::FinishReason) `Stop` / `ToolCalls` / `Length` / `ContentFilter` / `Paused` |
///
/// The request: system messages as the `system` blocks, each message as
/// content blocks (consecutive tool results in one user message, as
/// `tool_result` blocks with `is_error` and the tool's images), the
/// toolbox's tools with their input schemas, `max_tokens` (the API
/// requires it: the client's [`max_tokens`](Self::max_tokens), 4096 unless
/// set, or the request's [`max_tokens`](ChatRequest::max_tokens) when
/// lower), and `thinking` when [asked for](Self::thinking) — its budget
/// lowered below a request's lower `max_tokens`, and left out when that
/// leaves less than the API's least budget (1024 tokens).
///
/// Every failure is a typed [`ToolError`]:
///
/// | what happened | kind |
/// |---|---|
/// | 429, `rate_limit_error` | rate limited |
/// | 529 `overloaded_error`, 500 `api_error`, other 5xx, the endpoint unreachable | unavailable |
/// | 401 `authentication_error`, 403 `permission_error` | denied |
/// | 400 `invalid_request_error`, 404, 413, other statuses | failed |
/// | an `error` event mid-stream | by its error type, as above (an overload stays retryable) |
/// | the connection breaks, or the stream ends without `message_stop` | unavailable |
/// | an event that is not JSON before any delta / after one | unavailable / failed |
/// | an event over [`MAX_SSE_EVENT_BYTES`](crate::model::MAX_SSE_EVENT_BYTES), more than [`MAX_TOOL_CALLS_PER_ANSWER`](crate::model::MAX_TOOL_CALLS_PER_ANSWER) tool calls, a delta of a block that is not open | failed |
///
/// A `retry-after-ms` or `Retry-After` header is kept as the error's
/// [`retry_after`](ToolError::retry_after), whatever the status.
///
/// ```
/// use toolstack::model::{AnthropicModel, CachePoint};
///
/// let model = AnthropicModel::new("claude-sonnet-4-5")
///     .api_key("sk-ant-…")
///     .max_tokens(16_000)
///     .thinking(8_000)
///     .cache(&[CachePoint::Tools, CachePoint::System]);
/// # let _ = model;
/// ```
#[derive(Debug, Clone)]
pub struct AnthropicModel {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    max_tokens: u32,
    thinking: Option<u32>,
    cache: Vec<CachePoint>,
}

impl AnthropicModel {
    /// A client of `https://api.anthropic.com` for `model`.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicModel {
            client: reqwest::Client::new(),
            base_url: "https://api.anthropic.com".to_owned(),
            api_key: None,
            model: model.into(),
            max_tokens: 4096,
            thinking: None,
            cache: Vec::new(),
        }
    }

    /// Sends the requests to `base_url` (the API's root, without `/v1`: a
    /// proxy, a gateway, a test server).
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Uses `client` for the requests: its timeouts, proxy, or extra root
    /// certificates.
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// Sends `api_key` as `x-api-key`.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// The most tokens an answer may take, its thinking included (4096
    /// unless set).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Turns extended thinking on, with `budget_tokens` for it (at least
    /// 1024, and below [`max_tokens`](Self::max_tokens): the API refuses
    /// other budgets as an invalid request).
    pub fn thinking(mut self, budget_tokens: u32) -> Self {
        self.thinking = Some(budget_tokens);
        self
    }

    /// Puts prompt-cache breakpoints at `points` (at most four count; one
    /// each is all these points take).
    pub fn cache(mut self, points: &[CachePoint]) -> Self {
        self.cache = points.to_vec();
        self
    }

    /// From `ANTHROPIC_API_KEY` and `ANTHROPIC_MODEL`, with
    /// `ANTHROPIC_BASE_URL` when it is set; `None` unless the key and the
    /// model are.
    pub fn from_env() -> Option<Self> {
        let key = std::env::var("ANTHROPIC_API_KEY").ok()?;
        let model = std::env::var("ANTHROPIC_MODEL").ok()?;
        let client = AnthropicModel::new(model).api_key(key);
        Some(match std::env::var("ANTHROPIC_BASE_URL") {
            Ok(base) => client.base_url(base),
            Err(_) => client,
        })
    }

    fn body(&self, request: &ChatRequest) -> Value {
        let cached = |point| self.cache.contains(&point);
        let (mut system, mut messages) = conversation(&request.messages);
        if cached(CachePoint::System) {
            mark_last(&mut system);
        }
        if cached(CachePoint::Conversation) {
            if let Some(Value::Array(blocks)) =
                messages.last_mut().and_then(|m| m.get_mut("content"))
            {
                mark_last(blocks);
            }
        }
        let max_tokens = request
            .max_tokens
            .map_or(self.max_tokens, |asked| asked.min(self.max_tokens));
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.model),
            "max_tokens": max_tokens,
            "messages": messages,
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = system.into();
        }
        // The API refuses a budget not below `max_tokens`, or below its
        // least: a request's lower `max_tokens` (a spend limit's) lowers
        // the budget, or leaves thinking out, rather than fail the call.
        let budget = match self.thinking {
            Some(budget) if max_tokens < self.max_tokens && budget >= max_tokens => {
                Some(max_tokens.saturating_sub(1)).filter(|&b| b >= MIN_THINKING_BUDGET)
            }
            budget => budget,
        };
        if let Some(budget) = budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    let mut def = Map::new();
                    def.insert("name".into(), tool.name().into());
                    if let Some(description) = tool.description() {
                        def.insert("description".into(), description.into());
                    }
                    def.insert("input_schema".into(), tool.input_schema().clone());
                    Value::Object(def)
                })
                .collect();
            if cached(CachePoint::Tools) {
                mark_last(&mut tools);
            }
            body["tools"] = tools.into();
            match &request.tool_choice {
                ToolChoice::Auto => {}
                ToolChoice::None => body["tool_choice"] = json!({"type": "none"}),
                ToolChoice::Required => body["tool_choice"] = json!({"type": "any"}),
                ToolChoice::Tool(name) => {
                    body["tool_choice"] = json!({"type": "tool", "name": &**name})
                }
            }
        }
        if let Some(output) = &request.output {
            body["output_config"] = json!({
                "format": {"type": "json_schema", "schema": crate::strict_schema(&output.schema)},
            });
        }
        body
    }
}

/// A cache breakpoint on the last of `blocks`.
fn mark_last(blocks: &mut [Value]) {
    if let Some(Value::Object(block)) = blocks.last_mut() {
        block.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
}

/// The conversation as the `system` blocks and the `messages`, each a role
/// with content blocks: a message of the role the last one had joins it
/// (so the tool results of one step are one user message, as the API
/// wants them).
fn conversation(history: &[Message]) -> (Vec<Value>, Vec<Value>) {
    let mut system = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    let mut push = |role: &str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        if let Some(last) = messages.last_mut().filter(|m| m["role"] == role) {
            if let Some(content) = last["content"].as_array_mut() {
                content.extend(blocks);
                return;
            }
        }
        messages.push(json!({"role": role, "content": blocks}));
    };
    for message in history {
        match message {
            Message::System { content } => system.push(text_block(content)),
            Message::User { content } => push("user", vec![text_block(content)]),
            Message::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                let mut blocks: Vec<Value> = reasoning.iter().filter_map(thinking_block).collect();
                blocks.extend(content.as_deref().filter(|t| !t.is_empty()).map(text_block));
                blocks.extend(tool_calls.iter().map(|call| {
                    // The API takes the input as an object: arguments the
                    // model wrote broken go as `{}`, and the tool's result
                    // says what was wrong.
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
                }));
                push("assistant", blocks);
            }
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                images,
            } => {
                let mut result = json!({"type": "tool_result", "tool_use_id": tool_call_id});
                result["content"] = if images.is_empty() {
                    content.as_str().into()
                } else {
                    let text = (!content.is_empty()).then(|| text_block(content));
                    let images = images.iter().map(|image| {
                        json!({"type": "image", "source": {
                            "type": "base64", "media_type": image.mime_type, "data": image.data,
                        }})
                    });
                    text.into_iter().chain(images).collect::<Vec<_>>().into()
                };
                if *is_error {
                    result["is_error"] = true.into();
                }
                push("user", vec![result]);
            }
        }
    }
    (system, messages)
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A reasoning block as the API takes it back; a block with no signature
/// (another provider's, or cut off) is not one the API would accept.
fn thinking_block(block: &Reasoning) -> Option<Value> {
    match block {
        Reasoning::Thinking {
            text,
            signature: Some(signature),
        } => Some(json!({"type": "thinking", "thinking": text, "signature": signature})),
        Reasoning::Thinking {
            signature: None, ..
        } => None,
        Reasoning::Redacted { data } => Some(json!({"type": "redacted_thinking", "data": data})),
    }
}

impl Service<ChatRequest> for AnthropicModel {
    type Response = AnthropicStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<AnthropicStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let body = self.body(&request);
        let mut post = self
            .client
            .post(format!("{}/v1/messages", self.base_url))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("anthropic-version", ANTHROPIC_VERSION);
        if let Some(key) = &self.api_key {
            post = post.header("x-api-key", key);
        }
        Box::pin(async move {
            let deltas = provider::send(post, &body, Events::default()).await?;
            Ok(Box::pin(deltas) as AnthropicStream)
        })
    }
}

/// Hooks for the fuzz targets in `fuzz/`: empty unless built by cargo-fuzz,
/// which sets `--cfg fuzzing`. Not part of the API.
#[doc(hidden)]
#[allow(unexpected_cfgs)]
pub mod fuzzing {
    /// Parses `pieces`, the body as the transport split it, as
    /// [`AnthropicModel`](super::AnthropicModel) parses an answer: every
    /// delta and the error that ends the stream, if any.
    #[cfg(fuzzing)]
    pub fn deltas_from_sse(
        pieces: Vec<Vec<u8>>,
    ) -> Vec<Result<super::ModelDelta, super::ToolError>> {
        super::provider::parse_pieces(pieces, super::Events::default())
    }
}

#[cfg(test)]
mod tests;
