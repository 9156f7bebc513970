//! Runs that outlive their process: an agent with a run store journals
//! each run, suspends one waiting for a person, and another agent — a
//! second process sharing the store — resumes it. A finished call is not
//! run again; a call cut off mid-way runs again only if its tool is
//! idempotent; a decision is applied once, and binds whatever the
//! approval layers' own approvers say; a run written before the journal
//! resumes; a run has no size cliff; the store's faults are typed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use toolstack::agent::store::{
    Append, CallRecord, CallState, Checkpoint, Holder, MemoryStore, RunStatus, RunStore,
    StoreError, Stored, Version,
};
use toolstack::agent::{
    Agent, AgentEvent, AgentStream, OnStoreError, Resume, ResumeError, StopReason,
};
use toolstack::approval::{ApprovalRequest, CallerApprover, DecidedBy, Decision, Policy};
use toolstack::model::{Message, ScriptedModel, ToolCall, Turn};
use toolstack::ToolRequest;
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

/// A run of the first process, suspended while its delete waits: its id.
async fn suspended(store: &MemoryStore, runs: &Runs) -> String {
    let mut run = Agent::new(first_model(), toolbox(runs))
        .store(store.clone())
        .run_with(vec![Message::user("clean the logs")], nobody_answers());
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();
    run_id
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
        store.waiting(10).await.unwrap(),
        std::slice::from_ref(&run_id)
    );
    assert_eq!(store.waiting_count().await.unwrap(), 1);
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
            if call_id == "call_0_1" && *by == DecidedBy::caller("the user"))));

    // The run is stored as done; it cannot be resumed again.
    let stored = store.load(&run_id).await.unwrap().unwrap().checkpoint;
    assert_eq!(
        stored.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    );
    assert_eq!(store.waiting_count().await.unwrap(), 0);
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
    let run_id = suspended(&store, &runs).await;
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
    let run_id = suspended(&store, &runs).await;

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
        messages: Arc::new(vec![
            Message::user("clean the logs"),
            Message::Assistant {
                content: None,
                tool_calls: calls.clone(),
                reasoning: Vec::new(),
            },
        ]),
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
        loaded_tools: Vec::new(),
        saved_at_ms: 1,
    }
}

#[tokio::test]
async fn a_call_cut_off_runs_again_only_if_its_tool_is_idempotent() {
    let store = MemoryStore::new();
    // Its lease has passed: the process that held it is gone.
    put(&store, &died_mid_step("r", "dead", 1));
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
    put(&store, &died_mid_step("r", "alive", far));
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

/// Stores `checkpoint` whole, as runs were stored before the journal (a
/// snapshot with no records after it).
fn put(store: &MemoryStore, checkpoint: &Checkpoint) {
    store.put_raw(&checkpoint.run_id, &checkpoint.to_bytes().unwrap());
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

    put(&store, &died_mid_step("newer", "dead", 1));
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
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        let left = self.ok.load(Ordering::SeqCst);
        if left > 0 {
            self.ok.store(left - 1, Ordering::SeqCst);
            return self.inner.append(append);
        }
        if self.hang {
            return Box::pin(std::future::pending());
        }
        Box::pin(async { Err(StoreError::unavailable("the disk is gone")) })
    }
    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.waiting_count()
    }
    fn expire_waiting(&self, before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.expire_waiting(before_ms)
    }
    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.waiting(limit)
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
    // The first two appends pass (the run's start, the answer and its
    // planned step); the call's approval request cannot be recorded.
    for hang in [false, true] {
        let runs = Runs::default();
        let store = Failing {
            inner: MemoryStore::new(),
            ok: Arc::new(AtomicUsize::new(2)),
            hang,
        };
        let agent = Agent::new(deleting_model(), toolbox(&runs))
            .store(store)
            .checkpoint_timeout(Duration::from_millis(200))
            // Each save tried once (tests/it/store_outage.rs rides outages out).
            .store_outage(Duration::ZERO);
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
        .store_outage(Duration::ZERO)
        .on_store_error(OnStoreError::Continue);
    let events = to_the_end(agent.run_with(vec![Message::user("clean")], allowed())).await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn every_run_is_journalled_to_its_end() {
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
    assert_eq!(*stored.checkpoint.messages, done(&events).messages);
    assert_eq!(stored.checkpoint.steps, 2);
    assert!(stored.checkpoint.step.is_empty());
    // Eight appends, each the change: the start (status, conversation),
    // the answer (message, counts, step), the call waiting, decided,
    // started, finished (one each), the last answer (the step closed,
    // message, counts), the end (counts, status): fourteen records.
    assert_eq!(stored.version, Version(14));
    assert_eq!(stored.records, 14);
}

#[tokio::test]
async fn a_waiting_call_resumed_without_a_decision_is_asked_again() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let run_id = suspended(&store, &runs).await;
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
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        Box::pin(async move {
            let _permit = self.open.acquire().await.expect("the gate stays");
            self.inner.append(append).await
        })
    }
    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.waiting_count()
    }
    fn expire_waiting(&self, before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.inner.expire_waiting(before_ms)
    }
    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.waiting(limit)
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
async fn a_finished_call_is_stored_with_its_images() {
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

/// A run that died with one call decided: `write` (idempotent, so a call
/// it had allowed runs again) and `delete`, each asked by an approval
/// layer.
fn died_decided(run_id: &str, name: &str, decision: Decision) -> Checkpoint {
    let call = ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: r#"{"table": "logs"}"#.into(),
    };
    let mut checkpoint = died_mid_step(run_id, "dead", 1);
    checkpoint.messages = Arc::new(vec![
        Message::user("clean the logs"),
        Message::assistant_calls(vec![call.clone()]),
    ]);
    checkpoint.step = vec![CallRecord {
        call,
        state: CallState::Decided {
            decision,
            by: DecidedBy::caller("the user"),
        },
    }];
    checkpoint
}

