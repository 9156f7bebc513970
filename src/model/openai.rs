//! [`OpenAiModel`]: an OpenAI-compatible chat-completions endpoint as a
//! model service, its answer streamed over server-sent events and every
//! failure a typed [`ToolError`].
//!
//! What the endpoint sends is input: it is bounded where it is read (one
//! event at most [`MAX_SSE_EVENT_BYTES`], a tool-call index below
//! [`MAX_TOOL_CALLS_PER_ANSWER`]) and never trusted to be well-formed.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use eventsource_stream::{EventStreamError, Eventsource};
use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::{stream, StreamExt};
use http::HeaderMap;
use pin_project_lite::pin_project;
use serde_json::{json, Value};
use tower_service::Service;

use super::{
    AccumulateError, ChatRequest, FinishReason, ModelDelta, ToolCallDelta, Usage,
    MAX_TOOL_CALLS_PER_ANSWER,
};
use crate::{ErrorKind, ToolError};

/// The most bytes one server-sent event of a model's answer may take (its
/// lines up to the blank line that ends it): 1 MiB.
///
/// A chunk of a chat-completions stream is a few hundred bytes; an endpoint
/// that sends an endless line gets a typed error (kind failed) instead of
/// an ever-growing buffer.
pub const MAX_SSE_EVENT_BYTES: usize = 1 << 20;

/// The delta stream of an [`OpenAiModel`] answer.
pub type OpenAiStream = Pin<Box<dyn Stream<Item = Result<ModelDelta, ToolError>> + Send>>;

/// A model behind an OpenAI-compatible chat-completions endpoint, streamed
/// over server-sent events (`stream: true`, usage included).
///
/// Every failure is a typed [`ToolError`]:
///
/// | what happened | kind |
/// |---|---|
/// | 429 | rate limited |
/// | 401, 403 | denied |
/// | 5xx, the endpoint unreachable | unavailable |
/// | other statuses | failed |
/// | the connection breaks mid-answer, or the stream ends without `[DONE]` | unavailable (the transport error kept as the source) |
/// | a chunk that is not JSON (or not UTF-8) before any delta | unavailable: nothing reached the consumer, so asking again is safe |
/// | the same after a delta | failed |
/// | an error chunk, an event over [`MAX_SSE_EVENT_BYTES`], a tool-call index of [`MAX_TOOL_CALLS_PER_ANSWER`] or more | failed |
///
/// Whatever the status, a `retry-after-ms` header (milliseconds) or a
/// `Retry-After` header (seconds, fractional seconds, or an HTTP-date,
/// counted from the response's `Date`) is kept as the error's
/// [`retry_after`](ToolError::retry_after), which the retry layer honours.
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
    let err = ToolError::new(kind, message);
    match retry_after {
        Some(after) => err.with_retry_after(after),
        None => err,
    }
}

/// How much of an error response's body is read: enough for any error
/// message, and a bound on what a hostile endpoint can make us hold.
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// The start of an error response's body, as text (lossily decoded; a
/// broken body gives what arrived).
async fn error_body<S, B, E>(body: S) -> String
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    while let Some(Ok(piece)) = body.next().await {
        let room = ERROR_BODY_BYTES - bytes.len();
        let piece = piece.as_ref();
        bytes.extend_from_slice(&piece[..piece.len().min(room)]);
        if bytes.len() == ERROR_BODY_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// When the endpoint says to try again: `retry-after-ms` (OpenAI's, more
/// precise) first, else `Retry-After` as seconds (fractions accepted) or an
/// HTTP-date. A date is counted from the response's own `Date` when it
/// sent one (so a skewed local clock does not matter), else from now; a
/// date in the past means now. Unreadable values are ignored.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    // `try_from_secs_f64` refuses a negative, infinite or NaN value, where
    // `from_secs_f64` would panic.
    let seconds = |secs: f64| Duration::try_from_secs_f64(secs).ok();
    if let Some(after) = header("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| seconds(ms / 1000.0))
    {
        return Some(after);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Some(after) = value.parse::<f64>().ok().and_then(seconds) {
        return Some(after);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let now = header("date")
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or_else(SystemTime::now);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
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
    if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
        if let Ok(usage) = serde_json::from_value::<Usage>(usage.clone()) {
            out.push(ModelDelta::Usage(usage));
        }
    }
    Ok(out)
}

/// A fragment's `index`, read as the full JSON integer and checked against
/// the bound before it becomes a `u32` (so no value wraps into range). A
/// missing index is 0: a server streaming one call may leave it out.
fn tool_call_index(call: &Value) -> Result<u32, ToolError> {
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

/// Why the body stopped before the SSE parser saw it: the transport, the
/// bound on one event, or a line that is not UTF-8.
#[derive(Debug)]
enum BodyError<E> {
    Transport(E),
    EventTooLarge,
    NotUtf8(std::str::Utf8Error),
}

impl<E: fmt::Display> fmt::Display for BodyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Transport(err) => err.fmt(f),
            BodyError::EventTooLarge => write!(
                f,
                "a server-sent event was longer than {MAX_SSE_EVENT_BYTES} bytes"
            ),
            BodyError::NotUtf8(err) => err.fmt(f),
        }
    }
}

