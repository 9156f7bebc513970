//! The AI SDK endpoint while its run store is down: a refused request is
//! `503` with `Retry-After` and says why; a run whose store failed
//! mid-stream ends with an `error` chunk that says the store was
//! unavailable and that the answer can be sent again — and, once the
//! store is back, the answer sent again completes the run, in any process.
//!
//! The clock is paused in each test: however long the agent rides out the
//! outage before it gives up, it does so in virtual time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, Request, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tower::ServiceExt;

use toolstack::agent::store::{
    Append, MemoryStore, RunStatus, RunStore, StoreError, Stored, Version,
};
use toolstack::agent::Agent;
use toolstack::approval::Decision;
use toolstack::http::ai_sdk::{ChatEndpoint, ChunkLog, Logged, MemoryChunkLog};
use toolstack::model::{ScriptedModel, Turn};
use toolstack::{tool, ToolError, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

/// A run store that is down while `down` is set (every call answers
/// `Unavailable`), and that goes down by itself after `appends_left`
/// appends, (`before_waiting`) at the append that suspends a run, or
/// (`at_decision`, while set) at the append that records a person's
/// decision — storing it first when `reply_lost` is set, as a store that
/// dies between the write and its answer.
#[derive(Clone)]
struct Outage {
    inner: MemoryStore,
    down: Arc<AtomicBool>,
    appends_left: Arc<AtomicUsize>,
    before_waiting: bool,
    at_decision: Arc<AtomicBool>,
    reply_lost: Arc<AtomicBool>,
    /// The waiting count (only) does not answer until then.
    count_down_until: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
}

impl Outage {
    fn new(appends: usize) -> Self {
        Outage {
            inner: MemoryStore::new(),
            down: Arc::default(),
            appends_left: Arc::new(AtomicUsize::new(appends)),
            before_waiting: false,
            at_decision: Arc::default(),
            reply_lost: Arc::default(),
            count_down_until: Arc::default(),
        }
    }

    fn gone<T: Send + 'static>() -> BoxFuture<'static, Result<T, StoreError>> {
        Box::pin(async { Err(StoreError::unavailable("Redis did not answer within 2s")) })
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }
}

impl RunStore for Outage {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        match self.is_down() {
            true => Self::gone(),
            false => self.inner.load(run_id),
        }
    }
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        let left = self.appends_left.load(Ordering::SeqCst);
        let decision = self.at_decision.load(Ordering::SeqCst)
            && append
                .records
                .iter()
                .any(|r| String::from_utf8_lossy(r).contains(r#""state":"decided""#));
        if decision && self.reply_lost.load(Ordering::SeqCst) {
            self.down.store(true, Ordering::SeqCst);
            let stored = self.inner.append(append);
            return Box::pin(async move {
                stored.await?;
                Err(StoreError::unavailable("Redis did not answer within 2s"))
            });
        }
        if left == 0
            || decision
            || (self.before_waiting && append.head.status == RunStatus::Waiting)
        {
            self.down.store(true, Ordering::SeqCst);
        }
        if self.is_down() {
            return Self::gone();
        }
        self.appends_left.store(left - 1, Ordering::SeqCst);
        self.inner.append(append)
    }
    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        let until = *self.count_down_until.lock().unwrap();
        let counting_down = until.is_some_and(|until| tokio::time::Instant::now() < until);
        match self.is_down() || counting_down {
            true => Self::gone(),
            false => self.inner.waiting_count(),
        }
    }
    fn expire_waiting(&self, before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        match self.is_down() {
            true => Self::gone(),
            false => self.inner.expire_waiting(before_ms),
        }
    }
    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        match self.is_down() {
            true => Self::gone(),
            false => self.inner.waiting(limit),
        }
    }
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        match self.is_down() {
            true => Self::gone(),
            false => self.inner.delete(run_id),
        }
    }
    fn max_record_bytes(&self) -> usize {
        RunStore::max_record_bytes(&self.inner)
    }
}

