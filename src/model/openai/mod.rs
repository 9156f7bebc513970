//! [`OpenAiModel`]: an OpenAI-compatible chat-completions endpoint as a
//! model service, its answer streamed over server-sent events and every
//! failure a typed [`ToolError`].
//!
//! What the endpoint sends is input: it is bounded where it is read (one
//! event at most [`MAX_SSE_EVENT_BYTES`](super::MAX_SSE_EVENT_BYTES), a tool-call index below
//! [`MAX_TOOL_CALLS_PER_ANSWER`](crate::model::MAX_TOOL_CALLS_PER_ANSWER)) and never trusted to be well-formed.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tower_service::Service;

use super::{ChatRequest, Message, ModelDelta, ToolChoice};
use crate::ToolError;

use super::provider;

mod chunk;

use chunk::Chunks;

/// The delta stream of an [`OpenAiModel`] answer.
pub type OpenAiStream = Pin<Box<dyn Stream<Item = Result<ModelDelta, ToolError>> + Send>>;

/// A model behind an OpenAI-compatible chat-completions endpoint, streamed
/// over server-sent events (`stream: true`, usage included).
///
/// Every failure is a typed [`ToolError`]:
///
/// | what happened | kind |
/// |---|---|
/// | 429, or a body whose error type is a rate limit | rate limited |
/// | 401, 403 | denied |
/// | 5xx, the endpoint unreachable | unavailable |
/// | other statuses | failed |
/// | the connection breaks mid-answer, or the stream ends without `[DONE]` | unavailable (the transport error kept as the source) |
/// | a chunk that is not JSON (or not UTF-8) before any delta | unavailable: nothing reached the consumer, so asking again is safe |
/// | the same after a delta | failed |
/// | an error chunk | by its error type, as a status's body is (`rate_limit_error` rate limited, `server_error` unavailable…), else failed |
/// | an event over [`MAX_SSE_EVENT_BYTES`](super::MAX_SSE_EVENT_BYTES), a tool-call index of [`MAX_TOOL_CALLS_PER_ANSWER`](crate::model::MAX_TOOL_CALLS_PER_ANSWER) or more | failed |
///
/// Whatever the status, a `retry-after-ms` header (milliseconds) or a
/// `Retry-After` header (seconds, fractional seconds, or an HTTP-date,
/// counted from the response's `Date`) is kept as the error's
/// [`retry_after`](ToolError::retry_after), which the retry layer honours.
///
/// A request's [`model`](ChatRequest::model), when set, is asked for
/// instead of the model the client was made with. Its
/// [`max_tokens`](ChatRequest::max_tokens) and the client's own
/// [`max_tokens`](Self::max_tokens), the smaller when both are set, are
/// sent as `max_completion_tokens` (or `max_tokens`, see
/// [`legacy_max_tokens`](Self::legacy_max_tokens)); neither set, none is
/// sent and the endpoint's default applies.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    max_tokens: Option<u32>,
    legacy_max_tokens: bool,
}

impl OpenAiModel {
    /// A client for `base_url` (e.g. `http://127.0.0.1:11434/v1`) and `model`.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiModel {
            client: reqwest::Client::new(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            model: model.into(),
            max_tokens: None,
            legacy_max_tokens: false,
        }
    }

    /// Uses `client` for the requests: its timeouts, proxy, or extra root
    /// certificates (say, a private endpoint's CA with feature
    /// `openai-tls`).
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// Sends `api_key` as a bearer token.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// The most output tokens an answer may have, reasoning included
    /// (none unless set: the endpoint's default); a request asking for
    /// fewer gets fewer.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sends the output limit as `max_tokens`, the field older
    /// OpenAI-compatible servers read, instead of `max_completion_tokens`
    /// (OpenAI's, which its reasoning models require). Ollama and LM Studio
    /// read only `max_tokens` and ignore the other: without this, a limit
    /// sent to them — a spend limit's among them — does not stop the answer.
    pub fn legacy_max_tokens(mut self) -> Self {
        self.legacy_max_tokens = true;
        self
    }

    /// From `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `OPENAI_MODEL`, when
    /// the base URL and the model are set.
    pub fn from_env() -> Option<Self> {
        let base = std::env::var("OPENAI_BASE_URL").ok()?;
        let model = std::env::var("OPENAI_MODEL").ok()?;
        let client = OpenAiModel::new(base, model);
        Some(match std::env::var("OPENAI_API_KEY") {
            Ok(key) => client.api_key(key),
            Err(_) => client,
        })
    }

    fn body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.model),
            "messages": chat_messages(&request.messages),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        let max_tokens = match (request.max_tokens, self.max_tokens) {
            (Some(asked), Some(own)) => Some(asked.min(own)),
            (asked, own) => asked.or(own),
        };
        if let Some(max_tokens) = max_tokens {
            let field = if self.legacy_max_tokens {
                "max_tokens"
            } else {
                "max_completion_tokens"
            };
            body[field] = max_tokens.into();
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| t.to_openai_function(false))
                .collect();
            body["tools"] = tools.into();
            match &request.tool_choice {
                ToolChoice::Auto => {}
                ToolChoice::None => body["tool_choice"] = "none".into(),
                ToolChoice::Required => body["tool_choice"] = "required".into(),
                ToolChoice::Tool(name) => {
                    body["tool_choice"] = json!({"type": "function", "function": {"name": &**name}})
                }
            }
        }
        if let Some(output) = &request.output {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {
                    "name": &*output.name,
                    "schema": crate::strict_schema(&output.schema),
                    "strict": true,
                },
            });
        }
        body
    }
}