impl<E: StdError + 'static> StdError for BodyError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            BodyError::Transport(err) => Some(err),
            BodyError::EventTooLarge => None,
            BodyError::NotUtf8(err) => Some(err),
        }
    }
}

/// Counts the bytes of the event being received, however the body is
/// split. CR, LF and CRLF end a line; an empty line ends an event.
#[derive(Debug, Default)]
struct EventBytes {
    event: usize,
    line: usize,
    after_cr: bool,
}

impl EventBytes {
    /// Whether the event being received is still within the bound.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    if self.line == 0 {
                        self.event = 0;
                    }
                    self.line = 0;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.after_cr = false;
                    self.line += 1;
                    self.event += 1;
                }
            }
        }
        self.event <= MAX_SSE_EVENT_BYTES
    }
}

/// Where `piece` can be cut after its last complete line, if it has one.
fn after_last_line(piece: &[u8]) -> Option<usize> {
    let is_end = |b: &u8| *b == b'\n' || *b == b'\r';
    let last = piece.iter().rposition(is_end)?;
    if piece[last] == b'\r' && last + 1 == piece.len() {
        // The LF of a CRLF may be in the next piece.
        return piece[..last].iter().rposition(is_end).map(|i| i + 1);
    }
    Some(last + 1)
}

/// Where the line that starts `lines[at..]` ends: after its LF, CRLF or
/// lone CR (`lines` holds whole lines, so a CR is never its last byte but
/// at the body's end), or at the end of `lines`.
fn line_end(lines: &[u8], at: usize) -> usize {
    match lines[at..].iter().position(|b| *b == b'\n' || *b == b'\r') {
        Some(i) if lines[at + i] == b'\r' && lines.get(at + i + 1) == Some(&b'\n') => at + i + 2,
        Some(i) => at + i + 1,
        None => lines.len(),
    }
}

/// The UTF-8 byte-order mark.
const BOM: &[u8] = "\u{feff}".as_bytes();

pin_project! {
    /// The body re-cut into lines, one line per item, each event bounded
    /// to [`MAX_SSE_EVENT_BYTES`], each line checked to be UTF-8.
    ///
    /// eventsource-stream 0.2.3, which parses what this hands it, buffers
    /// without a bound and must be handed no more than it can take:
    ///
    /// * it re-parses its buffer from the start whenever bytes arrive in
    ///   the middle of a line (a long line costs quadratic time), and
    ///   copies the rest of its buffer after each line it parses (many
    ///   short lines at once cost quadratic time too): handed one whole
    ///   line at a time, it parses each byte once, while the partial line
    ///   waits here, bounded;
    /// * it holds bytes that are not UTF-8, with everything after them,
    ///   until the body ends: a line that is not UTF-8 is refused here, as
    ///   it arrives;
    /// * it panics on a leading byte-order mark (which it slices one byte
    ///   of three off): the marks the body starts with are dropped here
    ///   (the SSE specification ignores one).
    struct WholeLines<S> {
        #[pin]
        body: S,
        // The start of a line whose end has not arrived.
        partial: Vec<u8>,
        // Whole lines, handed on one at a time from `at`.
        lines: Vec<u8>,
        at: usize,
        event: EventBytes,
        started: bool,
        ended: bool,
    }
}

impl<S> WholeLines<S> {
    fn new(body: S) -> Self {
        WholeLines {
            body,
            partial: Vec::new(),
            lines: Vec::new(),
            at: 0,
            event: EventBytes::default(),
            started: false,
            ended: false,
        }
    }
}

impl<S, B, E> Stream for WholeLines<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    type Item = Result<Vec<u8>, BodyError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if *this.at < this.lines.len() {
                let start = *this.at;
                *this.at = line_end(this.lines, start);
                let mut line = &this.lines[start..*this.at];
                if !*this.started {
                    *this.started = true;
                    while let Some(rest) = line.strip_prefix(BOM) {
                        line = rest;
                    }
                    if line.is_empty() {
                        continue;
                    }
                }
                if let Err(err) = std::str::from_utf8(line) {
                    *this.ended = true;
                    this.lines.clear();
                    *this.at = 0;
                    return Poll::Ready(Some(Err(BodyError::NotUtf8(err))));
                }
                return Poll::Ready(Some(Ok(line.to_vec())));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            this.lines.clear();
            *this.at = 0;
            let piece = match ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(piece)) => piece,
                Some(Err(err)) => {
                    *this.ended = true;
                    return Poll::Ready(Some(Err(BodyError::Transport(err))));
                }
                // What is held back (a final CR, say) is the parser's to
                // judge.
                None => {
                    *this.ended = true;
                    std::mem::swap(this.lines, this.partial);
                    continue;
                }
            };
            let piece = piece.as_ref();
            if !this.event.feed(piece) {
                *this.ended = true;
                return Poll::Ready(Some(Err(BodyError::EventTooLarge)));
            }
            match after_last_line(piece) {
                None => this.partial.extend_from_slice(piece),
                Some(cut) => {
                    std::mem::swap(this.lines, this.partial);
                    this.lines.extend_from_slice(&piece[..cut]);
                    this.partial.extend_from_slice(&piece[cut..]);
                }
            }
        }
    }
}

