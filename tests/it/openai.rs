//! The OpenAI-compatible client against an in-process server on 127.0.0.1
//! that replays chunk sequences in the documented SSE format — and faults:
//! statuses with `Retry-After`, broken bodies, malformed chunks, endless
//! lines, hostile tool-call indices.
#![cfg(feature = "openai")]

use std::error::Error as _;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{
    Accumulator, ChatRequest, FinishReason, Message, ModelDelta, OpenAiModel, Usage,
    MAX_SSE_EVENT_BYTES,
};
use toolstack::{ErrorKind, ToolError, ToolInfo, Toolbox};
use tower::ServiceExt;

use crate::http_request;

/// Serves one canned response per connection, in order; returns the base
/// URL and a channel of the request bodies received.
async fn server(responses: Vec<String>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    http_request::canned(responses).await
}

fn sse(chunks: &[Value], done: bool) -> String {
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for chunk in chunks {
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    out
}

/// A response with `status` (e.g. `503 Service Unavailable`), extra header
/// lines and a body.
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

fn text_chunk(text: &str) -> Value {
    json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
}

fn call_chunk(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = id.into();
        call["type"] = "function".into();
    }
    if let Some(name) = name {
        call["function"]["name"] = name.into();
    }
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
}

fn finish_chunk(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn usage_chunk() -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}})
}

async fn deltas(url: &str) -> Result<Vec<Result<ModelDelta, ToolError>>, ToolError> {
    let model = OpenAiModel::new(url, "test-model").api_key("sk-test");
    let request =
        ChatRequest::new(vec![Message::user("hi")]).with_tools(vec![ToolInfo::new("get_weather")]);
    let stream = model.oneshot(request).await?;
    Ok(stream.collect().await)
}

#[tokio::test]
async fn streams_text_then_finish_and_a_usage_only_final_chunk() {
    let (url, mut bodies) = server(vec![sse(
        &[
            text_chunk("Hel"),
            text_chunk("lo"),
            finish_chunk("stop"),
            usage_chunk(),
        ],
        true,
    )])
    .await;
    let deltas: Vec<ModelDelta> = deltas(&url)
        .await
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        deltas,
        [
            ModelDelta::Text("Hel".into()),
            ModelDelta::Text("lo".into()),
            ModelDelta::Finish(FinishReason::Stop),
            ModelDelta::Usage(Usage::new(12, 5)),
        ]
    );
    let body = bodies.recv().await.unwrap();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "hi"})
    );
}

#[tokio::test]
async fn the_request_model_overrides_the_client_model() {
    let (url, mut bodies) = server(vec![sse(&[text_chunk("ok")], true)]).await;
    let model = OpenAiModel::new(&url, "test-model");
    let request = ChatRequest::new(vec![Message::user("hi")]).with_model("other-model");
    let stream = model.oneshot(request).await.unwrap();
    let _: Vec<_> = stream.collect().await;
    let body = bodies.recv().await.unwrap();
    assert_eq!(body["model"], "other-model");
}

#[tokio::test]
async fn parallel_tool_calls_fold_into_complete_calls() {
    let chunks = [
        call_chunk(0, Some("call_a"), Some("get_weather"), ""),
        call_chunk(1, Some("call_b"), Some("get_time"), "{\"tz\":"),
        call_chunk(0, None, None, "{\"city\":\"Pa"),
        call_chunk(1, None, None, "\"UTC\"}"),
        call_chunk(0, None, None, "ris\"}"),
        finish_chunk("tool_calls"),
        usage_chunk(),
    ];
    let (url, _) = server(vec![sse(&chunks, true)]).await;
    let mut acc = Accumulator::new();
    let mut finish = None;
    for delta in deltas(&url).await.unwrap() {
        match delta.unwrap() {
            ModelDelta::ToolCall(fragment) => {
                acc.push(&fragment).unwrap();
            }
            ModelDelta::Finish(reason) => finish = Some(reason),
            _ => {}
        }
    }
    let calls = acc.finish().unwrap();
    assert_eq!(finish, Some(FinishReason::ToolCalls));
    assert_eq!(
        (calls[0].id.as_str(), calls[0].arguments.as_str()),
        ("call_a", r#"{"city":"Paris"}"#)
    );
    assert_eq!(
        (calls[1].name.as_str(), calls[1].arguments.as_str()),
        ("get_time", r#"{"tz":"UTC"}"#)
    );
}

#[tokio::test]
async fn error_statuses_become_typed_errors() {
    let body = r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#;
    let limited = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 7\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let denied =
        "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned();
    let down =
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndown"
            .to_owned();
    let (url, _) = server(vec![limited, denied, down]).await;

    let err = deltas(&url).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(std::time::Duration::from_secs(7))
        }
    );
    assert!(
        err.message().contains("Rate limit reached"),
        "{}",
        err.message()
    );
    assert_eq!(deltas(&url).await.unwrap_err().kind(), ErrorKind::Denied);
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("503"), "{}", err.message());
}

