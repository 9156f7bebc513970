//! Runs that outlive their process: an agent with a run store checkpoints
//! each run, suspends one waiting for a person, and another agent — a
//! second process sharing the store — resumes it. A finished call is not
//! run again; a call cut off mid-way runs again only if its tool is
//! idempotent; a decision is applied once; the store's faults are typed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use toolstack::agent::store::{
    CallRecord, CallState, Checkpoint, Holder, MemoryStore, RunStatus, RunStore, StoreError,
    Stored, Version,
};
use toolstack::agent::{
    Agent, AgentEvent, AgentStream, OnStoreError, Resume, ResumeError, StopReason,
};
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};
use toolstack::model::{Message, ScriptedModel, ToolCall, Turn};
use toolstack::{tool, ErrorKind, Media, ToolAnnotations, ToolError, ToolOutput, Toolbox};
use toolstack_layers::approval::ApprovalLayer;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Rows {
    table: String,
}

/// Counts of each tool's runs: the tools count themselves.
#[derive(Clone, Default)]
struct Runs {
    delete: Arc<AtomicUsize>,
    count: Arc<AtomicUsize>,
}

/// `delete` (destructive, asks for approval) and `count` (read-only).
fn toolbox(runs: &Runs) -> Toolbox {
    let deletes = Arc::clone(&runs.delete);
    let counts = Arc::clone(&runs.count);
    let delete = tool::from_fn("delete", move |rows: Rows| {
        let deletes = Arc::clone(&deletes);
        async move {
            deletes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(format!("deleted the rows of {}", rows.table))
        }
    })
    .with_annotations(ToolAnnotations::new().destructive(true));
    let count = tool::from_fn("count", move |rows: Rows| {
        let counts = Arc::clone(&counts);
        async move {
            counts.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(format!("{} has 3 rows", rows.table))
        }
    })
    .with_annotations(ToolAnnotations::new().read_only());
    Toolbox::new()
        .layered(
            delete,
            ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::deny("no approver") })
                .caller_decides(),
        )
        .tool(count)
}

/// A person who never answers: the run can only wait.
fn nobody_answers() -> http::Extensions {
    let mut extensions = http::Extensions::new();
    extensions.insert(CallerApprover::new("the user", |_: &ApprovalRequest| {
        std::future::pending::<Decision>()
    }));
    extensions
}

/// Reads events until the run waits for approval; returns them.
async fn until_waiting(run: &mut AgentStream) -> Vec<AgentEvent> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), run.next())
            .await
            .expect("the run went quiet without waiting")
            .expect("the run ended without waiting");
        let waiting = matches!(event, AgentEvent::AwaitingApproval { .. });
        seen.push(event);
        if waiting {
            return seen;
        }
    }
}

async fn to_the_end(run: AgentStream) -> Vec<AgentEvent> {
    tokio::time::timeout(Duration::from_secs(30), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end")
}

fn done(events: &[AgentEvent]) -> &toolstack::agent::AgentDone {
    match events.last() {
        Some(AgentEvent::Done(done)) => done,
        other => panic!("the last event is not Done: {other:?}"),
    }
}

fn tool_text<'a>(messages: &'a [Message], call_id: &str) -> &'a str {
    messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } if tool_call_id == call_id => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {call_id} in {messages:#?}"))
}

