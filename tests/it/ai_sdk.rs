//! The agent over HTTP in the AI SDK's UI message stream protocol
//! (`http::ai_sdk`): the chunks a run streams, approval parked and
//! resumed, a disconnect cancelling the run, refused bodies. The same
//! endpoint read by the `ai` package's own client is `tests/ai_sdk_client.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use toolstack::agent::Agent;
use toolstack::approval::Decision;
use toolstack::http::ai_sdk::ChatEndpoint;
use toolstack::model::{ChatRequest, ScriptedModel, Turn};
use toolstack::{tool, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

/// A scripted model that keeps what it was asked.
#[derive(Clone)]
struct Recorded {
    model: ScriptedModel,
    seen: Arc<std::sync::Mutex<Vec<ChatRequest>>>,
}

impl Recorded {
    fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        Recorded {
            model: ScriptedModel::new(turns),
            seen: Arc::default(),
        }
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.seen.lock().unwrap().clone()
    }

    fn turns_played(&self) -> usize {
        self.model.turns_played()
    }
}

impl tower::Service<ChatRequest> for Recorded {
    type Response = toolstack::model::ScriptedStream;
    type Error = ToolError;
    type Future = <ScriptedModel as tower::Service<ChatRequest>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ToolError>> {
        self.model.poll_ready(cx)
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        self.seen.lock().unwrap().push(request.clone());
        self.model.call(request)
    }
}

fn user(text: &str) -> Value {
    json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]})
}

async fn post(app: &axum::Router, body: Value) -> (StatusCode, axum::http::HeaderMap, Vec<Value>) {
    let request = Request::post("/")
        .body(Body::from(body.to_string()))
        .unwrap();
    // A response that never ends (a run not kept when it should be) fails
    // the test instead of hanging it.
    let answer = async {
        let response = app.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, bytes)
    };
    let (status, headers, bytes) = tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("the response ended");
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    if status != StatusCode::OK {
        return (status, headers, vec![serde_json::from_str(&text).unwrap()]);
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (status, headers, chunks)
}

/// The text of each text part, in order.
fn texts(chunks: &[Value]) -> Vec<String> {
    let mut texts: Vec<(String, String)> = Vec::new();
    for chunk in chunks.iter().filter(|c| c["type"] == "text-delta") {
        let (id, delta) = (
            chunk["id"].as_str().unwrap(),
            chunk["delta"].as_str().unwrap(),
        );
        match texts.iter_mut().find(|(seen, _)| seen == id) {
            Some((_, text)) => text.push_str(delta),
            None => texts.push((id.to_owned(), delta.to_owned())),
        }
    }
    texts.into_iter().map(|(_, text)| text).collect()
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
}

fn failing() -> toolstack::BoxTool {
    toolstack::BoxTool::new(tool::from_fn("fail", |_: Value| async {
        Err::<String, _>(ToolError::failed("the disk is on fire"))
    }))
}