#[tokio::test]
async fn a_cut_connection_and_a_malformed_chunk_end_the_stream_with_one_error() {
    let cut = sse(&[text_chunk("partial")], false);
    let mut malformed = sse(&[text_chunk("ok")], false);
    malformed.push_str("data: {not json\n\ndata: [DONE]\n\n");
    let (url, _) = server(vec![cut, malformed]).await;

    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0].as_ref().unwrap(),
        &ModelDelta::Text("partial".into())
    );
    let err = items[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("before [DONE]"), "{}", err.message());

    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 2, "the error is the last item");
    let err = items[1].as_ref().unwrap_err();
    assert!(err.message().contains("malformed event"));
    assert_eq!(err.kind(), ErrorKind::Failed, "after a delta");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    assert_eq!(
        deltas(&url).await.unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}

#[tokio::test]
async fn the_agent_runs_over_the_openai_client() {
    let first = sse(
        &[
            call_chunk(0, Some("call_1"), Some("echo"), "{\"text\":"),
            call_chunk(0, None, None, "\"hi\"}"),
            finish_chunk("tool_calls"),
        ],
        true,
    );
    let second = sse(
        &[text_chunk("echoed"), finish_chunk("stop"), usage_chunk()],
        true,
    );
    let (url, mut bodies) = server(vec![first, second]).await;
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Echo {
        text: String,
    }
    let echo = toolstack::tool::from_fn(
        "echo",
        |Echo { text }| async move { Ok::<_, ToolError>(text) },
    );
    let agent = Agent::new(OpenAiModel::new(url, "m"), Toolbox::new().tool(echo));
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("say hi")]).collect().await;
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Finished);
    let _ = bodies.recv().await;
    let second_body = bodies.recv().await.unwrap();
    assert_eq!(
        second_body["messages"][1]["tool_calls"][0]["function"]["arguments"],
        "{\"text\":\"hi\"}"
    );
    assert_eq!(
        second_body["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "hi"})
    );
}

#[tokio::test]
async fn a_503_with_retry_after_is_unavailable_and_keeps_the_wait() {
    let (url, _) = server(vec![
        status("503 Service Unavailable", &["retry-after: 2"], "busy"),
        status("502 Bad Gateway", &["retry-after: 0.25"], ""),
        status("400 Bad Request", &["retry-after: 9"], "no"),
    ])
    .await;
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(
        err.retry_after(),
        Some(Duration::from_millis(250)),
        "fractional seconds"
    );
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(9)));
}