/// The first process: asks for a count and a delete, the delete waits.
fn first_model() -> ScriptedModel {
    ScriptedModel::new([Turn::new()
        .text("Counting, then deleting.")
        .tool_call("count", r#"{"table": "logs"}"#)
        .tool_call("delete", r#"{"table": "logs"}"#)])
}

/// The second process's model: the answer after the tools.
fn second_model() -> ScriptedModel {
    ScriptedModel::new([Turn::new().text("Done.")])
}

#[tokio::test]
async fn a_suspended_run_resumes_in_another_process_and_runs_each_call_once() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let first = Agent::new(first_model(), toolbox(&runs)).store(store.clone());
    let mut run = first.run_with(vec![Message::user("clean the logs")], nobody_answers());
    let run_id = run.run_id().to_owned();
    let seen = until_waiting(&mut run).await;
    assert!(seen
        .iter()
        .any(|e| matches!(e, AgentEvent::ApprovalRequested { name, .. } if name == "delete")));
    run.suspend().await.unwrap();

    // What the store holds: the count finished, the delete waiting.
    let Stored { checkpoint, .. } = store.load(&run_id).await.unwrap().unwrap();
    assert_eq!(checkpoint.status, RunStatus::Waiting);
    assert_eq!(checkpoint.holder, None);
    let states: Vec<&str> = checkpoint.step.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(states, ["finished", "waiting_approval"]);
    assert_eq!(
        store.waiting().await.unwrap(),
        std::slice::from_ref(&run_id)
    );
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);

    // The answer reaches another process sharing the store.
    let second = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let resumed = second
        .resume(&run_id, Resume::new().decide("call_0_1", Decision::Allow))
        .await
        .unwrap();
    assert_eq!(resumed.run_id(), run_id);
    let events = to_the_end(resumed).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    assert_eq!(
        runs.count.load(Ordering::SeqCst),
        1,
        "the finished count ran again"
    );
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
    assert_eq!(tool_text(&done.messages, "call_0_0"), "logs has 3 rows");
    assert_eq!(
        tool_text(&done.messages, "call_0_1"),
        "deleted the rows of logs"
    );
    assert_eq!(done.messages.last(), Some(&Message::assistant("Done.")));
    // The request is not streamed again; the decision is, by the user.
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::ApprovalRequested { .. })));
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ApprovalDecided { call_id, by, decision: Decision::Allow, .. }
            if call_id == "call_0_1" && by == "the user")));

    // The run is stored as done; it cannot be resumed again.
    let stored = store.load(&run_id).await.unwrap().unwrap().checkpoint;
    assert_eq!(
        stored.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    );
    assert!(store.waiting().await.unwrap().is_empty());
    let again = second
        .resume(&run_id, Resume::new().decide("call_0_1", Decision::Allow))
        .await;
    assert!(
        matches!(again, Err(ResumeError::Finished { .. })),
        "{again:?}"
    );
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_denial_on_resume_reaches_the_model_and_the_tool_never_runs() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let mut run = Agent::new(first_model(), toolbox(&runs))
        .store(store.clone())
        .run_with(vec![Message::user("clean the logs")], nobody_answers());
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();
    let events = to_the_end(
        Agent::new(second_model(), toolbox(&runs))
            .store(store.clone())
            .resume(
                &run_id,
                Resume::new().decide("call_0_1", Decision::deny("keep the logs")),
            )
            .await
            .unwrap(),
    )
    .await;
    let text = tool_text(&done(&events).messages, "call_0_1");
    assert!(
        text.contains("keep the logs") && text.contains("denied"),
        "{text}"
    );
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn two_processes_answering_at_once_resume_the_run_once() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let mut run = Agent::new(first_model(), toolbox(&runs))
        .store(store.clone())
        .run_with(vec![Message::user("clean the logs")], nobody_answers());
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();

    let a = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let b = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let allow = || Resume::new().decide("call_0_1", Decision::Allow);
    let (x, y) = futures_util::join!(a.resume(&run_id, allow()), b.resume(&run_id, allow()));
    let (won, lost) = match (x, y) {
        (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won, lost),
        (x, y) => panic!("exactly one should win: {x:?} / {y:?}"),
    };
    assert!(matches!(lost, ResumeError::Held { .. }), "{lost}");
    assert_eq!(lost.status(), http::StatusCode::CONFLICT);
    to_the_end(won).await;
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

/// The image the finished delete returned.
fn receipt() -> Media {
    Media {
        data: "iVBORw0KGgo=".into(),
        mime_type: "image/png".into(),
    }
}