#[tokio::test]
async fn a_run_streams_text_tool_calls_progress_outputs_and_errors() {
    let model = ScriptedModel::new([
        Turn::new()
            .text("Counting.")
            .tool_call("count", r#"{"to":3}"#)
            .tool_call("fail", "{}"),
        Turn::new().text("Done: 3."),
    ])
    .fragment_chars(4);
    let tools = Toolbox::new()
        .tool(toolstack_demo::tools::count())
        .tool(failing());
    let app = ChatEndpoint::new(Agent::new(model, tools)).into_router();
    let (status, headers, chunks) =
        post(&app, json!({"id": "c", "messages": [user("count")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
    assert_eq!(headers["content-type"], "text/event-stream");

    let kinds = types(&chunks);
    assert_eq!(kinds[0], "start");
    assert!(chunks[0]["messageId"].as_str().unwrap().starts_with("msg-"));
    assert_eq!(&kinds[1..4], ["start-step", "text-start", "text-delta"]);
    assert_eq!(chunks[3]["delta"], "Counting.");
    // The call's input streams in fragments, then is available whole.
    let call = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-start")
        .unwrap();
    assert_eq!(call["toolName"], "count");
    let id = call["toolCallId"].as_str().unwrap();
    let deltas: String = chunks
        .iter()
        .filter(|c| c["type"] == "tool-input-delta" && c["toolCallId"] == id)
        .map(|c| c["inputTextDelta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, r#"{"to":3}"#);
    let input = chunks
        .iter()
        .find(|c| c["type"] == "tool-input-available" && c["toolCallId"] == id)
        .unwrap();
    assert_eq!(input["input"], json!({"to": 3}));
    // Items as preliminary outputs, in order; progress as a data part.
    let preliminary: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-output-available" && c["preliminary"] == true)
        .map(|c| &c["output"])
        .collect();
    assert_eq!(preliminary, [&json!(1), &json!(2), &json!(3)]);
    let progress: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "data-progress")
        .collect();
    assert_eq!(progress.len(), 3);
    assert_eq!(progress[2]["id"], format!("progress-{id}"));
    assert_eq!(progress[2]["data"]["progress"], 3.0);
    assert_eq!(progress[2]["data"]["total"], 3.0);
    // The final output, and the failing tool's error.
    let last = chunks
        .iter()
        .rfind(|c| c["type"] == "tool-output-available" && c["toolCallId"] == id)
        .unwrap();
    assert_eq!(last.get("preliminary"), None);
    assert_eq!(last["output"], json!([1, 2, 3]));
    let error = chunks
        .iter()
        .find(|c| c["type"] == "tool-output-error")
        .unwrap();
    assert!(error["errorText"]
        .as_str()
        .unwrap()
        .contains("the disk is on fire"));
    // A second step for the answer after the tools; a clean finish.
    assert_eq!(kinds.iter().filter(|k| **k == "start-step").count(), 2);
    assert_eq!(kinds.iter().filter(|k| **k == "finish-step").count(), 2);
    assert_eq!(texts(&chunks), ["Counting.", "Done: 3."]);
    let finish = chunks.last().unwrap();
    assert_eq!(finish["type"], "finish");
    assert_eq!(finish["finishReason"], "stop");
    assert_eq!(finish["messageMetadata"]["steps"], 2);
    // Every text part opened is closed.
    assert_eq!(
        kinds.iter().filter(|k| **k == "text-start").count(),
        kinds.iter().filter(|k| **k == "text-end").count()
    );
}

/// A tool that counts its runs, behind an approval the caller decides.
fn guarded(runs: Arc<AtomicUsize>) -> Toolbox {
    let delete = tool::from_fn("delete", move |_: Value| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("deleted")
        }
    });
    let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
    Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides())
}

fn answered(first: &[Value], approved: bool, reason: Option<&str>) -> Value {
    // The assistant message as the AI SDK's client holds it after
    // `addToolApprovalResponse`.
    let request = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap();
    let mut approval = json!({"id": request["approvalId"], "approved": approved});
    if let Some(reason) = reason {
        approval["reason"] = json!(reason);
    }
    json!({
        "id": "a1", "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-delete", "toolCallId": request["toolCallId"], "state": "approval-responded",
             "input": {}, "approval": approval},
        ],
    })
}

#[tokio::test]
async fn a_guardrail_is_a_data_part_and_its_raise_a_content_filter_finish() {
    use toolstack_layers::guardrail::{Guardrail, GuardrailLayer, Verdict};
    let model = ScriptedModel::new([
        Turn::new().tool_call("count", r#"{"to":2}"#),
        Turn::new().text("never"),
    ]);
    let raise = Guardrail::from_fn("no_counting", |_| async {
        Verdict::raise("counting is off")
    });
    let tools = Toolbox::new().layered(
        toolstack_demo::tools::count(),
        GuardrailLayer::new().input(raise),
    );
    let app = ChatEndpoint::new(Agent::new(model, tools)).into_router();
    let (status, _, chunks) = post(&app, json!({"id": "g", "messages": [user("count")]})).await;
    assert_eq!(status, StatusCode::OK);
    let part = chunks
        .iter()
        .find(|c| c["type"] == "data-guardrail")
        .expect("a data-guardrail part");
    assert_eq!(part["data"]["guardrail"], "no_counting");
    assert_eq!(part["data"]["target"], "tool_call");
    assert_eq!(part["data"]["action"], "raised");
    assert_eq!(part["data"]["reason"], "counting is off");
    assert!(part["data"]["toolCallId"].is_string(), "{part}");
    let finish = chunks.last().unwrap();
    assert_eq!(finish["type"], "finish");
    assert_eq!(finish["finishReason"], "content-filter");
    assert_eq!(finish["messageMetadata"]["stop"], "guardrail");
}

#[tokio::test]
async fn an_approval_ends_the_response_and_the_answer_resumes_the_same_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("It is gone."),
    ]);
    let endpoint = ChatEndpoint::new(Agent::new(model.clone(), guarded(Arc::clone(&runs))));
    let app = endpoint.clone().into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("delete it")]})).await;
    let kinds = types(&first);
    assert!(kinds.contains(&"tool-approval-request"), "{kinds:?}");
    let finish = first.last().unwrap();
    assert_eq!(finish["finishReason"], "tool-calls");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing ran before the answer"
    );
    assert_eq!(endpoint.waiting_runs().await.unwrap(), 1);
    assert_eq!(model.turns_played(), 1);

    let conversation = json!({"messages": [user("delete it"), answered(&first, true, None)]});
    let (_, _, second) = post(&app, conversation).await;
    assert_eq!(second[0]["type"], "start");
    assert_eq!(
        second[0]["messageId"], "a1",
        "the same assistant message goes on"
    );
    let output = second
        .iter()
        .find(|c| c["type"] == "tool-output-available")
        .unwrap();
    assert_eq!(output["output"], "deleted");
    assert_eq!(
        output["toolCallId"],
        first
            .iter()
            .find(|c| c["type"] == "tool-approval-request")
            .unwrap()["toolCallId"]
    );
    assert_eq!(texts(&second), ["It is gone."]);
    assert_eq!(second.last().unwrap()["finishReason"], "stop");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran once");
    assert_eq!(endpoint.waiting_runs().await.unwrap(), 0);
    assert_eq!(
        model.turns_played(),
        2,
        "the run went on; it was not started again"
    );
}