/// `delete` and an idempotent `write`, each behind an approval layer that
/// does NOT let the caller decide, with `approver` as its own; counts the
/// times the approver is asked.
fn layered(runs: &Runs, approver: Decision, asked: &Arc<AtomicUsize>) -> Toolbox {
    let layer = {
        let asked = Arc::clone(asked);
        ApprovalLayer::new(move |_: &ApprovalRequest| {
            asked.fetch_add(1, Ordering::SeqCst);
            std::future::ready(approver.clone())
        })
    };
    let (deletes, writes) = (Arc::clone(&runs.delete), Arc::clone(&runs.count));
    let delete = tool::from_fn("delete", move |_: Rows| {
        let deletes = Arc::clone(&deletes);
        async move {
            deletes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("deleted")
        }
    })
    .with_annotations(ToolAnnotations::new().destructive(true));
    let write = tool::from_fn("write", move |_: Rows| {
        let writes = Arc::clone(&writes);
        async move {
            writes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("written")
        }
    })
    .with_annotations(ToolAnnotations::new().idempotent(true));
    Toolbox::new()
        .layered(delete, layer.clone())
        .layered(write, layer)
}

#[tokio::test]
async fn a_stored_denial_binds_whatever_the_layers_approver_or_policy_says() {
    for policy in [false, true] {
        let store = MemoryStore::new();
        put(
            &store,
            &died_decided("r", "delete", Decision::deny("keep the logs")),
        );
        let (runs, asked) = (Runs::default(), Arc::new(AtomicUsize::new(0)));
        let mut tools = layered(&runs, Decision::Allow, &asked);
        if policy {
            let allow_all = ApprovalLayer::new(|_: &ApprovalRequest| async { Decision::Allow })
                .policy(|_: &ToolRequest| Policy::allow("everything is allowed"));
            tools = Toolbox::new().merge(tools).layer(allow_all);
        }
        let agent = Agent::new(second_model(), tools).store(store.clone());
        let events = to_the_end(agent.resume("r", Resume::new()).await.unwrap()).await;
        assert_eq!(runs.delete.load(Ordering::SeqCst), 0, "policy: {policy}");
        assert_eq!(asked.load(Ordering::SeqCst), 0, "policy: {policy}");
        let text = tool_text(&done(&events).messages, "c1");
        assert!(
            text.contains("denied by the user") && text.contains("keep the logs"),
            "{text}"
        );
        assert!(events.iter().any(|e| matches!(e,
            AgentEvent::ApprovalDecided { decision: Decision::Deny { .. }, by, .. } if by.is_caller())));
    }
}