/// The conversation in the chat-completions shape, without what only other
/// providers read (an answer's reasoning blocks, a tool result's error flag
/// and images), which a strict endpoint would refuse.
fn chat_messages(messages: &[Message]) -> Value {
    let mut value = serde_json::to_value(messages).unwrap_or_default();
    for message in value.as_array_mut().into_iter().flatten() {
        if let Some(message) = message.as_object_mut() {
            for other in ["reasoning", "is_error", "images"] {
                message.remove(other);
            }
        }
    }
    value
}

impl Service<ChatRequest> for OpenAiModel {
    type Response = OpenAiStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<OpenAiStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let body = self.body(&request);
        let mut post = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        if let Some(key) = &self.api_key {
            post = post.bearer_auth(key);
        }
        Box::pin(async move {
            let deltas = provider::send(post, &body, Chunks).await?;
            Ok(Box::pin(deltas) as OpenAiStream)
        })
    }
}

/// Hooks for the fuzz targets in `fuzz/`: empty unless built by cargo-fuzz,
/// which sets `--cfg fuzzing`. Not part of the API.
#[doc(hidden)]
#[allow(unexpected_cfgs)]
pub mod fuzzing {
    /// Parses `pieces`, the body as the transport split it, as
    /// [`OpenAiModel`](super::OpenAiModel) parses an answer: every delta
    /// and the error that ends the stream, if any.
    #[cfg(fuzzing)]
    pub fn deltas_from_sse(
        pieces: Vec<Vec<u8>>,
    ) -> Vec<Result<super::ModelDelta, super::ToolError>> {
        super::provider::parse_pieces(pieces, super::Chunks)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::time::Duration;

    use super::*;
    use crate::model::Accumulator;

    /// A recorded answer: text with multi-byte characters, then two
    /// parallel calls whose arguments hold escapes and non-ASCII text.
    fn recorded(line_end: &str) -> Vec<u8> {
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"content": "Grüße, "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "漢字 🦀"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"caf"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "note", "arguments": "{\"t\":\"a\\\"b"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "é ☕\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "function": {"arguments": "\\n\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}),
        ];
        let mut body = String::new();
        for chunk in chunks {
            body.push_str(&format!("data: {chunk}{line_end}{line_end}"));
        }
        body.push_str(&format!("data: [DONE]{line_end}{line_end}"));
        body.into_bytes()
    }

    #[test]
    fn the_tool_choice_and_the_typed_answer_are_encoded_as_openai_reads_them() {
        use crate::model::{OutputSchema, ToolChoice};
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Forecast {
            city: String,
            days: Option<u32>,
        }
        let model = OpenAiModel::new("http://127.0.0.1:1", "gpt-test");
        let tools = vec![
            crate::ToolInfo::new("weather"),
            crate::ToolInfo::new("chart"),
        ];
        let base = ChatRequest::new(vec![Message::user("hi")]).with_tools(tools);
        let choice = |choice: ToolChoice| {
            model.body(&base.clone().with_tool_choice(choice))["tool_choice"].clone()
        };
        assert_eq!(
            choice(ToolChoice::Auto),
            Value::Null,
            "the provider's default: left out"
        );
        assert_eq!(choice(ToolChoice::None), json!("none"));
        assert_eq!(choice(ToolChoice::Required), json!("required"));
        assert_eq!(
            choice(ToolChoice::tool("chart")),
            json!({"type": "function", "function": {"name": "chart"}})
        );
        // No tools: no choice is sent (the API refuses one).
        let bare = ChatRequest::new(vec![]).with_tool_choice(ToolChoice::Required);
        assert_eq!(model.body(&bare).get("tool_choice"), None);
        let typed = base.with_output(OutputSchema::of::<Forecast>("Forecast"));
        let format = &model.body(&typed)["response_format"];
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["name"], "Forecast");
        assert_eq!(format["json_schema"]["strict"], true);
        let schema = &format["json_schema"]["schema"];
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["city", "days"]));
    }

    #[test]
    fn the_smaller_of_the_requests_and_the_clients_max_tokens_is_sent() {
        let sent = |model: &OpenAiModel, asked: Option<u32>| {
            let mut request = ChatRequest::new(vec![Message::user("hi")]);
            request.max_tokens = asked;
            let body = model.body(&request);
            assert_eq!(body.get("max_tokens"), None, "the legacy field is not sent");
            body.get("max_completion_tokens").and_then(Value::as_u64)
        };
        let own = OpenAiModel::new("http://127.0.0.1:1", "gpt-test").max_tokens(1000);
        assert_eq!(sent(&own, Some(300)), Some(300), "the request's, lower");
        assert_eq!(sent(&own, Some(5000)), Some(1000), "the client's, lower");
        assert_eq!(sent(&own, None), Some(1000), "the client's, alone");
        let none = OpenAiModel::new("http://127.0.0.1:1", "gpt-test");
        assert_eq!(sent(&none, Some(300)), Some(300), "the request's, alone");
        assert_eq!(sent(&none, None), None, "neither: the endpoint's default");
        let legacy = own.legacy_max_tokens();
        let body = legacy.body(&ChatRequest::new(vec![]).with_max_tokens(300));
        assert_eq!(
            (body.get("max_tokens"), body.get("max_completion_tokens")),
            (Some(&json!(300)), None)
        );
    }

    fn fold(bytes: Vec<Vec<u8>>) -> (String, Vec<crate::model::ToolCall>, usize) {
        let deltas = provider::parse_pieces(bytes, Chunks);
        let mut text = String::new();
        let mut acc = Accumulator::new();
        let mut errors = 0;
        for delta in deltas {
            match delta {
                Ok(ModelDelta::Text(t)) => text.push_str(&t),
                Ok(ModelDelta::ToolCall(f)) => {
                    acc.push(&f).expect("a bounded index");
                }
                Ok(_) => {}
                Err(_) => errors += 1,
            }
        }
        (text, acc.finish().expect("named calls"), errors)
    }

    /// Found while writing `fuzz/fuzz_targets/openai_sse.rs`:
    /// eventsource-stream copies the rest of its buffer after each line it
    /// parses, so many short lines handed to it at once cost quadratic time
    /// (768 KiB of keep-alive comments in one read: minutes). Handed a line
    /// at a time, it parses each byte once.
    #[test]
    fn many_short_lines_in_one_read_parse_in_linear_time() {
        let mut body = ":\n\n".repeat(1 << 18).into_bytes();
        body.extend_from_slice(&recorded("\n"));
        let started = std::time::Instant::now();
        let (text, calls, errors) = fold(vec![body]);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        assert_eq!((errors, calls.len()), (0, 2));
        assert_eq!(text, "Grüße, 漢字 🦀");
    }

    proptest! {
        #[test]
        fn any_byte_split_of_a_recorded_stream_gives_the_same_text_and_calls(
            mut cuts in proptest::collection::vec(0usize..2000, 0..40),
            line_end in prop_oneof![Just("\n"), Just("\r\n")],
        ) {
            let body = recorded(line_end);
            let whole = fold(vec![body.clone()]);
            prop_assert_eq!(whole.2, 0);
            prop_assert_eq!(whole.1.len(), 2);
            prop_assert_eq!(&whole.1[1].arguments, "{\"t\":\"a\\\"b\\n\"}");
            cuts.iter_mut().for_each(|c| *c %= body.len() + 1);
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([body.len()]) {
                pieces.push(body[start..cut].to_vec());
                start = cut;
            }
            prop_assert_eq!(fold(pieces), whole);
        }
    }
}