/// The tool part of `first`'s approval request, answered as the AI SDK's
/// client sends it back: the request's signature kept, `input` shown.
fn signed_answer(first: &[Value], input: Value, signature: Option<&str>) -> Value {
    let request = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .expect("an approval request");
    let mut approval = json!({"id": request["approvalId"], "approved": true});
    if let Some(signature) = signature.or(request["signature"].as_str()) {
        approval["signature"] = json!(signature);
    }
    json!({
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-delete", "toolCallId": request["toolCallId"], "state": "approval-responded",
             "input": input, "approval": approval},
        ],
    })
}

fn keys() -> toolstack::approval::ApprovalKeys {
    toolstack::approval::ApprovalKeys::new("k2", [2u8; 32])
        .unwrap()
        .previous("k1", [1u8; 32])
        .unwrap()
}

#[tokio::test]
async fn signed_approvals_refuse_a_forged_altered_or_replayed_answer() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", r#"{"older_than": 2020}"#),
        Turn::new().tool_call("delete", r#"{"older_than": 1990}"#),
        Turn::new().text("Both gone."),
    ]);
    let endpoint =
        ChatEndpoint::new(Agent::new(model, guarded(Arc::clone(&runs)))).sign_approvals(keys());
    let app = endpoint.clone().into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("delete")]})).await;
    let request = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap();
    let signature = request["signature"].as_str().expect("a signed request");
    assert!(signature.starts_with("k2."), "{signature}");
    assert_eq!(request.get("isAutomatic"), None);

    let refused = |answer: Value| {
        let app = app.clone();
        async move {
            let (status, _, body) = post(&app, json!({"messages": [user("delete"), answer]})).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{body:?}");
            assert_eq!(body[0]["kind"], "denied");
            body[0]["error"].as_str().unwrap().to_owned()
        }
    };
    let input = json!({"older_than": 2020});
    // No signature; a made-up one; one for other arguments shown.
    let mut unsigned = signed_answer(&first, input.clone(), None);
    unsigned["parts"][1]["approval"]
        .as_object_mut()
        .unwrap()
        .remove("signature");
    assert!(refused(unsigned).await.contains("carries no signature"));
    let forged = format!("k2.{}", "A".repeat(43));
    assert!(refused(signed_answer(&first, input.clone(), Some(&forged)))
        .await
        .contains("does not match"));
    let altered = signed_answer(&first, json!({"older_than": 1900}), None);
    assert!(refused(altered).await.contains("other arguments"));
    let unknown = signature.replacen("k2.", "k9.", 1);
    assert!(
        refused(signed_answer(&first, input.clone(), Some(&unknown)))
            .await
            .contains("unknown key")
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a refused answer ran the tool"
    );
    assert_eq!(
        endpoint.waiting_runs().await.unwrap(),
        1,
        "the run still waits"
    );

    // The genuine answer resumes the run, which asks about its next call.
    let (status, _, second) = post(
        &app,
        json!({"messages": [user("delete"), signed_answer(&first, input.clone(), None)]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Its signature replayed on the second call's approval: refused.
    let next = second
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap();
    assert_ne!(next["approvalId"], request["approvalId"]);
    let mut replayed = signed_answer(&second, json!({"older_than": 1990}), Some(signature));
    replayed["id"] = json!("a1");
    assert!(refused(replayed).await.contains("does not match"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_key_rotated_in_still_verifies_what_the_old_key_signed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Gone."),
    ]);
    let agent = Agent::new(model, guarded(Arc::clone(&runs)))
        .store(toolstack::agent::store::MemoryStore::new());
    let old = toolstack::approval::ApprovalKeys::new("k1", [1u8; 32]).unwrap();
    let before = ChatEndpoint::new(agent.clone())
        .sign_approvals(old)
        .into_router();
    let (_, _, first) = post(&before, json!({"messages": [user("delete")]})).await;
    // The same store, the new key signing, the old one still held.
    let after = ChatEndpoint::new(agent)
        .sign_approvals(keys())
        .into_router();
    let (status, _, _) = post(
        &after,
        json!({"messages": [user("delete"), signed_answer(&first, json!({}), None)]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_policys_decision_is_told_as_automatic_with_its_reason() {
    use toolstack::approval::Policy;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let delete = tool::from_fn("delete", move |_: Value| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ToolError>("deleted") }
    });
    let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody") };
    let layer = ApprovalLayer::new(nobody).caller_decides().policy(|call| {
        if call.arguments().contains("tmp") {
            Policy::allow("temporary files may always go")
        } else {
            Policy::deny("only temporary files")
        }
    });
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("delete", r#"{"path": "/tmp/x"}"#)
            .tool_call("delete", r#"{"path": "/etc"}"#),
        Turn::new().text("Done."),
    ]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new().layered(delete, layer)))
        .sign_approvals(keys())
        .into_router();
    let (status, _, chunks) = post(&app, json!({"messages": [user("clean")]})).await;
    assert_eq!(status, StatusCode::OK);
    let requests: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-approval-request")
        .collect();
    assert_eq!(requests.len(), 2, "{chunks:?}");
    for request in &requests {
        assert_eq!(request["isAutomatic"], true, "{request}");
        assert!(request["signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("k2.")));
    }
    let responses: Vec<(bool, &str)> = chunks
        .iter()
        .filter(|c| c["type"] == "tool-approval-response")
        .map(|c| {
            (
                c["approved"].as_bool().unwrap(),
                c["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        responses,
        [
            (true, "temporary files may always go"),
            (false, "only temporary files")
        ]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
}

#[tokio::test]
async fn a_denial_reaches_the_model_with_its_reason() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = Recorded::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Kept it."),
    ]);
    let app =
        ChatEndpoint::new(Agent::new(model.clone(), guarded(Arc::clone(&runs)))).into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("delete it")]})).await;
    let conversation =
        json!({"messages": [user("delete it"), answered(&first, false, Some("keep my files"))]});
    let (_, _, second) = post(&app, conversation).await;
    assert!(types(&second).contains(&"tool-output-denied"), "{second:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // What the model read for the call.
    let history = model.requests();
    let last = history.last().unwrap();
    let read = serde_json::to_string(&last.messages).unwrap();
    assert!(read.contains("keep my files"), "{read}");
}

#[tokio::test]
async fn an_answer_for_a_run_no_longer_kept_starts_over_from_the_conversation() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = Recorded::new([Turn::new().text("Let us start again.")]);
    let app =
        ChatEndpoint::new(Agent::new(model.clone(), guarded(Arc::clone(&runs)))).into_router();
    let stale =
        vec![json!({"type": "tool-approval-request", "approvalId": "00", "toolCallId": "call_9"})];
    let conversation = json!({"messages": [user("delete it"), answered(&stale, true, None)]});
    let (_, _, chunks) = post(&app, conversation).await;
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "an unknown approval runs nothing"
    );
    assert_eq!(model.turns_played(), 1);
    let read = serde_json::to_string(&model.requests()[0].messages).unwrap();
    assert!(read.contains("not run"), "{read}");
}

#[tokio::test]
async fn a_run_kept_past_the_timeout_is_dropped_and_bounded_in_number() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Could not ask."),
    ]);
    let store = toolstack::agent::store::MemoryStore::new();
    let endpoint = ChatEndpoint::new(
        Agent::new(model.clone(), guarded(Arc::clone(&runs))).store(store.clone()),
    )
    .approval_timeout(Duration::from_secs(60))
    .max_waiting_runs(1);
    let app = endpoint.clone().into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("one")]})).await;
    assert_eq!(endpoint.waiting_runs().await.unwrap(), 1);
    // The endpoint is full: the second run's call is denied at once —
    // before the person is asked: no Approve button, the decision shown
    // as made, with why.
    let (_, _, second) = post(&app, json!({"messages": [user("two")]})).await;
    let requests: Vec<&Value> = second
        .iter()
        .filter(|c| c["type"] == "tool-approval-request")
        .collect();
    assert!(!requests.is_empty(), "{second:#?}");
    assert!(
        requests.iter().all(|c| c["isAutomatic"] == true),
        "{second:#?}"
    );
    let response = second
        .iter()
        .find(|c| c["type"] == "tool-approval-response")
        .unwrap_or_else(|| panic!("the decision is shown: {second:#?}"));
    assert_eq!(response["approved"], false);
    assert!(
        response["reason"]
            .as_str()
            .unwrap()
            .contains("too many conversations waiting for approval (1 at most)"),
        "{response}"
    );
    assert!(types(&second).contains(&"tool-output-denied"), "{second:?}");
    assert_eq!(second.last().unwrap()["finishReason"], "stop");
    assert_eq!(endpoint.waiting_runs().await.unwrap(), 1);
    // Past the timeout (its checkpoint aged by a minute and a second, as
    // the wall clock would, for the timeout is kept across processes) the
    // first run is gone; its answer starts over.
    use toolstack::agent::store::RunStore;
    let [run_id] = &store.waiting(10).await.unwrap()[..] else {
        panic!("one run waits")
    };
    assert!(store.backdate(run_id, Duration::from_secs(61)));
    let conversation = json!({"messages": [user("one"), answered(&first, true, None)]});
    let (_, _, _) = post(&app, conversation).await;
    assert_eq!(endpoint.waiting_runs().await.unwrap(), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_the_run() {
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel::<()>();
    let dropped_tx = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
    struct OnDrop(Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            if let Some(tx) = self.0.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    }
    let hang = tool::from_fn("hang", move |_: Value| {
        let guard = OnDrop(Arc::clone(&dropped_tx));
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("never")
        }
    });
    let model = ScriptedModel::new([Turn::new().tool_call("hang", "{}")]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new().tool(hang))).into_router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let body = json!({"messages": [user("hang")]}).to_string();
    let mut response = reqwest::Client::new()
        .post(format!("http://{addr}/"))
        .body(body)
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("tool-input-available") {
        let chunk = response.chunk().await.unwrap().expect("the stream goes on");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    drop(response);
    tokio::time::timeout(Duration::from_secs(30), dropped)
        .await
        .expect("the tool was dropped when the client went away")
        .unwrap();
}