/// A chunk log kept in the same store: down when it is, and its appends
/// also until `appends_down_until`.
struct OutageLog {
    inner: MemoryChunkLog,
    down: Arc<AtomicBool>,
    appends_down_until: Option<tokio::time::Instant>,
}

impl OutageLog {
    fn gone<T: Send + 'static>(&self) -> Option<BoxFuture<'static, Result<T, StoreError>>> {
        self.went(false)
    }

    fn went<T: Send + 'static>(
        &self,
        appending: bool,
    ) -> Option<BoxFuture<'static, Result<T, StoreError>>> {
        let appends_down = appending
            && self
                .appends_down_until
                .is_some_and(|until| tokio::time::Instant::now() < until);
        (self.down.load(Ordering::SeqCst) || appends_down).then(|| {
            Box::pin(async { Err(StoreError::unavailable("Redis did not answer within 2s")) })
                as BoxFuture<'static, _>
        })
    }
}

impl ChunkLog for OutageLog {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.gone()
            .unwrap_or_else(|| self.inner.open(chat_id, stream_id))
    }
    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.went(true)
            .unwrap_or_else(|| self.inner.append(stream_id, index, chunk))
    }
    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.gone()
            .unwrap_or_else(|| self.inner.close(chat_id, stream_id))
    }
    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.gone().unwrap_or_else(|| self.inner.active(chat_id))
    }
    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>> {
        self.gone()
            .unwrap_or_else(|| self.inner.read(stream_id, from, wait))
    }
}

fn user(text: &str) -> Value {
    json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]})
}

/// The response: its status, headers, and its chunks (or its one JSON
/// body when it is not `200`).
async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<Value>) {
    let answer = async {
        let response = app.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, bytes)
    };
    // Virtual time: long past any bound the agent rides an outage out for.
    let (status, headers, bytes) = tokio::time::timeout(Duration::from_secs(600), answer)
        .await
        .expect("the response ended");
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    if status != StatusCode::OK {
        return (status, headers, vec![serde_json::from_str(&text).unwrap()]);
    }
    let chunks = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    (status, headers, chunks)
}

async fn post(app: &axum::Router, body: Value) -> (StatusCode, HeaderMap, Vec<Value>) {
    let request = Request::post("/")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(app, request).await
}

/// A `503` that says the store is down, and when to ask again.
fn assert_store_down(status: StatusCode, headers: &HeaderMap, body: &Value) {
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let after = headers
        .get(RETRY_AFTER)
        .expect("a Retry-After header")
        .to_str()
        .unwrap();
    let secs: u64 = after.parse().expect("Retry-After in seconds");
    assert!((1..=60).contains(&secs), "Retry-After: {secs}");
    assert_eq!(body["kind"], "unavailable", "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("run store is unavailable"), "{error}");
}

/// A tool behind an approval the person gives.
fn guarded() -> Toolbox {
    let delete = tool::from_fn("delete", |_: Value| async { Ok::<_, ToolError>("deleted") });
    let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
    Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides())
}

fn answered(first: &[Value]) -> Value {
    let request = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .expect("an approval request");
    json!({
        "id": "a1", "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "tool-delete", "toolCallId": request["toolCallId"], "state": "approval-responded",
             "input": {}, "approval": {"id": request["approvalId"], "approved": true}},
        ],
    })
}

#[tokio::test(start_paused = true)]
async fn an_answer_sent_while_the_store_is_down_is_503_with_retry_after() {
    let store = Outage::new(usize::MAX);
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("It is gone."),
    ]);
    let app = ChatEndpoint::new(Agent::new(model, guarded()).store(store.clone())).into_router();
    let (status, _, first) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first.last().unwrap()["finishReason"], "tool-calls");

    store.down.store(true, Ordering::SeqCst);
    let conversation = json!({"messages": [user("delete it"), answered(&first)]});
    let (status, headers, body) = post(&app, conversation.clone()).await;
    assert_store_down(status, &headers, &body[0]);

    // Sent again once the store is back, the same answer goes on.
    store.down.store(false, Ordering::SeqCst);
    let (status, _, second) = post(&app, conversation).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(second.last().unwrap()["finishReason"], "stop", "{second:?}");
}

