//! The native Anthropic client against an in-process server on 127.0.0.1
//! that replays the Messages API's documented event sequences — and its
//! faults: a 529 overload with `Retry-After`, refusals by error type, an
//! `error` event mid-stream, an answer cut off at `max_tokens`.
#![cfg(feature = "anthropic")]

use std::time::Duration;

use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{AnthropicModel, ChatRequest, FinishReason, Message, ModelDelta, Usage};
use toolstack::{tool, ErrorKind, ToolError, ToolOutput, Toolbox};
use tower::ServiceExt;

use crate::http_request;

/// A request as the server saw it: the head's lines (lowercased) and the
/// body.
struct Seen {
    head: String,
    body: Value,
}

/// Serves one canned response per connection, in order; returns the base
/// URL and a channel of the requests received.
async fn server(responses: Vec<String>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for response in responses {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (head, body) = http_request::read_request(&mut socket).await;
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let _ = tx.send(Seen { head, body });
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (url, rx)
}

/// An SSE response of `events`, each `event: {type}` then its data.
fn sse(events: &[Value]) -> String {
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for event in events {
        out.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    out
}

fn status(status: &str, headers: &[&str], body: &str) -> String {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for header in headers {
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    out
}

fn start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-1", "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}})
}

fn block_start(index: u32, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn block_delta(index: u32, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn block_stop(index: u32) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn text(index: u32, text: &str) -> [Value; 3] {
    [
        block_start(index, json!({"type": "text", "text": ""})),
        block_delta(index, json!({"type": "text_delta", "text": text})),
        block_stop(index),
    ]
}

fn stop(reason: &str, output_tokens: u64) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        json!({"type": "message_stop"}),
    ]
}

fn answer(parts: &[&[Value]]) -> String {
    let events: Vec<Value> = std::iter::once(start())
        .chain(parts.iter().flat_map(|p| p.iter().cloned()))
        .collect();
    sse(&events)
}

async fn deltas(url: &str) -> Result<Vec<Result<ModelDelta, ToolError>>, ToolError> {
    let model = AnthropicModel::new("claude-test")
        .base_url(url)
        .api_key("sk-ant-test");
    let stream = model
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await?;
    Ok(stream.collect().await)
}

#[tokio::test]
async fn streams_text_with_the_model_finish_and_cache_usage_and_sends_the_headers() {
    let cached = json!({"type": "message_start", "message": {"model": "claude-test-1", "usage": {"input_tokens": 7, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000, "output_tokens": 1}}});
    let events: Vec<Value> = std::iter::once(cached)
        .chain([json!({"type": "ping"})])
        .chain(text(0, "Hello"))
        .chain(stop("end_turn", 12))
        .collect();
    let (url, mut seen) = server(vec![sse(&events)]).await;
    let items: Vec<ModelDelta> = deltas(&url)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        items,
        [
            ModelDelta::Model("claude-test-1".into()),
            ModelDelta::Text("Hello".into()),
            ModelDelta::Finish(FinishReason::Stop),
            ModelDelta::Usage(Usage::new(2307, 12).cached(2000).cache_creation(300)),
        ]
    );
    let seen = seen.recv().await.unwrap();
    assert!(seen.head.starts_with("post /v1/messages "), "{}", seen.head);
    assert!(
        seen.head.contains("\nx-api-key: sk-ant-test"),
        "{}",
        seen.head
    );
    assert!(
        seen.head.contains("\nanthropic-version: 2023-06-01"),
        "{}",
        seen.head
    );
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.body["max_tokens"], 4096);
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
}

#[tokio::test]
async fn a_529_overload_is_retryable_with_its_wait_and_the_next_call_succeeds() {
    let overloaded = status(
        "529 Site Overloaded",
        &["content-type: application/json", "retry-after: 3"],
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    let ok = answer(&[&text(0, "fine"), &stop("end_turn", 2)]);
    let (url, _) = server(vec![overloaded, ok]).await;
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
    assert!(
        err.message().contains("529 (overloaded_error): Overloaded"),
        "{}",
        err.message()
    );
    let items = deltas(&url).await.unwrap();
    assert!(items.iter().all(Result::is_ok));
    assert!(items.contains(&Ok(ModelDelta::Text("fine".into()))));
}

#[tokio::test]
async fn refusals_are_typed_by_their_error_type() {
    let limited = status(
        "429 Too Many Requests",
        &["retry-after: 20"],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
    );
    let invalid = status(
        "400 Bad Request",
        &[],
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
    );
    let auth = status(
        "401 Unauthorized",
        &[],
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    );
    let (url, _) = server(vec![limited, invalid, auth]).await;
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(20))
        }
    );
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(!err.is_retryable());
    assert!(
        err.message().contains("max_tokens: Field required"),
        "{}",
        err.message()
    );
    assert_eq!(deltas(&url).await.unwrap_err().kind(), ErrorKind::Denied);
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_the_answer_with_a_typed_error() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let invalid =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}});
    let first = sse(&[
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "par"})),
        overloaded,
        block_delta(0, json!({"type": "text_delta", "text": "never"})),
    ]);
    let second = sse(&[start(), invalid]);
    let (url, _) = server(vec![first, second]).await;
    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 3, "the error is the last item: {items:?}");
    assert_eq!(items[1], Ok(ModelDelta::Text("par".into())));
    let err = items[2].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.message()
            .contains("mid-stream (overloaded_error): Overloaded"),
        "{}",
        err.message()
    );
    let items = deltas(&url).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
}