#[tokio::test]
async fn a_retried_call_whose_last_refusal_is_a_429_is_rate_limited_and_says_both_answers() {
    use tower::Layer;
    let (url, _) = server(vec![
        status(
            "503 Service Unavailable",
            &["content-type: application/json"],
            r#"{"error":{"message":"Service unavailable.","type":"server_error"}}"#,
        ),
        status(
            "429 Too Many Requests",
            &["content-type: application/json", "retry-after: 7"],
            r#"{"error":{"message":"Rate limit exceeded.","type":"rate_limit_error"}}"#,
        ),
    ])
    .await;
    let policy = toolstack_layers::retry::RetryPolicy::new()
        .max_attempts(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(1));
    let model = toolstack_layers::retry::RetryLayer::new(policy)
        .layer(OpenAiModel::new(&url, "test-model").api_key("sk-test"));
    let err = model
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .expect_err("both attempts were refused");
    // The endpoint's last answer types the call, with its wait.
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(
        err.message(),
        "the model endpoint answered 503 (server_error): Service unavailable.; it was tried again, and that attempt was refused: the model endpoint answered 429 (rate_limit_error): Rate limit exceeded."
    );
}

#[tokio::test]
async fn retry_after_ms_wins_over_retry_after_and_unreadable_values_are_ignored() {
    let (url, _) = server(vec![
        status(
            "429 Too Many Requests",
            &["retry-after-ms: 1500", "retry-after: 7"],
            "",
        ),
        status("503 Service Unavailable", &["retry-after: soon"], ""),
        status(
            "503 Service Unavailable",
            &["retry-after-ms: -5", "retry-after: -1"],
            "",
        ),
    ])
    .await;
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_millis(1500))
        }
    );
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
    assert_eq!(deltas(&url).await.unwrap_err().retry_after(), None);
    assert_eq!(
        deltas(&url).await.unwrap_err().retry_after(),
        None,
        "a negative wait is no wait we can honour (and no panic)"
    );
}

#[tokio::test]
async fn an_http_date_retry_after_counts_from_the_responses_date() {
    let (url, _) = server(vec![
        status(
            "503 Service Unavailable",
            &[
                "date: Sun, 06 Nov 1994 08:49:37 GMT",
                "retry-after: Sun, 06 Nov 1994 08:51:37 GMT",
            ],
            "",
        ),
        // Without a `Date` the reference is now: a date long past is "now".
        status(
            "503 Service Unavailable",
            &["retry-after: Sun, 06 Nov 1994 08:51:37 GMT"],
            "",
        ),
    ])
    .await;
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)));
    let err = deltas(&url).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::ZERO));
}

#[tokio::test]
async fn a_malformed_chunk_before_any_delta_is_retryable_and_after_one_it_fails() {
    let mut first = sse(
        &[json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})],
        false,
    );
    first.push_str("data: {not json\n\ndata: [DONE]\n\n");
    let mut later = sse(&[text_chunk("ok")], false);
    later.push_str("data: {not json\n\ndata: [DONE]\n\n");
    let (url, _) = server(vec![first, later]).await;

    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 1, "a role-only chunk is no delta");
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.is_retryable());
    assert!(
        err.message().contains("malformed event"),
        "{}",
        err.message()
    );

    let items = deltas(&url).await.unwrap();
    let err = items[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_broken_body_says_so_and_keeps_the_transport_error_as_its_source() {
    // A chunked body cut off inside a chunk: the transport fails, not the
    // parser.
    let cut =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
               40\r\ndata: {\"choices\": [{\"index\": 0, \"delta\": {\"content\""
            .to_owned();
    let (url, _) = server(vec![cut]).await;
    let items = deltas(&url).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(
        err.message(),
        "the connection to the model endpoint broke off mid-answer"
    );
    let source = err.source().expect("the transport error is kept");
    assert!(
        source.downcast_ref::<reqwest::Error>().is_some(),
        "{source:?}"
    );
}

#[tokio::test]
async fn an_event_over_the_size_bound_is_refused_but_many_small_ones_are_not() {
    let endless = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: {}",
        "a".repeat(2 * MAX_SSE_EVENT_BYTES)
    );
    let small: Vec<Value> = (0..4_000).map(|_| text_chunk(&"b".repeat(400))).collect();
    let (url, _) = server(vec![endless, sse(&small, true)]).await;

    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 1);
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(
        err.message()
            .contains(&format!("{MAX_SSE_EVENT_BYTES} bytes")),
        "{}",
        err.message()
    );

    let items = deltas(&url).await.unwrap();
    assert_eq!(items.len(), 4_000, "{:?}", items.last());
    assert!(items.iter().all(Result::is_ok));
}

