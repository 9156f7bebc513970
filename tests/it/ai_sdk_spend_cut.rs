//! A run a spend limit stops, over the AI SDK endpoint: the response
//! keeps the text streamed before the cut (its part ended), then an
//! `error` chunk with the limit's message, and a `finish` whose
//! `messageMetadata.stop` is `spend_limit` (`finishReason` is `other`: the
//! protocol has no reason for it).

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use toolstack::agent::Agent;
use toolstack::http::ai_sdk::ChatEndpoint;
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{ErrorKind, ToolError, Toolbox};

/// The limit's message, as the spend layer words one.
const LIMIT: &str = "this caller has spent $0.50 of its $0.50 limit for today (12,000 tokens)";

/// The chunks of the response to `body`, `[DONE]` checked and left out.
async fn chunks(app: &axum::Router, body: Value) -> Vec<Value> {
    let request = Request::post("/")
        .body(Body::from(body.to_string()))
        .unwrap();
    let answer = async {
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
    };
    let bytes = tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("the response ended");
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    text.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

#[tokio::test]
async fn a_spend_limited_run_keeps_its_text_and_says_why_it_stopped() {
    let model = ScriptedModel::new([Turn::new()
        .text("Here is the start of it")
        .fail(ToolError::new(ErrorKind::SpendLimited, LIMIT))])
    .fragment_chars(6);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new())).into_router();
    let user = json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Go."}]});
    let chunks = chunks(&app, json!({"id": "c", "messages": [user]})).await;
    let text: String = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Here is the start of it");
    // After the last delta: the text part ended, the error, the step's
    // and the message's ends — nothing else.
    let last_delta = chunks
        .iter()
        .rposition(|c| c["type"] == "text-delta")
        .unwrap();
    let after: Vec<&Value> = chunks[last_delta + 1..].iter().collect();
    let types: Vec<&str> = after.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["text-end", "error", "finish-step", "finish"],
        "{chunks:?}"
    );
    assert_eq!(after[1]["errorText"], LIMIT);
    let finish = after[3];
    assert_eq!(finish["finishReason"], "other");
    assert_eq!(finish["messageMetadata"]["stop"], "spend_limit");
}