#[tokio::test]
async fn a_stored_allowance_is_not_asked_again() {
    let store = MemoryStore::new();
    put(&store, &died_decided("r", "write", Decision::Allow));
    let (runs, asked) = (Runs::default(), Arc::new(AtomicUsize::new(0)));
    // The layer's own approver would deny: it is not asked.
    let tools = layered(&runs, Decision::deny("the approver says no"), &asked);
    let agent = Agent::new(second_model(), tools).store(store.clone());
    let events = to_the_end(agent.resume("r", Resume::new()).await.unwrap()).await;
    assert_eq!(tool_text(&done(&events).messages, "c1"), "written");
    assert_eq!(runs.count.load(Ordering::SeqCst), 1);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_decision_a_resume_brings_binds_without_caller_decides() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    // The layer's own approver never answers: the run can only wait.
    let never = ApprovalLayer::new(|_: &ApprovalRequest| std::future::pending::<Decision>());
    let deletes = Arc::clone(&runs.delete);
    let delete = tool::from_fn("delete", move |_: Rows| {
        let deletes = Arc::clone(&deletes);
        async move {
            deletes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("deleted")
        }
    });
    let tools = Toolbox::new().layered(delete, never);
    let model = ScriptedModel::new([Turn::new().tool_call("delete", r#"{"table": "logs"}"#)]);
    let mut run = Agent::new(model, tools.clone())
        .store(store.clone())
        .run(vec![Message::user("clean")]);
    let run_id = run.run_id().to_owned();
    until_waiting(&mut run).await;
    run.suspend().await.unwrap();
    let events = to_the_end(
        Agent::new(second_model(), tools)
            .store(store.clone())
            .resume(&run_id, Resume::new().decide("call_0_0", Decision::Allow))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(done(&events).stop, StopReason::Finished);
    assert_eq!(runs.delete.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_run_stored_before_the_journal_resumes() {
    // Written by the version before the journal: one whole checkpoint, the
    // decider a plain name.
    let fixture = include_bytes!("../fixtures/run_checkpoint_v1.json");
    let run_id = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let store = MemoryStore::new();
    store.put_raw(run_id, fixture);
    let runs = Runs::default();
    let agent = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let events = to_the_end(
        agent
            .resume(run_id, Resume::new().decide("call_0_1", Decision::Allow))
            .await
            .unwrap(),
    )
    .await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    assert_eq!(
        runs.count.load(Ordering::SeqCst),
        0,
        "the count had finished"
    );
    assert_eq!(
        runs.delete.load(Ordering::SeqCst),
        1,
        "one delete allowed, one denied"
    );
    assert_eq!(tool_text(&done.messages, "call_0_0"), "logs has 3 rows");
    assert_eq!(
        tool_text(&done.messages, "call_0_1"),
        "deleted the rows of logs"
    );
    assert!(tool_text(&done.messages, "call_0_2").contains("keep the audit trail"));
    assert_eq!(done.steps, 2);
    // The stored usage, and the second turn's on top.
    assert!(done.usage.unwrap().prompt_tokens > 12, "{:?}", done.usage);
    // Journalled from here on: the old checkpoint, then records.
    let stored = store.load(run_id).await.unwrap().unwrap();
    assert!(stored.records > 0);
    assert_eq!(*stored.checkpoint.messages, done.messages);
}

/// `turns` model turns, each calling `read`, which returns `bytes` bytes.
fn long_run(turns: usize, bytes: usize) -> (ScriptedModel, Toolbox) {
    let mut script = Vec::with_capacity(turns + 1);
    for _ in 0..turns {
        script.push(Turn::new().tool_call("read", "{}"));
    }
    script.push(Turn::new().text("Read it all."));
    let read = tool::from_fn("read", move |_: serde_json::Value| async move {
        Ok::<_, ToolError>("x".repeat(bytes))
    });
    (ScriptedModel::new(script), Toolbox::new().tool(read))
}

/// A run whose history is far past the 16 MiB a whole checkpoint could
/// hold finishes, and is stored whole: a snapshot and a few records.
pub(crate) async fn a_long_run_finishes(store: impl RunStore + Clone) {
    let (turns, bytes) = (300, 64 * 1024);
    let (model, tools) = long_run(turns, bytes);
    let agent = Agent::new(model, tools)
        .store(store.clone())
        .max_steps(turns + 1)
        .max_tool_calls(turns);
    let run = agent.run(vec![Message::user("read everything")]);
    let run_id = run.run_id().to_owned();
    let events = tokio::time::timeout(Duration::from_secs(300), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end");
    let done = done(&events);
    assert_eq!(
        done.stop,
        StopReason::Finished,
        "{:?}",
        events.iter().rev().nth(1)
    );
    assert_eq!(done.messages.len(), 2 + 2 * turns);
    let stored = store.load(&run_id).await.unwrap().unwrap();
    assert_eq!(*stored.checkpoint.messages, done.messages);
    assert!(
        stored.snapshot_bytes + stored.record_bytes > 16 * 1024 * 1024,
        "{} + {}",
        stored.snapshot_bytes,
        stored.record_bytes
    );
}

#[tokio::test]
async fn a_long_run_is_loaded_from_a_snapshot_and_a_bounded_tail() {
    use toolstack::agent::store::SNAPSHOT_EVERY_RECORDS;
    // Six records a turn: past the fewest records a snapshot waits for.
    let turns = SNAPSHOT_EVERY_RECORDS / 6 + 200;
    let (model, tools) = long_run(turns, 16);
    let store = MemoryStore::new();
    let agent = Agent::new(model, tools)
        .store(store.clone())
        .max_steps(turns + 1)
        .max_tool_calls(turns);
    let run = agent.run(vec![Message::user("read everything")]);
    let run_id = run.run_id().to_owned();
    let events = to_the_end(run).await;
    let stored = store.load(&run_id).await.unwrap().unwrap();
    assert_eq!(*stored.checkpoint.messages, done(&events).messages);
    assert!(stored.snapshot_bytes > 0, "no snapshot was folded in");
    assert!(
        stored.records < SNAPSHOT_EVERY_RECORDS / 2,
        "{} records after the snapshot",
        stored.records
    );
    assert!(stored.version.0 as usize > SNAPSHOT_EVERY_RECORDS);
}

#[tokio::test]
async fn a_run_far_past_the_old_checkpoint_bound_finishes_in_memory() {
    a_long_run_finishes(MemoryStore::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_far_past_the_old_checkpoint_bound_finishes_in_sqlite() {
    let dir = std::env::temp_dir().join(format!("toolstack-long-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = toolstack::agent::store::sqlite::SqliteStore::open(dir.join("runs.db")).unwrap();
    a_long_run_finishes(store).await;
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "redis")]
use crate::redis_server;

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_far_past_the_old_checkpoint_bound_finishes_in_redis() {
    let Some(server) = redis_server::RedisServer::start("a long run") else {
        return;
    };
    let store = toolstack::agent::store::redis::RedisStore::connect(&server.url())
        .await
        .unwrap();
    a_long_run_finishes(store).await;
}

#[tokio::test]
async fn a_record_over_its_bound_names_the_call_and_the_run_stops_or_goes_on_as_set() {
    for then in [OnStoreError::Fail, OnStoreError::Continue] {
        let (model, tools) = long_run(1, 8 * 1024);
        let agent = Agent::new(model, tools)
            .store(MemoryStore::new().max_record_bytes(4096))
            .on_store_error(then);
        let events = to_the_end(agent.run(vec![Message::user("read")])).await;
        let error = events.iter().find_map(|e| match e {
            AgentEvent::Error(err) => Some(err.message().to_owned()),
            _ => None,
        });
        match then {
            OnStoreError::Fail => {
                assert_eq!(done(&events).stop, StopReason::StoreFailed);
                let error = error.expect("an error event");
                assert!(
                    error.contains("finished state of call call_0_0 (read)")
                        && error.contains("over the store's limit of 4096"),
                    "{error}"
                );
            }
            _ => {
                assert_eq!(done(&events).stop, StopReason::Finished);
                assert!(error.is_none(), "{error:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_corrupt_record_is_typed_naming_the_run_and_the_record() {
    let store = MemoryStore::new();
    let runs = Runs::default();
    let run_id = suspended(&store, &runs).await;
    let version = store.load(&run_id).await.unwrap().unwrap().version;
    assert!(store.put_raw_record(&run_id, b"{\"record\": \"call\", \"id\": 7"));
    let agent = Agent::new(second_model(), toolbox(&runs)).store(store.clone());
    let err = agent
        .resume(&run_id, Resume::new().otherwise(Decision::Allow))
        .await
        .unwrap_err();
    match &err {
        ResumeError::Store(StoreError::Corrupt {
            run_id: named,
            record: Some(seq),
            ..
        }) => {
            assert_eq!(named, &run_id);
            assert_eq!(*seq, version.0);
        }
        other => panic!("expected a corrupt record, got {other}"),
    }
    assert!(
        err.to_string()
            .contains(&format!("record {} of run {run_id}", version.0)),
        "{err}"
    );
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_stored_denial_binds_with_no_approval_layer_at_all() {
    let store = MemoryStore::new();
    put(
        &store,
        &died_decided("r", "delete", Decision::deny("keep the logs")),
    );
    let runs = Runs::default();
    let deletes = Arc::clone(&runs.delete);
    // The approval layer is gone since (a new deploy): the denial holds.
    let delete = tool::from_fn("delete", move |_: Rows| {
        let deletes = Arc::clone(&deletes);
        async move {
            deletes.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("deleted")
        }
    });
    let agent = Agent::new(second_model(), Toolbox::new().tool(delete)).store(store.clone());
    let events = to_the_end(agent.resume("r", Resume::new()).await.unwrap()).await;
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
    assert!(tool_text(&done(&events).messages, "c1").contains("keep the logs"));
}

#[tokio::test]
async fn an_answer_paused_by_the_provider_stays_one_message_across_a_resume() {
    use toolstack::model::FinishReason;
    // In one run: the paused half and its continuation are one message.
    let model = ScriptedModel::new([
        Turn::new()
            .text("Searching…")
            .finish_reason(FinishReason::Paused),
        Turn::new().text(" found."),
    ]);
    let events =
        to_the_end(Agent::new(model, Toolbox::new()).run(vec![Message::user("search")])).await;
    assert_eq!(
        done(&events).messages,
        [
            Message::user("search"),
            Message::assistant("Searching… found.")
        ]
    );
    // Stored paused (the process stopped while the model went on): the
    // resumed run's answer goes on with the same message.
    let mut paused = died_mid_step("p", "dead", 1);
    paused.messages = Arc::new(vec![
        Message::user("search"),
        Message::assistant("Searching…"),
    ]);
    paused.step = Vec::new();
    let store = MemoryStore::new();
    put(&store, &paused);
    let agent = Agent::new(
        ScriptedModel::new([Turn::new().text(" found.")]),
        Toolbox::new(),
    )
    .store(store.clone());
    let events = to_the_end(agent.resume("p", Resume::new()).await.unwrap()).await;
    assert_eq!(
        done(&events).messages,
        [
            Message::user("search"),
            Message::assistant("Searching… found.")
        ]
    );
}

#[tokio::test]
async fn a_resume_decides_only_calls_that_waited_for_one() {
    // `delete` was planned, never asked about: an answer for it in the
    // resume (forged, or for a call the person never saw) does not bind;
    // the layer asks its own approver, who says no.
    let mut planned = died_decided("r", "delete", Decision::Allow);
    planned.step[0].state = CallState::Planned;
    let store = MemoryStore::new();
    put(&store, &planned);
    let (runs, asked) = (Runs::default(), Arc::new(AtomicUsize::new(0)));
    let tools = layered(&runs, Decision::deny("the approver says no"), &asked);
    let agent = Agent::new(second_model(), tools).store(store.clone());
    let resume = Resume::new()
        .decide("c1", Decision::Allow)
        .otherwise(Decision::Allow);
    let events = to_the_end(agent.resume("r", resume).await.unwrap()).await;
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert!(tool_text(&done(&events).messages, "c1").contains("the approver says no"));
}

#[tokio::test]
async fn a_binding_decision_does_not_come_in_with_the_callers_extensions() {
    let (runs, asked) = (Runs::default(), Arc::new(AtomicUsize::new(0)));
    let tools = layered(&runs, Decision::deny("the approver says no"), &asked);
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", r#"{"table": "logs"}"#),
        Turn::new().text("Done."),
    ]);
    let mut extensions = http::Extensions::new();
    extensions.insert(toolstack::approval::BindingDecision::new(
        "call_0_0",
        Decision::Allow,
        DecidedBy::caller("a caller"),
    ));
    let events =
        to_the_end(Agent::new(model, tools).run_with(vec![Message::user("clean")], extensions))
            .await;
    assert_eq!(runs.delete.load(Ordering::SeqCst), 0);
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(done(&events).stop, StopReason::Finished);
}

#[tokio::test]
async fn a_run_waits_for_a_person_only_once_no_call_is_about_to_start() {
    // Two at once: the delete waits for the person, the first count ends,
    // and the second count takes its slot — the run is not stalled until
    // that one has ended too.
    let runs = Runs::default();
    let model = ScriptedModel::new([Turn::new()
        .tool_call("delete", r#"{"table": "logs"}"#)
        .tool_call("count", r#"{"table": "a"}"#)
        .tool_call("count", r#"{"table": "b"}"#)]);
    let mut run = Agent::new(model, toolbox(&runs))
        .parallel_tools(2)
        .run_with(vec![Message::user("clean")], nobody_answers());
    let seen = until_waiting(&mut run).await;
    let results = seen
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolResult { .. }))
        .count();
    assert_eq!(results, 2, "{seen:#?}");
    assert_eq!(runs.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_store_of_heads_keeps_that_a_run_ended_and_forgets_an_abandoned_one() {
    // A finished run: its head only.
    let store = MemoryStore::new().finished_heads_only();
    let model = ScriptedModel::new([Turn::new().text("Hello.")]);
    let run = Agent::new(model, Toolbox::new())
        .store(store.clone())
        .run(vec![Message::user("hi")]);
    let run_id = run.run_id().to_owned();
    to_the_end(run).await;
    let stored = store.load(&run_id).await.unwrap().unwrap();
    assert_eq!(
        stored.checkpoint.status,
        RunStatus::Done {
            stop: StopReason::Finished
        }
    );
    assert!(stored.checkpoint.messages.is_empty());
    assert_eq!((stored.records, stored.snapshot_bytes), (0, 0));

    // A run dropped mid-way (its client gone): forgotten once its lease
    // and the grace after it have passed, at the next append of any run.
    let store = MemoryStore::new().abandoned_ttl(Duration::from_secs(60));
    let runs = Runs::default();
    let mut run = Agent::new(first_model(), toolbox(&runs))
        .store(store.clone())
        .run_with(vec![Message::user("clean the logs")], nobody_answers());
    let dropped = run.run_id().to_owned();
    until_waiting(&mut run).await;
    drop(run);
    // Not yet: the lease (60 s) and the grace (60 s) hold it.
    let other = Agent::new(second_model(), Toolbox::new()).store(store.clone());
    to_the_end(other.run(vec![Message::user("hi")])).await;
    assert!(store.load(&dropped).await.unwrap().is_some());
    assert!(store.backdate(&dropped, Duration::from_secs(121)));
    let other = Agent::new(
        ScriptedModel::new([Turn::new().text("Hello.")]),
        Toolbox::new(),
    )
    .store(store.clone());
    to_the_end(other.run(vec![Message::user("hi")])).await;
    assert!(store.load(&dropped).await.unwrap().is_none());
}