#[tokio::test]
async fn a_tool_call_index_out_of_range_is_refused_never_wrapped() {
    let hostile = |index: Value| {
        let call = json!({"index": index, "id": "c", "function": {"name": "get_weather", "arguments": "{}"}});
        sse(
            &[json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})],
            true,
        )
    };
    let (url, _) = server(vec![
        hostile(json!(4294967295u64)),
        // `as u32` would wrap this to 0.
        hostile(json!(4294967296u64)),
        hostile(json!(-1)),
        hostile(json!(128)),
    ])
    .await;
    for _ in 0..4 {
        let items = deltas(&url).await.unwrap();
        assert_eq!(items.len(), 1, "{items:?}");
        let err = items[0].as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Failed);
        assert!(err.message().contains("index"), "{}", err.message());
    }
}

#[tokio::test]
async fn the_agent_ends_a_run_cleanly_on_a_hostile_tool_call_index() {
    let call = json!({"index": 4294967295u64, "id": "c", "function": {"name": "get_weather", "arguments": "{}"}});
    let answer = sse(
        &[json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})],
        true,
    );
    let (url, _) = server(vec![answer]).await;
    let agent = Agent::new(OpenAiModel::new(url, "m"), Toolbox::new());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    assert!(
        matches!(&events[..], [AgentEvent::Error(_), AgentEvent::Done(_)]),
        "{events:?}"
    );
    let Some(AgentEvent::Done(done)) = events.last() else {
        unreachable!()
    };
    assert_eq!(done.stop, StopReason::ModelError);
}