#[tokio::test(start_paused = true)]
async fn a_signed_answer_sent_while_the_store_is_down_is_503_with_retry_after() {
    // A signed answer is checked against the store before the run resumes.
    let store = Outage::new(usize::MAX);
    let model = ScriptedModel::new([Turn::new().tool_call("delete", "{}")]);
    let keys = toolstack::approval::ApprovalKeys::new("k1", [1u8; 32]).unwrap();
    let app = ChatEndpoint::new(Agent::new(model, guarded()).store(store.clone()))
        .sign_approvals(keys)
        .into_router();
    let (_, _, first) = post(&app, json!({"messages": [user("delete it")]})).await;
    let request = first
        .iter()
        .find(|c| c["type"] == "tool-approval-request")
        .unwrap();
    let mut answer = answered(&first);
    answer["parts"][1]["approval"]["signature"] = request["signature"].clone();
    answer["parts"][1]["input"] = request["input"].clone();

    store.down.store(true, Ordering::SeqCst);
    let (status, headers, body) =
        post(&app, json!({"messages": [user("delete it"), answer]})).await;
    assert_store_down(status, &headers, &body[0]);
}

#[tokio::test(start_paused = true)]
async fn the_stream_resume_route_is_503_with_retry_after_while_the_store_is_down() {
    let down = Arc::new(AtomicBool::new(false));
    let log = OutageLog {
        inner: MemoryChunkLog::new(),
        down: Arc::clone(&down),
        appends_down_until: None,
    };
    let model = ScriptedModel::new([Turn::new().text("Hello.")]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new()))
        .resumable_streams(log)
        .into_router();
    down.store(true, Ordering::SeqCst);
    let request = Request::get("/chat-1/stream").body(Body::empty()).unwrap();
    let (status, headers, body) = send(&app, request).await;
    assert_store_down(status, &headers, &body[0]);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_store_fails_mid_stream_says_so_and_that_the_answer_can_be_sent_again() {
    // The run's start is stored; nothing after it is.
    let store = Outage::new(1);
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("It is gone."),
    ]);
    let app = ChatEndpoint::new(Agent::new(model, guarded()).store(store.clone())).into_router();
    let (status, _, chunks) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(store.is_down(), "the store went down mid-run");
    let errors: Vec<&str> = chunks
        .iter()
        .filter(|c| c["type"] == "error")
        .map(|c| c["errorText"].as_str().unwrap())
        .collect();
    assert_eq!(errors.len(), 1, "{chunks:?}");
    let text = errors[0];
    assert!(text.contains("run store is unavailable"), "{text}");
    assert!(text.contains("got no answer for"), "how long: {text}");
    assert!(
        text.contains("Redis did not answer"),
        "the last error: {text}"
    );
    assert!(
        text.contains("send the message or approval answer again once the store is back"),
        "{text}"
    );
    // Each said once.
    assert_eq!(text.matches("unavailable").count(), 1, "{text}");
    assert_eq!(text.matches("again").count(), 1, "{text}");
    let finish = chunks.last().unwrap();
    assert_eq!(finish["type"], "finish", "{chunks:?}");
    assert_eq!(finish["messageMetadata"]["stop"], "store_failed");
    // The error comes before the run's end, in the protocol's order.
    let at = |kind: &str| chunks.iter().position(|c| c["type"] == kind).unwrap();
    assert!(at("error") < chunks.len() - 1);
}

#[tokio::test(start_paused = true)]
async fn a_message_to_a_conversation_kept_on_the_server_is_503_with_retry_after() {
    let store = Outage::new(usize::MAX);
    let model = ScriptedModel::new([Turn::new().text("Hello.")]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new()).store(store.clone()))
        .server_history()
        .into_router();
    store.down.store(true, Ordering::SeqCst);
    let (status, headers, body) = post(&app, json!({"id": "chat-1", "message": user("hi")})).await;
    assert_store_down(status, &headers, &body[0]);
}

