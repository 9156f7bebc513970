//! An answer cut mid-stream by a spend limit: the agent keeps what the
//! model said before the cut in the run's history, marked as cut, runs
//! none of the calls it had begun, and stops with
//! [`StopReason::SpendLimit`] after an error that names the limit. The
//! model here is scripted: its stream yields text (and a call) and then
//! the `SpendLimited` error a spend layer ends a stream with.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::agent::store::MemoryStore;
use toolstack::agent::{Agent, AgentDone, AgentEvent, AgentStream, StopReason};
use toolstack::model::{ChatRequest, Message, ScriptedModel, Turn};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};

/// The limit's message, as the spend layer words one.
const LIMIT: &str = "this run has used 1,000 of its 1,000 tokens (0.002 spent)";

/// The note that follows a cut answer's text, `more` after the limit.
fn note(more: &str) -> String {
    format!("[the rest of this answer was cut by a spend limit: {LIMIT}{more}]")
}

fn limited() -> ToolError {
    ToolError::new(ErrorKind::SpendLimited, LIMIT)
}

/// A toolbox whose one tool counts its calls.
fn counted(runs: Arc<AtomicUsize>) -> Toolbox {
    Toolbox::new().tool(tool::from_fn("add", move |_: serde_json::Value| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(3)
        }
    }))
}

async fn to_the_end(run: AgentStream) -> (Vec<AgentEvent>, AgentDone) {
    let mut all = tokio::time::timeout(Duration::from_secs(60), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end");
    match all.pop() {
        Some(AgentEvent::Done(done)) => (all, done),
        other => panic!("the run did not end with Done: {other:?}"),
    }
}

fn streamed_text(events: &[AgentEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(piece) => Some(piece.as_str()),
            _ => None,
        })
        .collect()
}

/// The one error event, which must be the last before `Done`.
fn last_error(events: &[AgentEvent]) -> &ToolError {
    match events.last() {
        Some(AgentEvent::Error(err)) => err,
        other => panic!("the last event before Done is not the error: {other:?}"),
    }
}

#[tokio::test]
async fn an_answer_cut_by_a_spend_limit_is_kept_marked_as_cut() {
    let model = ScriptedModel::new([Turn::new()
        .text("The first half of the answer")
        .fail(limited())])
    .fragment_chars(5);
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(model, counted(Arc::clone(&runs)));
    let (events, done) = to_the_end(agent.run(vec![Message::user("Answer.")])).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    assert_eq!(streamed_text(&events), "The first half of the answer");
    let err = last_error(&events);
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(err.message(), LIMIT);
    assert_eq!(
        done.messages,
        vec![
            Message::user("Answer."),
            Message::assistant(format!("The first half of the answer\n\n{}", note(""))),
        ]
    );
}

#[tokio::test]
async fn a_call_begun_before_the_cut_is_not_run_nor_kept() {
    let model = ScriptedModel::new([
        Turn::new()
            .text("Adding.")
            .tool_call("add", r#"{"a": 1, "b": 2}"#)
            .fail(limited()),
        // Never asked: the run stops at the cut.
        Turn::new().text("3"),
    ]);
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(model, counted(Arc::clone(&runs)));
    let (events, done) = to_the_end(agent.run(vec![Message::user("1 + 2?")])).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the cut call ran");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolCall(_) | AgentEvent::ToolResult { .. })),
        "{events:?}"
    );
    assert_eq!(last_error(&events).kind(), ErrorKind::SpendLimited);
    // No call in the history, so no call without its result either.
    assert_eq!(
        done.messages.last(),
        Some(&Message::assistant(format!(
            "Adding.\n\n{}",
            note("; the tool calls it had begun were not run")
        )))
    );
    assert_eq!(done.messages.len(), 2);
}

#[tokio::test]
async fn a_limit_reached_before_anything_was_said_keeps_nothing() {
    let model = ScriptedModel::new([Turn::new().fail(limited())]);
    let agent = Agent::new(model, counted(Arc::default()));
    let (events, done) = to_the_end(agent.run(vec![Message::user("Answer.")])).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    assert_eq!(last_error(&events).message(), LIMIT);
    assert_eq!(done.messages, vec![Message::user("Answer.")]);
}

#[tokio::test]
async fn another_error_mid_answer_still_drops_what_was_said() {
    // Only a spend limit's cut keeps the answer: a stream that breaks is
    // a model error, its half answer not one to build on.
    let model = ScriptedModel::new([Turn::new()
        .text("Half")
        .fail(ToolError::failed("the connection reset"))]);
    let agent = Agent::new(model, counted(Arc::default()));
    let (_, done) = to_the_end(agent.run(vec![Message::user("Answer.")])).await;
    assert_eq!(done.stop, StopReason::ModelError);
    assert_eq!(done.messages, vec![Message::user("Answer.")]);
}

#[tokio::test]
async fn the_cut_answer_is_stored_and_read_by_the_sessions_next_run() {
    let seen: Arc<Mutex<Vec<Vec<Message>>>> = Arc::default();
    let model = ScriptedModel::new([
        Turn::new().text("Part one, part").fail(limited()),
        Turn::new().text("Going on."),
    ]);
    let recorded = Arc::clone(&seen);
    let model = tower::ServiceBuilder::new()
        .map_request(move |request: ChatRequest| {
            recorded.lock().unwrap().push(request.messages.to_vec());
            request
        })
        .service(model);
    let agent = Agent::new(model, counted(Arc::default())).store(MemoryStore::new());
    let session = agent.session("cut");
    let first = session.run(Message::user("Tell me.")).await.unwrap();
    let (_, done) = to_the_end(first).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    let cut = Message::assistant(format!("Part one, part\n\n{}", note("")));
    // The journal stored it as any answer.
    assert_eq!(
        session.history().await.unwrap(),
        vec![Message::user("Tell me."), cut.clone()]
    );
    let second = session.run(Message::user("Go on.")).await.unwrap();
    let (_, done) = to_the_end(second).await;
    assert_eq!(done.stop, StopReason::Finished);
    let last = seen.lock().unwrap().last().unwrap().clone();
    assert_eq!(
        last,
        vec![Message::user("Tell me."), cut, Message::user("Go on.")]
    );
}