/// A checkpoint as a process that died mid-step left it: `count` and
/// `delete` started, a third call planned, a fourth finished.
fn died_mid_step(run_id: &str, process: &str, until_ms: u64) -> Checkpoint {
    let call = |id: &str, name: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: r#"{"table": "logs"}"#.into(),
    };
    let calls = vec![
        call("c1", "count"),
        call("c2", "delete"),
        call("c3", "count"),
        call("c4", "delete"),
    ];
    Checkpoint {
        run_id: run_id.into(),
        status: RunStatus::Running,
        messages: vec![
            Message::user("clean the logs"),
            Message::Assistant {
                content: None,
                tool_calls: calls.clone(),
                reasoning: Vec::new(),
            },
        ],
        step: vec![
            CallRecord {
                call: calls[0].clone(),
                state: CallState::Started,
            },
            CallRecord {
                call: calls[1].clone(),
                state: CallState::Started,
            },
            CallRecord {
                call: calls[2].clone(),
                state: CallState::Planned,
            },
            CallRecord {
                call: calls[3].clone(),
                state: CallState::Finished {
                    text: "deleted before the crash".into(),
                    is_error: false,
                    images: vec![receipt()],
                },
            },
        ],
        usage: None,
        steps: 1,
        tool_calls: 4,
        holder: Some(Holder {
            process: process.into(),
            until_ms,
        }),
        saved_at_ms: 1,
    }
}

#[tokio::test]
async fn a_call_cut_off_runs_again_only_if_its_tool_is_idempotent() {
    let store = MemoryStore::new();
    // Its lease has passed: the process that held it is gone.
    store
        .save(&died_mid_step("r", "dead", 1), Version::NONE)
        .await
        .unwrap();
    let runs = Runs::default();
    let agent = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let events = to_the_end(agent.resume("r", Resume::new()).await.unwrap()).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    // The read-only count ran again (c1) and for the first time (c3); the
    // delete that had started (c2) did not, and the finished one (c4) kept
    // its result.
    assert_eq!(runs.count.load(Ordering::SeqCst), 2);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
    assert_eq!(tool_text(&done.messages, "c1"), "logs has 3 rows");
    let interrupted: serde_json::Value =
        serde_json::from_str(tool_text(&done.messages, "c2")).unwrap();
    assert_eq!(interrupted["kind"], "interrupted", "{interrupted}");
    assert!(
        interrupted["error"]
            .as_str()
            .unwrap()
            .contains("the call may have run"),
        "{interrupted}"
    );
    assert_eq!(tool_text(&done.messages, "c3"), "logs has 3 rows");
    assert_eq!(tool_text(&done.messages, "c4"), "deleted before the crash");
    // With its image, as the model read it before the crash.
    let images = done.messages.iter().find_map(|m| match m {
        Message::Tool {
            tool_call_id,
            images,
            ..
        } if tool_call_id == "c4" => Some(images),
        _ => None,
    });
    assert_eq!(images, Some(&vec![receipt()]));
    let result = events.iter().find_map(|e| match e {
        AgentEvent::ToolResult {
            call_id, result, ..
        } if call_id == "c2" => Some(result),
        _ => None,
    });
    assert_eq!(
        result.unwrap().error.as_ref().unwrap().kind(),
        ErrorKind::Interrupted
    );
}

#[tokio::test]
async fn a_run_held_by_a_live_process_is_not_taken() {
    let store = MemoryStore::new();
    let far = toolstack_now_ms() + 60_000;
    store
        .save(&died_mid_step("r", "alive", far), Version::NONE)
        .await
        .unwrap();
    let runs = Runs::default();
    let agent = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let err = agent.resume("r", Resume::new()).await.unwrap_err();
    assert!(
        matches!(&err, ResumeError::Held { process: Some(p), .. } if p == "alive"),
        "{err}"
    );
    assert_eq!(
        runs.count.load(Ordering::SeqCst) + runs.delete.load(Ordering::SeqCst),
        0
    );
    // The process itself (the same id, restarted) takes it back at once.
    let same = Agent::new(second_model(), toolbox(&runs))
        .store(store.clone())
        .process_id("alive");
    to_the_end(same.resume("r", Resume::new()).await.unwrap()).await;
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
}

