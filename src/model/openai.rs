//! [`OpenAiModel`]: an OpenAI-compatible chat-completions endpoint as a
//! model service, its answer streamed over server-sent events and every
//! failure a typed [`ToolError`].

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use tower_service::Service;

use super::{ChatRequest, FinishReason, ModelDelta, ToolCallDelta, Usage};
use crate::{ErrorKind, ToolError};

/// The delta stream of an [`OpenAiModel`] answer.
pub type OpenAiStream = Pin<Box<dyn Stream<Item = Result<ModelDelta, ToolError>> + Send>>;

/// A model behind an OpenAI-compatible chat-completions endpoint, streamed
/// over server-sent events (`stream: true`, usage included).
///
/// HTTP errors, error bodies, malformed chunks and a connection that drops
/// mid-stream become typed [`ToolError`]s: 429 is rate limited (with the
/// `retry-after` header), 401/403 denied, 5xx and connection failures
/// unavailable, other statuses failed; a stream that ends without `[DONE]`
/// ends with an unavailable error.
///
/// A request's [`model`](ChatRequest::model), when set, is asked for
/// instead of the model the client was made with.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
}

impl OpenAiModel {
    /// A client for `base_url` (e.g. `http://127.0.0.1:11434/v1`) and `model`.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiModel {
            client: reqwest::Client::new(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            model: model.into(),
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
            "messages": request.messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| t.to_openai_function(false))
                .collect();
            body["tools"] = tools.into();
        }
        body
    }
}

fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ToolError {
    let detail = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(500).collect());
    let message = format!("the model endpoint answered {status}: {detail}");
    let kind = match status {
        429 => ErrorKind::RateLimited { retry_after },
        401 | 403 => ErrorKind::Denied,
        500..=599 => ErrorKind::Unavailable,
        _ => ErrorKind::Failed,
    };
    ToolError::new(kind, message)
}

/// The deltas of one `chat.completion.chunk`.
fn deltas_of(chunk: &Value) -> Vec<ModelDelta> {
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
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as u32;
                let mut delta = ToolCallDelta::new(index);
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
    if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
        if let Ok(usage) = serde_json::from_value::<Usage>(usage.clone()) {
            out.push(ModelDelta::Usage(usage));
        }
    }
    out
}

/// Parses a chat-completions SSE body, however its bytes are split, into
/// deltas; the stream ends at `[DONE]`, or with one error.
fn deltas_from_sse<S, B, E>(bytes: S) -> impl Stream<Item = Result<ModelDelta, ToolError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: std::fmt::Display + Send,
{
    let events = bytes.eventsource();
    stream::unfold((Box::pin(events), false), |(mut events, done)| async move {
        if done {
            return None;
        }
        let batch: Vec<Result<ModelDelta, ToolError>> = match events.next().await {
            None => vec![Err(ToolError::new(
                ErrorKind::Unavailable,
                "the model's stream ended before [DONE]",
            ))],
            Some(Err(err)) => vec![Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("the model's stream broke off: {err}"),
            ))],
            Some(Ok(event)) if event.data.trim() == "[DONE]" => return None,
            Some(Ok(event)) => match serde_json::from_str::<Value>(&event.data) {
                Ok(chunk) if chunk.get("error").is_some() => vec![Err(ToolError::failed(format!(
                    "the model reported an error mid-stream: {}",
                    chunk["error"]
                )))],
                Ok(chunk) => deltas_of(&chunk).into_iter().map(Ok).collect(),
                Err(err) => vec![Err(ToolError::failed(format!(
                    "malformed chunk from the model: {err}: {}",
                    event.data.chars().take(200).collect::<String>()
                )))],
            },
        };
        let failed = batch.iter().any(Result::is_err);
        Some((stream::iter(batch), (events, failed)))
    })
    .flatten()
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
            let body = serde_json::to_vec(&body)
                .map_err(|e| ToolError::failed(format!("cannot encode the request: {e}")))?;
            let response = post.body(body).send().await.map_err(|e| {
                ToolError::new(
                    ErrorKind::Unavailable,
                    format!("cannot reach the model endpoint: {e}"),
                )
                .with_source(e)
            })?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let text = response.text().await.unwrap_or_default();
                return Err(status_error(status, retry_after, &text));
            }
            let deltas = deltas_from_sse(response.bytes_stream());
            Ok(Box::pin(deltas) as OpenAiStream)
        })
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use proptest::prelude::*;

    use super::*;
    use crate::model::Accumulator;

    /// A recorded answer: text with multi-byte characters, then two
    /// parallel calls whose arguments hold escapes and non-ASCII text.
    fn recorded() -> Vec<u8> {
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
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        body.into_bytes()
    }

    fn fold(bytes: Vec<Vec<u8>>) -> (String, Vec<crate::model::ToolCall>, usize) {
        let stream = stream::iter(bytes.into_iter().map(Ok::<_, std::convert::Infallible>));
        // Every piece is ready, so the whole parse completes in one poll.
        let deltas: Vec<_> = deltas_from_sse(stream)
            .collect()
            .now_or_never()
            .expect("ready");
        let mut text = String::new();
        let mut acc = Accumulator::new();
        let mut errors = 0;
        for delta in deltas {
            match delta {
                Ok(ModelDelta::Text(t)) => text.push_str(&t),
                Ok(ModelDelta::ToolCall(f)) => {
                    acc.push(&f);
                }
                Ok(_) => {}
                Err(_) => errors += 1,
            }
        }
        (text, acc.finish().expect("named calls"), errors)
    }

    proptest! {
        #[test]
        fn any_byte_split_of_a_recorded_stream_gives_the_same_text_and_calls(
            mut cuts in proptest::collection::vec(0usize..2000, 0..40),
        ) {
            let body = recorded();
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
