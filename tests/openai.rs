//! The OpenAI-compatible client against an in-process server on 127.0.0.1
//! that replays chunk sequences in the documented SSE format.
#![cfg(feature = "openai")]

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{Accumulator, ChatRequest, FinishReason, Message, ModelDelta, OpenAiModel};
use toolstack::{ErrorKind, ToolError, ToolInfo, Toolbox};
use tower::ServiceExt;

#[path = "support/http_request.rs"]
mod http_request;

/// Serves one canned response per connection, in order; returns the base
/// URL and a channel of the request bodies received.
async fn server(responses: Vec<String>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for response in responses {
            let (mut socket, _) = listener.accept().await.unwrap();
            let body = http_request::read_body(&mut socket).await;
            let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
            socket.write_all(response.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    (url, rx)
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
            ModelDelta::Usage(toolstack::model::Usage {
                prompt_tokens: 12,
                completion_tokens: 5
            }),
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
                acc.push(&fragment);
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
    assert!(items[1]
        .as_ref()
        .unwrap_err()
        .message()
        .contains("malformed chunk"));
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