#[tokio::test(start_paused = true)]
async fn a_run_that_cannot_be_kept_for_its_approval_says_to_send_the_message_again() {
    let mut store = Outage::new(usize::MAX);
    store.before_waiting = true;
    let model = ScriptedModel::new([Turn::new().tool_call("delete", "{}")]);
    let app = ChatEndpoint::new(Agent::new(model, guarded()).store(store.clone())).into_router();
    let (status, _, chunks) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(store.is_down(), "the store went down at the suspend");
    let error = chunks
        .iter()
        .find(|c| c["type"] == "error")
        .expect("an error chunk");
    let text = error["errorText"].as_str().unwrap();
    assert!(text.contains("run store is unavailable"), "{text}");
    assert!(
        text.contains("send the message or approval answer again"),
        "{text}"
    );
    assert_eq!(text.matches("unavailable").count(), 1, "{text}");
    assert_eq!(text.matches("again").count(), 1, "{text}");
    assert_eq!(chunks.last().unwrap()["finishReason"], "error");
}

/// A `delete` behind the person's approval that counts its runs and, when
/// `outage` is given, takes the store down as it runs (so its start is
/// stored, its result not).
fn guarded_counting(runs: &Arc<AtomicUsize>, outage: Option<Arc<AtomicBool>>) -> Toolbox {
    let runs = Arc::clone(runs);
    let delete = tool::from_fn("delete", move |_: Value| {
        runs.fetch_add(1, Ordering::SeqCst);
        if let Some(down) = &outage {
            down.store(true, Ordering::SeqCst);
        }
        async { Ok::<_, ToolError>("deleted") }
    });
    let nobody = |_: &toolstack::approval::ApprovalRequest| async { Decision::deny("nobody here") };
    Toolbox::new().layered(delete, ApprovalLayer::new(nobody).caller_decides())
}