#[tokio::test]
async fn a_malformed_event_before_any_delta_is_retryable_and_a_stream_without_message_stop_is_unavailable(
) {
    let mut malformed = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    malformed.push_str("event: message_start\ndata: {oops\n\n");
    let cut = sse(&[
        start(),
        block_start(0, json!({"type": "text", "text": ""})),
        block_delta(0, json!({"type": "text_delta", "text": "cut"})),
    ]);
    let (url, _) = server(vec![malformed, cut]).await;
    let items = deltas(&url).await.unwrap();
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.message().contains("malformed event"),
        "{}",
        err.message()
    );
    let items = deltas(&url).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.message().contains("before message_stop"),
        "{}",
        err.message()
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// A weather tool that knows one city; a chart tool that draws a picture.
fn toolbox() -> Toolbox {
    let weather = tool::from_fn("weather", |City { city }| async move {
        match city.as_str() {
            "Paris" => Ok("sunny".to_owned()),
            other => Err(ToolError::failed(format!("no weather for {other}"))),
        }
    });
    let chart = tool::from_stream("chart", |_: City| {
        stream::iter([
            Ok::<_, ToolError>(ToolOutput::text("the chart")),
            Ok(ToolOutput::image("iVBORw0KGgo=", "image/png")),
        ])
    });
    Toolbox::new().tool(weather).tool(chart)
}

#[tokio::test]
async fn thinking_is_streamed_kept_and_sent_back_signed_with_the_tool_results() {
    let thinking = [
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Two cities; "}),
        ),
        block_delta(
            0,
            json!({"type": "thinking_delta", "thinking": "ask both."}),
        ),
        block_delta(
            0,
            json!({"type": "signature_delta", "signature": "c2lnbmVk"}),
        ),
        block_stop(0),
    ];
    let calls = [
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}),
        ),
        block_delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "{\"city\": \"At"}),
        ),
        block_delta(
            1,
            json!({"type": "input_json_delta", "partial_json": "lantis\"}"}),
        ),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_2", "name": "chart", "input": {}}),
        ),
        block_delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"city\": \"Paris\"}"}),
        ),
        block_stop(2),
    ];
    let first = answer(&[&thinking, &calls, &stop("tool_use", 40)]);
    let second = answer(&[&text(0, "Atlantis has none."), &stop("end_turn", 5)]);
    let (url, mut seen) = server(vec![first, second]).await;
    let model = AnthropicModel::new("claude-test")
        .base_url(url)
        .thinking(1024);
    let agent = Agent::new(model, toolbox());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("weather?")]).collect().await;
    let reasoning: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ReasoningDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "Two cities; ask both.");
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Finished);
    assert_eq!(done.usage.map(|u| u.completion_tokens), Some(45));
    // The run is over: whatever the server was asked has arrived.
    let first = seen.try_recv().expect("a first request").body;
    assert_eq!(
        first["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    let second = seen.try_recv().expect("a second request").body;
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two cities; ask both.", "signature": "c2lnbmVk"},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Atlantis"}},
            {"type": "tool_use", "id": "toolu_2", "name": "chart", "input": {"city": "Paris"}},
        ]})
    );
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0]["content"]
        .as_str()
        .unwrap()
        .contains("no weather for Atlantis"));
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert!(results[1].get("is_error").is_none());
    assert_eq!(
        results[1]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    );
}

#[tokio::test]
async fn an_answer_cut_off_at_max_tokens_ends_the_run_with_length() {
    let cut = answer(&[&text(0, "The answer is"), &stop("max_tokens", 4096)]);
    let (url, _) = server(vec![cut]).await;
    let agent = Agent::new(AnthropicModel::new("m").base_url(url), Toolbox::new());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("long?")]).collect().await;
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Length);
}

#[tokio::test]
async fn a_paused_turn_is_sent_back_and_its_continuation_extends_the_same_answer() {
    let paused = answer(&[&text(0, "Searching…"), &stop("pause_turn", 3)]);
    let done = answer(&[&text(0, " found."), &stop("end_turn", 2)]);
    let (url, mut seen) = server(vec![paused, done]).await;
    let agent = Agent::new(AnthropicModel::new("m").base_url(url), Toolbox::new());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("search")]).collect().await;
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Finished);
    // The run is over: whatever the server was asked has arrived.
    let _ = seen.try_recv().expect("a first request");
    let second = seen.try_recv().expect("the paused turn asked again").body;
    assert_eq!(
        second["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Searching…"}]})
    );
    // One answer, whole: what takes the last assistant message as the
    // answer reads both halves.
    assert_eq!(
        done.messages,
        [
            Message::user("search"),
            Message::assistant("Searching… found.")
        ]
    );
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    days: u32,
}

#[tokio::test]
async fn a_typed_answer_over_the_anthropic_client_asks_for_its_json_schema_format() {
    let answered = answer(&[
        &text(0, r#"{"city": "Lisbon", "days": 3}"#),
        &stop("end_turn", 12),
    ]);
    let (url, mut seen) = server(vec![answered]).await;
    let agent =
        Agent::new(AnthropicModel::new("m").base_url(url), Toolbox::new()).output::<Forecast>();
    let forecast: Forecast = agent
        .run(vec![Message::user("where, how long?")])
        .output()
        .await
        .unwrap();
    assert_eq!(
        forecast,
        Forecast {
            city: "Lisbon".into(),
            days: 3
        }
    );
    let body = seen.recv().await.unwrap().body;
    let format = &body["output_config"]["format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["schema"]["required"], json!(["city", "days"]));
}
