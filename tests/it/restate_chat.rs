//! The AI SDK chat endpoint on Restate (`ChatEndpoint::restate`), against
//! a real `restate-server`: a message starts a run through the ingress
//! and its response streams the run's events from the log its service
//! writes; a call waiting for approval ends the response; the answer,
//! sent the protocol's way, reaches the call's workflow — after the
//! service process that ran the run was killed and replaced — and the
//! next response goes on in the same assistant message to the run's
//! end, and a client that reconnects mid-response reads it whole; an
//! answer to a run that ended is refused.
//!
//! Without the server binary the tests say SKIPPED loudly (and fail when
//! `TOOLSTACK_REQUIRE_RESTATE` is set): see `restate_server.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use toolstack::agent::restate::RestateRuns;
use toolstack::agent::run_events::MemoryRunEvents;
use toolstack::agent::Agent;
use toolstack::approval::{ApprovalRequest, Decision};
use toolstack::http::ai_sdk::{ChatEndpoint, MemoryChunkLog, RestateIngress};
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolAnnotations, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

use super::restate_runs::Service;
use super::restate_server::start;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    #[allow(dead_code)]
    path: String,
}

/// The endpoint's answer to `body`: its status and, for a stream, its
/// chunks (else the refusal's JSON).
async fn post(app: &axum::Router, body: Value) -> (StatusCode, Vec<Value>) {
    let request = Request::post("/")
        .body(Body::from(body.to_string()))
        .unwrap();
    let answer = async {
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, bytes)
    };
    let (status, bytes) = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("the response ended");
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    if status != StatusCode::OK {
        return (
            status,
            vec![serde_json::from_str(&text).unwrap_or(json!(text))],
        );
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (status, chunks)
}

fn of_type<'a>(chunks: &'a [Value], kind: &str) -> Vec<&'a Value> {
    chunks.iter().filter(|c| c["type"] == kind).collect()
}

fn text(chunks: &[Value]) -> String {
    of_type(chunks, "text-delta")
        .iter()
        .filter_map(|c| c["delta"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_on_restate_waits_for_its_approval_and_goes_on_after_a_kill() {
    let Some(restate) = start("restate_chat") else {
        return;
    };
    let log = MemoryRunEvents::new();
    let model = ScriptedModel::new([
        Turn::new()
            .text("Deleting it.")
            .tool_call("delete", r#"{"path":"/tmp/x"}"#),
        Turn::new().text("Done."),
    ]);
    let deletes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&deletes);
    // The write takes a while: the answer's response is in progress long
    // enough for a client to reconnect to it.
    let delete = tool::from_fn("delete", move |_: Path| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ToolError>("deleted")
        }
    })
    .with_annotations(ToolAnnotations::new().idempotent(false));
    let tools = Toolbox::new().layered(
        delete,
        ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no approver") })
            .caller_decides(),
    );
    let agent = Agent::new(model, tools);
    let runs = || {
        RestateRuns::new(agent.clone())
            .suspend_after(Duration::from_secs(1))
            .events(log.clone())
    };
    let mut service = Service::serving(runs(), "127.0.0.1:0".parse().unwrap());
    let addr = service.addr;
    restate
        .register(&service.uri())
        .expect("the service registers");
    let endpoint = ChatEndpoint::new(agent.clone())
        .restate(RestateIngress::new(restate.ingress_url(), log.clone()))
        .resumable_streams(MemoryChunkLog::new());
    let app = axum::Router::new().merge(endpoint.into_router());

    let user =
        json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "delete /tmp/x"}]});
    let (status, first) = post(&app, json!({"id": "chat-1", "messages": [user]})).await;
    assert_eq!(status, StatusCode::OK, "{first:?}");
    assert_eq!(text(&first), "Deleting it.", "{first:?}");
    let asked = of_type(&first, "tool-approval-request");
    assert_eq!(asked.len(), 1, "{first:?}");
    let (approval_id, call_id) = (
        asked[0]["approvalId"].clone(),
        asked[0]["toolCallId"].clone(),
    );
    assert_eq!(
        of_type(&first, "finish").last().unwrap()["finishReason"],
        "tool-calls",
        "the response ends while the call waits: {first:?}"
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 0);

    // The run suspends; the process that ran it dies and another takes
    // its place before the person answers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    service.kill();
    let _service = Service::serving(runs(), addr);

    let assistant = json!({
        "id": "a1", "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "Deleting it."},
            {"type": "tool-delete", "toolCallId": call_id, "state": "approval-responded",
             "input": {"path": "/tmp/x"}, "approval": {"id": approval_id, "approved": true}},
        ],
    });
    let answer = json!({"id": "chat-1", "messages": [user, assistant]});
    let answering = {
        let (app, answer) = (app.clone(), answer.clone());
        tokio::spawn(async move { post(&app, answer).await })
    };
    // A client that reconnects while the answer's response goes on gets
    // it from its first chunk, then live, to its end.
    tokio::time::sleep(Duration::from_millis(800)).await;
    // And one that sends its answer again (its reply lost) after the
    // decision was taken is not given a new run: the same response.
    let resending = {
        let (app, answer) = (app.clone(), answer.clone());
        tokio::spawn(async move { post(&app, answer).await })
    };
    // (A loaded machine may open the response's log late: asked again
    // for a while, well within the write's 2 s.)
    let mut tries = 0;
    let response = loop {
        let request = Request::get("/chat-1/stream").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        if response.status() == StatusCode::OK || tries == 10 {
            break response;
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "a response is in progress"
    );
    let bytes = tokio::time::timeout(
        Duration::from_secs(60),
        axum::body::to_bytes(response.into_body(), usize::MAX),
    )
    .await
    .expect("the replay ends")
    .unwrap();
    let replayed: Vec<Value> = String::from_utf8(bytes.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let (status, second) = answering.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{second:?}");
    assert_eq!(
        replayed, second,
        "the reconnected client reads the same response"
    );
    let (status, resent) = resending.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{resent:?}");
    assert_eq!(
        resent, second,
        "an answer sent again reads the same response"
    );
    assert_eq!(second[0]["type"], "start");
    assert_eq!(
        second[0]["messageId"], "a1",
        "the same assistant message goes on"
    );
    let outputs = of_type(&second, "tool-output-available");
    assert!(
        outputs.iter().any(|c| c["output"] == "deleted"),
        "{second:?}"
    );
    assert_eq!(
        text(&second),
        "Done.",
        "nothing of the first response again: {second:?}"
    );
    assert!(
        of_type(&second, "tool-approval-request").is_empty(),
        "{second:?}"
    );
    assert_eq!(
        of_type(&second, "finish").last().unwrap()["finishReason"],
        "stop",
        "{second:?}"
    );
    assert_eq!(deletes.load(Ordering::SeqCst), 1);

    // The run has ended: the same answer again changes nothing.
    let (status, refusal) = post(&app, answer).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refusal:?}");
    assert_eq!(refusal[0]["kind"], "ended", "{refusal:?}");
    assert_eq!(deletes.load(Ordering::SeqCst), 1);
}