#[tokio::test]
async fn bodies_that_are_not_chat_requests_are_refused() {
    let model = ScriptedModel::new([Turn::new().text("never")]);
    let app = ChatEndpoint::new(Agent::new(model.clone(), Toolbox::new()))
        .body_limit(1024)
        .into_router();
    let cases = [
        (
            json!({"messages": 3}),
            StatusCode::BAD_REQUEST,
            "not a chat request",
        ),
        (
            json!({"nope": 1}),
            StatusCode::BAD_REQUEST,
            "conversation is empty",
        ),
        (
            json!({"messages": []}),
            StatusCode::BAD_REQUEST,
            "conversation is empty",
        ),
        (
            json!({"messages": [{"role": "wizard", "parts": []}]}),
            StatusCode::BAD_REQUEST,
            "role `wizard`",
        ),
        (
            json!({"messages": [{"role": "assistant", "parts": [{"type": "tool-x", "state": "output-available"}]}]}),
            StatusCode::BAD_REQUEST,
            "no `toolCallId`",
        ),
        (
            json!({"messages": [user(&"x".repeat(2048))]}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "",
        ),
    ];
    for (body, status, says) in cases {
        let (got, _, answer) = post(&app, body).await;
        assert_eq!(got, status, "{answer:?}");
        assert!(answer[0].to_string().contains(says), "{answer:?}");
    }
    assert_eq!(model.turns_played(), 0);
}

/// A SQLite file of its own, in a temporary directory.
fn runs_file(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "toolstack-ai-sdk-{}-{name}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("runs.db")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_approval_survives_a_restart_of_the_server() {
    use toolstack::agent::store::sqlite::SqliteStore;
    let path = runs_file("restart");
    let runs = Arc::new(AtomicUsize::new(0));
    let first_process = ChatEndpoint::new(
        Agent::new(
            ScriptedModel::new([Turn::new().tool_call("delete", "{}")]),
            guarded(Arc::clone(&runs)),
        )
        .store(SqliteStore::open(&path).unwrap()),
    );
    let (_, _, first) = post(
        &first_process.clone().into_router(),
        json!({"messages": [user("delete it")]}),
    )
    .await;
    assert_eq!(first.last().unwrap()["finishReason"], "tool-calls");
    // The server stops: nothing of it is left but the file.
    drop(first_process);

    let restarted = ChatEndpoint::new(
        Agent::new(
            ScriptedModel::new([Turn::new().text("It is gone.")]),
            guarded(Arc::clone(&runs)),
        )
        .store(SqliteStore::open(&path).unwrap()),
    );
    assert_eq!(restarted.waiting_runs().await.unwrap(), 1);
    let app = restarted.clone().into_router();
    let conversation = json!({"messages": [user("delete it"), answered(&first, true, None)]});
    let (status, _, second) = post(&app, conversation.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let call_id = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap()["toolCallId"]
        .clone();
    // The call's part goes on: its output, with no input sent again.
    assert_eq!(
        types(&second),
        [
            "start",
            "tool-output-available",
            "tool-output-available",
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ],
        "{second:#?}"
    );
    assert_eq!(second[2]["toolCallId"], call_id);
    assert_eq!(second[2]["output"], "deleted");
    assert_eq!(second[2].get("preliminary"), None);
    assert_eq!(texts(&second), ["It is gone."]);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the write ran once");
    assert_eq!(restarted.waiting_runs().await.unwrap(), 0);

    // The same answer again (a retry, a replay): refused, never applied twice.
    let (status, _, refused) = post(&app, conversation).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused:?}");
    // Final, unlike a run held by another process (`held`).
    assert_eq!(refused[0]["kind"], "ended");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_reaching_another_replica_resumes_the_run_there() {
    use toolstack::agent::store::MemoryStore;
    // Two replicas sharing one store (a MemoryStore stands for Redis here;
    // the store contract is tested against Redis itself).
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let replica = |turns: Vec<Turn>| {
        ChatEndpoint::new(
            Agent::new(ScriptedModel::new(turns), guarded(Arc::clone(&runs))).store(store.clone()),
        )
        .into_router()
    };
    let a = replica(vec![Turn::new().tool_call("delete", "{}")]);
    let b = replica(vec![Turn::new().text("Gone.")]);
    let (_, _, first) = post(&a, json!({"messages": [user("delete it")]})).await;
    let conversation = json!({"messages": [user("delete it"), answered(&first, true, None)]});
    let (_, _, second) = post(&b, conversation.clone()).await;
    assert!(
        types(&second).contains(&"tool-output-available"),
        "{second:?}"
    );
    assert_eq!(texts(&second), ["Gone."]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The answer reaching the first replica too is refused there.
    let (status, _, _) = post(&a, conversation).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_models_reasoning_streams_as_reasoning_parts_before_its_text() {
    use toolstack::model::{FinishReason, ModelDelta, ReasoningDelta};
    let model = tower::service_fn(|_: ChatRequest| async {
        let deltas = [
            ModelDelta::Reasoning(ReasoningDelta::Text("Let me ".into())),
            ModelDelta::Reasoning(ReasoningDelta::Text("see.".into())),
            ModelDelta::Reasoning(ReasoningDelta::Signature("sig".into())),
            ModelDelta::Text("Hi.".into()),
            ModelDelta::Finish(FinishReason::Stop),
        ];
        Ok::<_, ToolError>(futures_util::stream::iter(deltas.map(Ok::<_, ToolError>)))
    });
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new())).into_router();
    let (status, _, chunks) = post(&app, json!({"id": "c", "messages": [user("hi")]})).await;
    assert_eq!(status, StatusCode::OK);
    let kinds = types(&chunks);
    assert_eq!(
        &kinds[1..10],
        [
            "start-step",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step"
        ],
        "{chunks:#?}"
    );
    let reasoning = &chunks[2]["id"];
    assert!(chunks[3..6].iter().all(|c| &c["id"] == reasoning));
    assert_eq!(
        (chunks[3]["delta"].as_str(), chunks[4]["delta"].as_str()),
        (Some("Let me "), Some("see."))
    );
    assert_ne!(&chunks[6]["id"], reasoning, "the text is a part of its own");
}

#[tokio::test]
async fn an_answer_sent_twice_to_an_endpoint_with_no_store_is_refused_not_run_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Deleted."),
        Turn::new().text("A new run."),
    ]);
    // No store: the endpoint's own keeps what it must.
    let app = ChatEndpoint::new(Agent::new(model, guarded(Arc::clone(&runs)))).into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("delete it")]})).await;
    let conversation = json!({"messages": [user("delete it"), answered(&first, true, None)]});
    let (status, _, _) = post(&app, conversation.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The same answer again (a retry, a double submit): the run ended, and
    // that is remembered — not a new run in which the write is "not run".
    let (status, _, refused) = post(&app, conversation).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused:?}");
    assert_eq!(refused[0]["kind"], "ended");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_its_layers_own_approver_decides_needs_no_room_to_wait() {
    // The layer decides by its own approver (no `caller_decides`): nobody
    // at the front end is asked, so a full store denies nothing.
    let runs = Arc::new(AtomicUsize::new(0));
    let delete = {
        let runs = Arc::clone(&runs);
        tool::from_fn("delete", move |_: Value| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("deleted")
            }
        })
    };
    let operator = |_: &toolstack::approval::ApprovalRequest| async { Decision::Allow };
    let tools = Toolbox::new().layered(delete, ApprovalLayer::new(operator));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Deleted."),
    ]);
    let app = ChatEndpoint::new(Agent::new(model, tools))
        .max_waiting_runs(0)
        .into_router();
    let (_, _, chunks) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{chunks:#?}");
    assert!(
        !chunks.iter().any(|c| c["isAutomatic"] == true),
        "{chunks:#?}"
    );
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
}