fn toolstack_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn resuming_what_cannot_be_resumed_is_typed() {
    let store = MemoryStore::new();
    let agent = Agent::new(second_model(), Toolbox::new()).store(store.clone());
    let err = agent.resume("nobody", Resume::new()).await.unwrap_err();
    assert!(matches!(err, ResumeError::NotFound { .. }), "{err}");
    assert_eq!(err.status(), http::StatusCode::NOT_FOUND);

    store
        .save(&died_mid_step("newer", "dead", 1), Version::NONE)
        .await
        .unwrap();
    store.put_raw("newer", br#"{"format": 2, "run_id": "newer"}"#);
    let err = agent.resume("newer", Resume::new()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ResumeError::Store(StoreError::UnknownFormat {
                found: 2,
                supported: 1,
                ..
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("format 2"), "{err}");

    let plain = Agent::new(second_model(), Toolbox::new());
    assert!(matches!(
        plain.resume("x", Resume::new()).await,
        Err(ResumeError::NoStore)
    ));
}

/// A store that fails (or never answers) every save after the first `ok`.
#[derive(Clone)]
struct Failing {
    inner: MemoryStore,
    ok: Arc<AtomicUsize>,
    hang: bool,
}

impl RunStore for Failing {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        self.inner.load(run_id)
    }
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        let left = self.ok.load(Ordering::SeqCst);
        if left > 0 {
            self.ok.store(left - 1, Ordering::SeqCst);
            return self.inner.save(checkpoint, expected);
        }
        if self.hang {
            return Box::pin(std::future::pending());
        }
        Box::pin(async { Err(StoreError::unavailable("the disk is gone")) })
    }
    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.waiting()
    }
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.delete(run_id)
    }
}

fn deleting_model() -> ScriptedModel {
    ScriptedModel::new([
        Turn::new().tool_call("delete", r#"{"table": "logs"}"#),
        Turn::new().text("Done."),
    ])
}

/// Everyone approves.
fn allowed() -> http::Extensions {
    let mut extensions = http::Extensions::new();
    extensions.insert(CallerApprover::new(
        "the user",
        |_: &ApprovalRequest| async { Decision::Allow },
    ));
    extensions
}

// The clock is paused: a save that never answers times out in virtual
// time, exactly at the bound.
#[tokio::test(start_paused = true)]
async fn a_store_that_fails_stops_the_run_before_the_tool_runs() {
    // The first two saves pass (the run's start, the planned step); the
    // call's start cannot be recorded.
    for hang in [false, true] {
        let runs = Runs::default();
        let store = Failing {
            inner: MemoryStore::new(),
            ok: Arc::new(AtomicUsize::new(2)),
            hang,
        };
        let agent = Agent::new(deleting_model(), toolbox(&runs))
            .store(store)
            .checkpoint_timeout(Duration::from_millis(200));
        let started = tokio::time::Instant::now();
        let events = to_the_end(agent.run_with(vec![Message::user("clean")], allowed())).await;
        assert_eq!(done(&events).stop, StopReason::StoreFailed, "hang: {hang}");
        assert_eq!(runs.delete.load(Ordering::SeqCst), 0, "hang: {hang}");
        let error = events.iter().find_map(|e| match e {
            AgentEvent::Error(err) => Some(err),
            _ => None,
        });
        let error = error.expect("an error event");
        assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
        if hang {
            assert!(error.message().contains("within"), "{error}");
            // One timeout: once a save failed, the run does not wait for
            // the store again.
            assert_eq!(started.elapsed(), Duration::from_millis(200));
        }
    }
}

#[tokio::test]
async fn a_run_set_to_go_on_in_memory_goes_on() {
    let runs = Runs::default();
    let store = Failing {
        inner: MemoryStore::new(),
        ok: Arc::new(AtomicUsize::new(1)),
        hang: false,
    };
    let agent = Agent::new(deleting_model(), toolbox(&runs))
        .store(store)
        .on_store_error(OnStoreError::Continue);
    let events = to_the_end(agent.run_with(vec![Message::user("clean")], allowed())).await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn every_run_is_checkpointed_to_its_end() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let agent = Agent::new(deleting_model(), toolbox(&runs)).store(store.clone());
    let run = agent.run_with(vec![Message::user("clean")], allowed());
    let run_id = run.run_id().to_owned();
    let events = to_the_end(run).await;
    let stored = store.load(&run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    );
    assert_eq!(stored.checkpoint.messages, done(&events).messages);
    assert_eq!(stored.checkpoint.steps, 2);
    assert!(stored.checkpoint.step.is_empty());
    // Start, planned, started, waiting, decided, finished, step end, done.
    assert_eq!(stored.version, Version(8));
}

#[tokio::test]
async fn a_waiting_call_resumed_without_a_decision_is_asked_again() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let mut run = Agent::new(first_model(), toolbox(&runs))
        .store(store.clone())
        .run_with(vec![Message::user("clean the logs")], nobody_answers());
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();
    // The person is asked again (the resumed stream shows the request),
    // and this time someone answers.
    let events = to_the_end(
        Agent::new(second_model(), toolbox(&runs))
            .store(store.clone())
            .resume(&run_id, Resume::new().extensions(allowed()))
            .await
            .unwrap(),
    )
    .await;
    assert!(events.iter().any(|e| matches!(e,
        AgentEvent::ApprovalRequested { call_id, .. } if call_id == "call_0_1")));
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

/// A store whose saves wait until the test lets them through.
#[derive(Clone)]
struct Gated {
    inner: MemoryStore,
    open: Arc<tokio::sync::Semaphore>,
}

impl RunStore for Gated {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        self.inner.load(run_id)
    }
    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        Box::pin(async move {
            let _permit = self.open.acquire().await.expect("the gate stays");
            self.inner.save(checkpoint, expected).await
        })
    }
    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.waiting()
    }
    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.delete(run_id)
    }
}