/// An unreadable chunk. Before any delta it is as retryable as a dropped
/// connection (a proxy's error page, a garbled first chunk): nothing has
/// reached the consumer, so asking again is safe. After a delta the answer
/// is broken, and failed.
fn malformed(message: String, emitted: bool) -> ToolError {
    let kind = if emitted {
        ErrorKind::Failed
    } else {
        ErrorKind::Unavailable
    };
    ToolError::new(kind, message)
}

/// The error of a body the SSE parser could not read.
fn broken<E>(err: EventStreamError<BodyError<E>>, emitted: bool) -> ToolError
where
    E: StdError + Send + Sync + 'static,
{
    match err {
        EventStreamError::Transport(BodyError::Transport(err)) => ToolError::new(
            ErrorKind::Unavailable,
            "the connection to the model endpoint broke off mid-answer",
        )
        .with_source(err),
        EventStreamError::Transport(too_large @ BodyError::EventTooLarge) => ToolError::failed(
            format!("the model endpoint's answer was refused: {too_large}"),
        )
        .with_source(too_large),
        EventStreamError::Transport(BodyError::NotUtf8(err)) => malformed(
            "the model endpoint sent text that is not UTF-8".into(),
            emitted,
        )
        .with_source(err),
        EventStreamError::Utf8(err) => malformed(
            "the model endpoint sent text that is not UTF-8".into(),
            emitted,
        )
        .with_source(err),
        EventStreamError::Parser(err) => malformed(
            format!("the model endpoint sent a malformed server-sent event: {err}"),
            emitted,
        ),
    }
}

/// Parses a chat-completions SSE body, however its bytes are split, into
/// deltas; the stream ends at `[DONE]`, or with one error.
fn deltas_from_sse<S, B, E>(bytes: S) -> impl Stream<Item = Result<ModelDelta, ToolError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: StdError + Send + Sync + 'static,
{
    struct Parse<T> {
        events: Pin<Box<T>>,
        ended: bool,
        /// Whether a delta has been yielded: it decides whether a
        /// malformed chunk is worth asking again.
        emitted: bool,
        /// The answering model, once a chunk names it, until it is told
        /// (once per answer, just before the first delta: a chunk that
        /// only names it is no delta, so a failure after it is still a
        /// failure before the answer began).
        model: Option<String>,
        named: bool,
    }
    let start = Parse {
        events: Box::pin(WholeLines::new(bytes).eventsource()),
        ended: false,
        emitted: false,
        model: None,
        named: false,
    };
    stream::unfold(start, |mut parse| async move {
        if parse.ended {
            return None;
        }
        let batch = match parse.events.next().await {
            None => Err(ToolError::new(
                ErrorKind::Unavailable,
                "the model's stream ended before [DONE]",
            )),
            Some(Err(err)) => Err(broken(err, parse.emitted)),
            Some(Ok(event)) if event.data.trim() == "[DONE]" => return None,
            Some(Ok(event)) => match serde_json::from_str::<Value>(&event.data) {
                Ok(chunk) if chunk.get("error").is_some() => Err(ToolError::failed(format!(
                    "the model reported an error mid-stream: {}",
                    chunk["error"]
                ))),
                Ok(chunk) => {
                    if parse.model.is_none() && !parse.named {
                        // Bounded as a name is.
                        parse.model = chunk
                            .get("model")
                            .and_then(Value::as_str)
                            .filter(|m| !m.is_empty())
                            .map(|m| m.chars().take(256).collect());
                    }
                    deltas_of(&chunk)
                }
                Err(err) => Err(malformed(
                    format!(
                        "malformed chunk from the model: {err}: {}",
                        event.data.chars().take(200).collect::<String>()
                    ),
                    parse.emitted,
                )
                .with_source(err)),
            },
        };
        let items: Vec<Result<ModelDelta, ToolError>> = match batch {
            Ok(deltas) => {
                parse.emitted |= !deltas.is_empty();
                let model = (!deltas.is_empty())
                    .then(|| parse.model.take())
                    .flatten()
                    .map(ModelDelta::Model);
                parse.named |= model.is_some();
                model.into_iter().chain(deltas).map(Ok).collect()
            }
            Err(err) => {
                parse.ended = true;
                vec![Err(err)]
            }
        };
        Some((stream::iter(items), parse))
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
                let retry_after = retry_after(response.headers());
                let text = error_body(response.bytes_stream()).await;
                return Err(status_error(status, retry_after, &text));
            }
            let deltas = deltas_from_sse(response.bytes_stream());
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
        use futures_util::{FutureExt, StreamExt};
        let body = super::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>));
        // Every piece is ready, so the whole parse completes in one poll.
        super::deltas_from_sse(body)
            .collect()
            .now_or_never()
            .expect("a body whose pieces are all ready parses in one poll")
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