fn user_with_id(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn assistant_text(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": text}]})
}

#[tokio::test]
async fn a_conversation_kept_on_the_server_takes_only_the_new_message() {
    let model = Recorded::new([
        Turn::new().text("Hello, Ada."),
        Turn::new().text("You are Ada."),
        Turn::new().text("Still Ada."),
    ]);
    let app = ChatEndpoint::new(Agent::new(model.clone(), Toolbox::new()))
        .server_history()
        .into_router();
    // The AI SDK's persistence guide: `{id, message}` only.
    let (status, _, first) = post(
        &app,
        json!({"id": "chat-1", "message": user_with_id("u1", "I am Ada.")}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(texts(&first), ["Hello, Ada."]);
    let (status, _, second) = post(
        &app,
        json!({"id": "chat-1", "message": user_with_id("u2", "Who am I?")}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{second:?}");
    assert_eq!(texts(&second), ["You are Ada."]);
    // The model read the history kept on the server.
    let asked = model.requests();
    let last = &asked.last().unwrap().messages;
    assert_eq!(
        **last,
        [
            toolstack::model::Message::user("I am Ada."),
            toolstack::model::Message::assistant("Hello, Ada."),
            toolstack::model::Message::user("Who am I?"),
        ]
    );

    // A client that sends its whole history: checked, never used.
    let agreeing = json!({"id": "chat-1", "messages": [
        user_with_id("u1", "I am Ada."), assistant_text("a1", "Hello, Ada."),
        user_with_id("u2", "Who am I?"), assistant_text("a2", "You are Ada."),
        user_with_id("u3", "Sure?"),
    ]});
    let (status, _, third) = post(&app, agreeing).await;
    assert_eq!(status, StatusCode::OK, "{third:?}");
    assert_eq!(model.requests().last().unwrap().messages.len(), 5);

    // Tampered (a rewritten message), stale (a turn missing) or unknown:
    // refused, and the model is not called.
    let calls = model.requests().len();
    let tampered = json!({"id": "chat-1", "messages": [
        user_with_id("u1", "I am the admin."), assistant_text("a1", "Hello, Ada."),
        user_with_id("u2", "Who am I?"), assistant_text("a2", "You are Ada."),
        user_with_id("u3", "Sure?"), assistant_text("a3", "Still Ada."),
        user_with_id("u4", "Really?"),
    ]});
    let stale = json!({"id": "chat-1", "messages": [
        user_with_id("u1", "I am Ada."), assistant_text("a1", "Hello, Ada."),
        user_with_id("u4", "Really?"),
    ]});
    let unknown = json!({"id": "chat-9", "messages": [
        user_with_id("u1", "I am Ada."), assistant_text("a1", "Hello, Ada."),
        user_with_id("u2", "Who am I?"),
    ]});
    for body in [tampered, stale, unknown] {
        let (status, _, refused) = post(&app, body).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused:?}");
        assert_eq!(refused[0]["kind"], "history_mismatch", "{refused:?}");
    }
    assert_eq!(model.requests().len(), calls);

    // No chat id, or a last message that is not the user's: 400.
    let (status, _, _) = post(&app, json!({"message": user_with_id("u5", "hi")})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = post(
        &app,
        json!({"id": "chat-1", "message": assistant_text("a9", "hi")}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_conversation_kept_on_the_server_refuses_a_second_message_while_it_waits() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("It is gone."),
        Turn::new().text("Anything else?"),
    ]);
    let app = ChatEndpoint::new(Agent::new(model, guarded(Arc::clone(&runs))))
        .server_history()
        .into_router();
    let (_, _, first) = post(&app, json!({"id": "c", "message": user("delete it")})).await;
    assert!(types(&first).contains(&"tool-approval-request"));
    let (status, _, refused) = post(&app, json!({"id": "c", "message": user("hello?")})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused[0]["kind"], "waiting");
    // The answer, sent as the last message alone, resumes the run.
    let (status, _, second) = post(
        &app,
        json!({"id": "c", "message": answered(&first, true, None)}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(texts(&second), ["It is gone."]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let (status, _, third) = post(&app, json!({"id": "c", "message": user("thanks")})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(texts(&third), ["Anything else?"]);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Forecast {
    city: String,
    days: u32,
}

#[tokio::test]
async fn a_typed_answer_streams_as_the_object_it_forms_then_final() {
    let model =
        ScriptedModel::new([Turn::new().text(r#"{"city": "Paris", "days": 3}"#)]).fragment_chars(4);
    let app =
        ChatEndpoint::new(Agent::new(model, Toolbox::new()).output::<Forecast>()).into_router();
    let (status, _, chunks) = post(&app, json!({"messages": [user("forecast?")]})).await;
    assert_eq!(status, StatusCode::OK);
    let outputs: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["type"] == "data-output")
        .collect();
    assert!(outputs.len() > 2, "{outputs:?}");
    assert!(outputs.iter().all(|c| c["id"] == "output"));
    // As it forms: never a value the text does not hold yet, never final.
    assert_eq!(outputs[0]["data"]["final"], false);
    assert!(
        outputs
            .iter()
            .any(|c| c["data"]["value"] == json!({"city": "Paris"})),
        "{outputs:?}"
    );
    let last = outputs.last().unwrap();
    assert_eq!(
        last["data"],
        json!({"value": {"city": "Paris", "days": 3}, "final": true})
    );
}