#[tokio::test]
async fn a_store_that_has_not_answered_does_not_hold_the_models_stream() {
    let store = Gated {
        inner: MemoryStore::new(),
        open: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let model = ScriptedModel::new([Turn::new().text("An answer in several words.")]);
    let agent = Agent::new(model, Toolbox::new())
        .store(store.clone())
        .checkpoint_timeout(Duration::from_secs(60));
    let mut run = agent.run(vec![Message::user("hi")]);
    // The run's first save is held; the model's text streams all the same.
    let mut text = String::new();
    while text != "An answer in several words." {
        let event = tokio::time::timeout(Duration::from_secs(30), run.next())
            .await
            .expect("the model's stream waited for the store")
            .expect("the run ended");
        if let AgentEvent::TextDelta(piece) = event {
            text.push_str(&piece);
        }
    }
    assert!(store.inner.is_empty(), "nothing was saved yet");
    store.open.add_permits(1_000);
    let events = to_the_end(run).await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(store.inner.len(), 1);
}

#[tokio::test]
async fn a_finished_call_is_checkpointed_with_its_images() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let snapshot = tool::from_stream("snapshot", |_: serde_json::Value| {
        futures_util::stream::iter(vec![
            Ok::<_, ToolError>(ToolOutput::text("the table as a picture")),
            Ok(ToolOutput::Image(Box::new(receipt()))),
        ])
    });
    let model = ScriptedModel::new([Turn::new()
        .tool_call("snapshot", "{}")
        .tool_call("delete", r#"{"table": "logs"}"#)]);
    let agent = Agent::new(model, toolbox(&runs).tool(snapshot)).store(store.clone());
    let mut run = agent.run_with(vec![Message::user("show, then clean")], nobody_answers());
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();
    let stored = store.load(&run_id).await.unwrap().unwrap();
    let finished = stored
        .checkpoint
        .step
        .iter()
        .find_map(|record| match &record.state {
            CallState::Finished { images, .. } if record.call.name == "snapshot" => Some(images),
            _ => None,
        });
    assert_eq!(
        finished,
        Some(&vec![receipt()]),
        "{:?}",
        stored.checkpoint.step
    );
}