#[tokio::test(start_paused = true)]
async fn an_answer_sent_again_after_the_store_is_back_completes_in_another_process() {
    let store = Outage::new(usize::MAX);
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([Turn::new().tool_call("delete", "{}")]);
    let agent = Agent::new(
        model,
        guarded_counting(&runs, Some(Arc::clone(&store.down))),
    )
    .store(store.clone())
    .process_id("a");
    let a = ChatEndpoint::new(agent).into_router();
    let (_, _, first) = post(&a, json!({"messages": [user("delete it")]})).await;
    let conversation = json!({"messages": [user("delete it"), answered(&first)]});

    // The answer: `delete` runs and the store goes down with its result
    // unstored; past the bound the response says to send it again.
    let (status, _, chunks) = post(&a, conversation.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let finish = chunks.last().unwrap();
    assert_eq!(
        finish["messageMetadata"]["stop"], "store_failed",
        "{chunks:?}"
    );

    // The store comes back; a few seconds later the same answer, sent to
    // another process, completes the run (not `409 held` for the rest of
    // the first process's lease), and `delete` is not run again.
    store.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let model = ScriptedModel::new([Turn::new().text("It may be gone.")]);
    let agent = Agent::new(model, guarded_counting(&runs, None))
        .store(store.clone())
        .process_id("b");
    let b = ChatEndpoint::new(agent).into_router();
    let (status, _, second) = post(&b, conversation).await;
    assert_eq!(status, StatusCode::OK, "{second:?}");
    assert_eq!(second.last().unwrap()["finishReason"], "stop", "{second:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not run twice");
}

/// A call resumed with the person's answer records `started`, then the
/// answer; when the store goes down at the answer's record, the tool does
/// not run — and once the store is back, the answer sent again runs it,
/// once, in another process: the model reads its result, not "may have
/// run" (the release puts the call back to waiting for its answer).
#[tokio::test(start_paused = true)]
async fn an_answer_whose_decision_was_not_stored_runs_once_when_sent_again() {
    decision_not_stored(false).await;
}

/// The same when the decision's record was stored but its answer lost
/// with the store: the release recognises the append that gave up, and
/// the run is not left held by its first process for the rest of its
/// lease.
#[tokio::test(start_paused = true)]
async fn an_answer_whose_decision_was_stored_but_its_answer_lost_runs_once_when_sent_again() {
    decision_not_stored(true).await;
}

async fn decision_not_stored(reply_lost: bool) {
    let store = Outage::new(usize::MAX);
    store.at_decision.store(true, Ordering::SeqCst);
    store.reply_lost.store(reply_lost, Ordering::SeqCst);
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([Turn::new().tool_call("delete", "{}")]);
    let agent = Agent::new(model, guarded_counting(&runs, None))
        .store(store.clone())
        .process_id("a");
    let a = ChatEndpoint::new(agent).into_router();
    let (_, _, first) = post(&a, json!({"messages": [user("delete it")]})).await;
    let conversation = json!({"messages": [user("delete it"), answered(&first)]});

    let (status, _, chunks) = post(&a, conversation.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        finish_stop(&chunks),
        "store_failed",
        "the store stayed down: {chunks:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "its decision was not stored"
    );

    store.at_decision.store(false, Ordering::SeqCst);
    store.down.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let model = ScriptedModel::new([Turn::new().text("Deleted.")]);
    let agent = Agent::new(model, guarded_counting(&runs, None))
        .store(store.clone())
        .process_id("b");
    let b = ChatEndpoint::new(agent).into_router();
    let (status, _, second) = post(&b, conversation).await;
    assert_eq!(status, StatusCode::OK, "{second:?}");
    assert_eq!(second.last().unwrap()["finishReason"], "stop", "{second:?}");
    let output = second
        .iter()
        .find(|c| c["type"] == "tool-output-available")
        .unwrap_or_else(|| panic!("the tool's result: {second:?}"));
    assert_eq!(output["output"], "deleted", "{second:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "run once");
}

/// The `stop` a response's finish chunk names.
fn finish_stop(chunks: &[Value]) -> &Value {
    &chunks.last().unwrap()["messageMetadata"]["stop"]
}

/// The chunk of `chunks` of type `kind`.
fn chunk<'a>(chunks: &'a [Value], kind: &str) -> Option<&'a Value> {
    chunks.iter().find(|c| c["type"] == kind)
}

#[tokio::test(start_paused = true)]
async fn a_waiting_count_down_for_two_seconds_is_ridden_out_and_the_person_is_asked() {
    let store = Outage::new(usize::MAX);
    *store.count_down_until.lock().unwrap() =
        Some(tokio::time::Instant::now() + Duration::from_secs(2));
    let model = ScriptedModel::new([Turn::new().tool_call("delete", "{}")]);
    let app = ChatEndpoint::new(Agent::new(model, guarded()).store(store.clone())).into_router();
    let started = tokio::time::Instant::now();
    let (status, _, chunks) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_secs(2), "ridden out");
    // Asked of the person (not denied for want of room), and kept.
    let request = chunk(&chunks, "tool-approval-request").expect("an approval request");
    assert_ne!(request["isAutomatic"], true, "{chunks:?}");
    assert!(
        chunk(&chunks, "tool-approval-response").is_none(),
        "{chunks:?}"
    );
    assert!(chunk(&chunks, "error").is_none(), "{chunks:?}");
    assert_eq!(chunks.last().unwrap()["finishReason"], "tool-calls");
    assert_eq!(store.inner.waiting_count().await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_count_down_past_the_bound_denies_the_call_saying_why() {
    let store = Outage::new(usize::MAX);
    *store.count_down_until.lock().unwrap() =
        Some(tokio::time::Instant::now() + Duration::from_secs(60));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().text("Not deleted."),
    ]);
    let agent = Agent::new(model, guarded())
        .store(store.clone())
        .store_outage(Duration::from_secs(5));
    let app = ChatEndpoint::new(agent).into_router();
    let started = tokio::time::Instant::now();
    let (status, _, chunks) = post(&app, json!({"messages": [user("delete it")]})).await;
    assert_eq!(status, StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "the agent's bound: {waited:?}"
    );
    let request = chunk(&chunks, "tool-approval-request").expect("an approval request");
    assert_eq!(request["isAutomatic"], true, "{chunks:?}");
    let denied = chunk(&chunks, "tool-approval-response").expect("the denial");
    let reason = denied["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("got no answer for 5.0 s"), "{reason}");
}