#[tokio::test]
async fn usage_is_a_delta_only_when_the_endpoint_sends_it() {
    let none = sse(
        &[
            text_chunk("a"),
            finish_chunk("stop"),
            json!({"choices": [], "usage": null}),
        ],
        true,
    );
    let zero = sse(
        &[
            text_chunk("a"),
            json!({"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
        ],
        true,
    );
    let (url, _) = server(vec![none, zero]).await;
    let usage = |items: Vec<Result<ModelDelta, ToolError>>| {
        items
            .into_iter()
            .filter_map(|d| match d.unwrap() {
                ModelDelta::Usage(u) => Some(u),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(usage(deltas(&url).await.unwrap()), []);
    assert_eq!(usage(deltas(&url).await.unwrap()), [Usage::default()]);
}

#[tokio::test]
async fn cached_and_reasoning_tokens_are_read_from_the_usage_details() {
    let detailed = json!({"choices": [], "usage": {
        "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 192, "audio_tokens": 0},
    }});
    // Details an endpoint sends as null, or not as counts, are no parts.
    let odd = json!({"choices": [], "usage": {
        "prompt_tokens": 7, "completion_tokens": 1,
        "prompt_tokens_details": null,
        "completion_tokens_details": {"reasoning_tokens": -3},
    }});
    let (url, _) = server(vec![
        sse(&[text_chunk("a"), detailed], true),
        sse(&[text_chunk("b"), odd], true),
    ])
    .await;
    let usage = |items: Vec<Result<ModelDelta, ToolError>>| {
        items
            .into_iter()
            .find_map(|d| match d.unwrap() {
                ModelDelta::Usage(u) => Some(u),
                _ => None,
            })
            .expect("a usage delta")
    };
    let first = usage(deltas(&url).await.unwrap());
    assert_eq!(first, Usage::new(2006, 300).cached(1920).reasoning(192));
    assert_eq!(first.uncached_prompt_tokens(), 86);
    assert_eq!(usage(deltas(&url).await.unwrap()), Usage::new(7, 1));
}

#[tokio::test]
async fn a_length_finish_from_the_endpoint_is_the_runs_stop_reason() {
    let (url, _) = server(vec![sse(
        &[text_chunk("The answer is cut"), finish_chunk("length")],
        true,
    )])
    .await;
    let agent = Agent::new(OpenAiModel::new(url, "m"), Toolbox::new());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Length);
    assert_eq!(done.usage, None, "the endpoint sent no usage");
}

#[tokio::test]
async fn the_agent_asks_again_after_the_endpoint_cuts_an_answer_off_when_told_to() {
    let cut = sse(&[text_chunk("Half an ans")], false);
    let whole = sse(&[text_chunk("A whole answer."), finish_chunk("stop")], true);
    let (url, _) = server(vec![cut, whole]).await;
    let agent = Agent::new(OpenAiModel::new(url, "m"), Toolbox::new()).retry_model_turns(1);
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    let discarded: Vec<&ToolError> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnDiscarded { error } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(discarded.len(), 1);
    assert_eq!(discarded[0].kind(), ErrorKind::Unavailable);
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Finished);
    assert_eq!(
        done.messages.last(),
        Some(&Message::assistant("A whole answer."))
    );
}

/// A real OpenAI-compatible stream, recorded once through the client, is
/// replayed through the agent with no server: the same events, in order.
#[tokio::test]
async fn a_recorded_openai_run_replays_through_the_agent_without_the_server() {
    use toolstack::model::record::{RecordLayer, ReplayModel};
    use tower::Layer;
    let first = sse(
        &[
            call_chunk(0, Some("call_1"), Some("echo"), "{\"te"),
            call_chunk(0, None, None, "xt\":\"hi\"}"),
            finish_chunk("tool_calls"),
        ],
        true,
    );
    let second = sse(
        &[
            text_chunk("ech"),
            text_chunk("oed"),
            finish_chunk("stop"),
            usage_chunk(),
        ],
        true,
    );
    let (url, _bodies) = server(vec![first, second]).await;
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Echo {
        text: String,
    }
    let tools = || {
        Toolbox::new().tool(toolstack::tool::from_fn(
            "echo",
            |Echo { text }| async move { Ok::<_, ToolError>(text) },
        ))
    };
    let file = std::env::temp_dir().join(format!(
        "toolstack-openai-recording-{}-{:?}.jsonl",
        std::process::id(),
        std::thread::current().id()
    ));
    let recorded = RecordLayer::create(&file)
        .unwrap()
        .layer(OpenAiModel::new(url, "m"));
    let live: Vec<AgentEvent> = Agent::new(recorded, tools())
        .run(vec![Message::user("say hi")])
        .collect()
        .await;
    let replay = ReplayModel::open(&file).unwrap();
    assert_eq!(replay.len(), 2);
    let replayed: Vec<AgentEvent> = Agent::new(replay.clone(), tools())
        .run(vec![Message::user("say hi")])
        .collect()
        .await;
    assert_eq!(format!("{replayed:?}"), format!("{live:?}"));
    assert_eq!(replay.replayed(), 2);
    let Some(AgentEvent::Done(done)) = replayed.last() else {
        panic!("no Done")
    };
    assert_eq!(done.stop, StopReason::Finished);
    assert!(done.usage.is_some(), "the recorded usage is replayed");
    let _ = std::fs::remove_file(&file);
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    days: u32,
}

#[tokio::test]
async fn a_typed_answer_over_the_openai_client_asks_for_json_schema_and_is_corrected_once() {
    // The first answer misses a field; the second is right.
    let first = sse(
        &[text_chunk(r#"{"city": "Lisbon"}"#), finish_chunk("stop")],
        true,
    );
    let second = sse(
        &[
            text_chunk(r#"{"city": "Lisbon", "days": 3}"#),
            finish_chunk("stop"),
        ],
        true,
    );
    let (url, mut bodies) = server(vec![first, second]).await;
    let agent = Agent::new(OpenAiModel::new(url, "m"), Toolbox::new()).output::<Forecast>();
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
    let body = bodies.recv().await.unwrap();
    let format = &body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["strict"], true);
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        json!(["city", "days"])
    );
    // The correction names the missing field.
    let second_body = bodies.recv().await.unwrap();
    let said = second_body["messages"].to_string();
    assert!(said.contains("days"), "{said}");
}