#[tokio::test(start_paused = true)]
async fn a_chunk_log_down_for_two_seconds_is_ridden_out_and_a_reconnect_reads_it_all() {
    // The log's appends fail for 2 s from the response's start: the
    // response goes on live, and the chunks reach the log once it is back.
    let log = OutageLog {
        inner: MemoryChunkLog::new(),
        down: Arc::default(),
        appends_down_until: Some(tokio::time::Instant::now() + Duration::from_secs(2)),
    };
    let model = ScriptedModel::new([Turn::new().text("Hello there.")]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new()))
        .resumable_streams(log)
        .into_router();
    let started = tokio::time::Instant::now();
    let (status, _, live) = post(&app, json!({"id": "chat-1", "messages": [user("hi")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the response waited for the log"
    );
    // Reconnecting while the log is still down: the whole response, from
    // its first chunk, with no error.
    let request = Request::get("/chat-1/stream").body(Body::empty()).unwrap();
    let (status, _, replayed) = send(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(chunk(&replayed, "error").is_none(), "{replayed:?}");
    assert_eq!(replayed, live);
}

#[tokio::test(start_paused = true)]
async fn a_chunk_log_down_past_the_bound_tells_a_reconnecting_client_the_rest_was_not_kept() {
    // The log takes no chunk for 60 s (a Redis out of memory still takes
    // the close); the agent rides out 5 s.
    let log = OutageLog {
        inner: MemoryChunkLog::new(),
        down: Arc::default(),
        appends_down_until: Some(tokio::time::Instant::now() + Duration::from_secs(60)),
    };
    let model = ScriptedModel::new([Turn::new().text("Hello there.")]);
    let agent = Agent::new(model, Toolbox::new())
        .store(MemoryStore::new())
        .store_outage(Duration::from_secs(5));
    let app = ChatEndpoint::new(agent)
        .resumable_streams(log)
        .into_router();
    let (status, _, live) = post(&app, json!({"id": "chat-1", "messages": [user("hi")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        live.last().unwrap()["finishReason"],
        "stop",
        "the live client is unaffected"
    );
    let request = Request::get("/chat-1/stream").body(Body::empty()).unwrap();
    let (status, _, replayed) = send(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    // Not a response that looks whole: the reconnect says the rest was
    // not kept, and why.
    assert_eq!(replayed.len(), 1, "{replayed:?}");
    let text = replayed[0]["errorText"].as_str().expect("an error chunk");
    assert!(text.contains("was not kept"), "{text}");
    assert!(text.contains("got no answer for 5.0 s"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_chunk_log_that_does_not_open_does_not_hold_the_response() {
    // The whole log is down for the response's first 2 s: the response
    // streams at once; its log opens, off the response's way, when the
    // store is back.
    let down = Arc::new(AtomicBool::new(true));
    let log = OutageLog {
        inner: MemoryChunkLog::new(),
        down: Arc::clone(&down),
        appends_down_until: None,
    };
    tokio::spawn({
        let down = Arc::clone(&down);
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            down.store(false, Ordering::SeqCst);
        }
    });
    let model = ScriptedModel::new([Turn::new().text("Hello there.")]);
    let app = ChatEndpoint::new(Agent::new(model, Toolbox::new()))
        .resumable_streams(log)
        .into_router();
    let started = tokio::time::Instant::now();
    let (status, _, live) = post(&app, json!({"id": "chat-1", "messages": [user("hi")]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the response waited for the log to open: {:?}",
        started.elapsed()
    );
    assert_eq!(live.last().unwrap()["finishReason"], "stop");
    assert!(chunk(&live, "error").is_none(), "{live:?}");
}
