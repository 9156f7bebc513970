//! The agent compacts its history: before a model call whose request
//! would pass the context budget, and once when the endpoint refuses a
//! request for its length — never in a loop. A compaction is a journal
//! record (a resumed run goes on from the compacted history), an event,
//! and a strategy's result that breaks what must stay is not used.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::agent::compaction::{estimate_tokens, CompactionError, ElideToolResults};
use toolstack::agent::store::{MemoryStore, RunStore};
use toolstack::agent::{Agent, AgentEvent, Resume, StopReason};
use toolstack::approval::{ApprovalRequest, CallerApprover, Decision};
use toolstack::model::{ChatRequest, ContextExceeded, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};

/// `turns` turns, each reading `bytes` bytes, then an answer.
fn reading(turns: usize, bytes: usize) -> (ScriptedModel, Toolbox) {
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

async fn run_to_end(run: toolstack::agent::AgentStream) -> Vec<AgentEvent> {
    tokio::time::timeout(Duration::from_secs(60), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end")
}

fn done(events: &[AgentEvent]) -> &toolstack::agent::AgentDone {
    match events.last() {
        Some(AgentEvent::Done(done)) => done,
        other => panic!("no Done: {other:?}"),
    }
}

/// The largest request the model was sent, in estimated tokens.
fn recording(
    model: ScriptedModel,
    largest: Arc<AtomicUsize>,
) -> impl toolstack::model::ModelService {
    tower::ServiceBuilder::new()
        .map_request(move |request: ChatRequest| {
            let tokens = estimate_tokens(&request.messages) as usize;
            largest.fetch_max(tokens, Ordering::SeqCst);
            request
        })
        .service(model)
}

#[tokio::test]
async fn a_long_run_stays_under_its_context_budget_and_every_call_keeps_its_result() {
    let (turns, bytes, budget) = (120, 8 * 1024, 20_000);
    let (model, tools) = reading(turns, bytes);
    let largest = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(recording(model, Arc::clone(&largest)), tools)
        .max_steps(turns + 1)
        .max_tool_calls(turns)
        .compaction(budget, ElideToolResults::new(3));
    let events = run_to_end(agent.run(vec![Message::user("read everything")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    let compactions = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Compacted { .. }))
        .count();
    assert!(compactions > 0);
    // Every request but the ones that passed it by a turn's result stays
    // under the budget: a compaction comes before the call that would.
    let largest = largest.load(Ordering::SeqCst) as u64;
    assert!(largest <= budget, "a request of {largest} tokens");
    toolstack::agent::compaction::check(&done.messages).unwrap();
    // Without compaction, the same run sends its whole history each time.
    let (model, tools) = reading(turns, bytes);
    let unbounded = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(recording(model, Arc::clone(&unbounded)), tools)
        .max_steps(turns + 1)
        .max_tool_calls(turns);
    run_to_end(agent.run(vec![Message::user("read everything")])).await;
    assert!(unbounded.load(Ordering::SeqCst) as u64 > 10 * budget);
}

/// A model that refuses a request longer than `limit` messages for its
/// length, as an endpoint does; counts its calls.
fn refusing(limit: usize, calls: Arc<AtomicUsize>) -> impl toolstack::model::ModelService {
    tower::service_fn(move |request: ChatRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let answer: Result<_, ToolError> = if request.messages.len() > limit {
            Err(ToolError::new(
                ErrorKind::Failed,
                "the model endpoint answered 400 (invalid_request_error): prompt is too long",
            )
            .with_source(ContextExceeded))
        } else {
            let items: Vec<Result<ModelDelta, ToolError>> =
                vec![Ok(ModelDelta::Text("A short answer.".into()))];
            Ok(futures_util::stream::iter(items))
        };
        std::future::ready(answer)
    })
}

/// Keeps the first message and the last one.
fn first_and_last(messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
    match messages {
        [first, .., last] if messages.len() > 2 => Ok(Some(vec![first.clone(), last.clone()])),
        _ => Ok(None),
    }
}

#[tokio::test]
async fn a_refusal_for_length_is_compacted_and_asked_once_more_never_in_a_loop() {
    let history = vec![
        Message::user("one"),
        Message::assistant("a"),
        Message::user("two"),
        Message::assistant("b"),
        Message::user("three"),
    ];
    // Compacted to two messages, the request goes through.
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(refusing(2, Arc::clone(&calls)), Toolbox::new())
        .compaction(u64::MAX, first_and_last);
    let events = run_to_end(agent.run(history.clone())).await;
    assert_eq!(done(&events).stop, StopReason::Finished, "{events:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        done(&events).messages,
        [
            Message::user("one"),
            Message::user("three"),
            Message::assistant("A short answer.")
        ]
    );
    // Refused still after one compaction: the refusal ends the run.
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(refusing(1, Arc::clone(&calls)), Toolbox::new())
        .compaction(u64::MAX, first_and_last);
    let events = run_to_end(agent.run(history.clone())).await;
    assert_eq!(done(&events).stop, StopReason::ModelError);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "asked once more, no more");
    // Without a compaction policy: refused, as it was.
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(refusing(2, Arc::clone(&calls)), Toolbox::new());
    let events = run_to_end(agent.run(history)).await;
    assert_eq!(done(&events).stop, StopReason::ModelError);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_strategy_that_breaks_a_call_from_its_result_or_drops_the_question_is_not_used() {
    let (model, tools) = reading(2, 64);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    // Drops everything but the last message: the latest user message,
    // and (once a call was made) its call.
    let broken = move |messages: &[Message]| {
        seen.lock().unwrap().push(messages.len());
        match messages.len() {
            1 => Ok(None),
            n => Ok(Some(messages[n - 1..].to_vec())),
        }
    };
    let agent = Agent::new(model, tools).max_steps(5).compaction(0, broken);
    let events = run_to_end(agent.run(vec![Message::user("read")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    assert!(!asked.lock().unwrap().is_empty(), "the strategy was asked");
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));
    // The history is whole: 1 + 2 × (call, result) + the answer.
    assert_eq!(done.messages.len(), 6);
}

#[tokio::test]
async fn a_run_resumed_after_a_compaction_goes_on_from_the_compacted_history() {
    let store = MemoryStore::new();
    let writes = Arc::new(AtomicUsize::new(0));
    let write = {
        let writes = Arc::clone(&writes);
        tool::from_fn("write", move |_: serde_json::Value| {
            let writes = Arc::clone(&writes);
            async move {
                writes.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("written")
            }
        })
    };
    let nobody = |_: &ApprovalRequest| async { Decision::deny("no approver") };
    let tools = Toolbox::new().layered(
        write,
        toolstack_layers::approval::ApprovalLayer::new(nobody).caller_decides(),
    );
    let model = ScriptedModel::new([Turn::new().tool_call("write", "{}")]);
    let history: Vec<Message> = (0..6)
        .flat_map(|i| {
            [
                Message::user(format!("q{i}")),
                Message::assistant(format!("a{i}")),
            ]
        })
        .chain([Message::user("now write")])
        .collect();
    let mut extensions = http::Extensions::new();
    extensions.insert(CallerApprover::new("the user", |_: &ApprovalRequest| {
        std::future::pending::<Decision>()
    }));
    let mut run = Agent::new(model, tools.clone())
        .store(store.clone())
        .compaction(0, first_and_last_user)
        .run_with(history, extensions);
    let run_id = run.run_id().to_owned();
    loop {
        match run.next().await.expect("the run waits") {
            AgentEvent::AwaitingApproval { .. } => break,
            _ => continue,
        }
    }
    run.suspend().await.unwrap();
    let stored = store.load(&run_id).await.unwrap().unwrap();
    // The compacted history (the first and the last user message) and the
    // answer that called the tool.
    assert_eq!(
        stored.checkpoint.messages.len(),
        3,
        "{:#?}",
        stored.checkpoint.messages
    );
    let agent =
        Agent::new(ScriptedModel::new([Turn::new().text("Done.")]), tools).store(store.clone());
    let events = run_to_end(
        agent
            .resume(&run_id, Resume::new().decide("call_0_0", Decision::Allow))
            .await
            .unwrap(),
    )
    .await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert_eq!(done.messages[0], Message::user("q0"));
    assert_eq!(done.messages[1], Message::user("now write"));
    assert_eq!(done.messages.len(), 5);
}

/// Keeps the first user message and the last one (the histories here
/// have no calls before the last).
fn first_and_last_user(messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
    let users: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(m, Message::User { .. }))
        .collect();
    match users.as_slice() {
        [first, .., last] if messages.len() > 2 => {
            Ok(Some(vec![(*first).clone(), (*last).clone()]))
        }
        _ => Ok(None),
    }
}

#[tokio::test]
async fn a_run_compacts_again_and_again_keeping_the_question() {
    use toolstack::agent::compaction::KeepFirstAndLast;
    let (model, tools) = reading(60, 2 * 1024);
    let agent = Agent::new(model, tools)
        .max_steps(61)
        .max_tool_calls(60)
        .compaction(4_000, KeepFirstAndLast::new(3));
    let events = run_to_end(agent.run(vec![Message::user("read everything")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    let compactions = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Compacted { .. }))
        .count();
    assert!(compactions > 3, "{compactions} compactions");
    assert_eq!(done.messages[0], Message::user("read everything"));
    assert!(done.messages.len() < 20, "{} messages", done.messages.len());
    toolstack::agent::compaction::check(&done.messages).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_summary_model_that_hangs_is_bounded_and_the_run_goes_on_or_stops_as_set() {
    use toolstack::agent::compaction::{OnCompactionError, Summarize};
    for then in [OnCompactionError::Continue, OnCompactionError::Stop] {
        let hanging = tower::service_fn(|_: ChatRequest| {
            std::future::ready(Ok::<_, ToolError>(futures_util::stream::pending::<
                Result<ModelDelta, ToolError>,
            >()))
        });
        let (model, tools) = reading(3, 4096);
        let agent = Agent::new(model, tools)
            .max_steps(5)
            .compaction(
                1_000,
                Summarize::new(hanging, 1).timeout(Duration::from_secs(2)),
            )
            .compaction_failure(then);
        let started = tokio::time::Instant::now();
        let events = run_to_end(agent.run(vec![Message::user("read")])).await;
        let done = done(&events);
        assert!(!events
            .iter()
            .any(|e| matches!(e, AgentEvent::Compacted { .. })));
        match then {
            OnCompactionError::Continue => {
                assert_eq!(done.stop, StopReason::Finished);
                // Each call past the budget waited for the summary, no more.
                assert!(started.elapsed() <= Duration::from_secs(2 * 4));
            }
            _ => {
                assert_eq!(done.stop, StopReason::CompactionFailed);
                assert_eq!(done.stop.as_str(), "compaction_failed");
                let error = events.iter().find_map(|e| match e {
                    AgentEvent::Error(err) => Some(err.message().to_owned()),
                    _ => None,
                });
                assert_eq!(
                    error.as_deref(),
                    Some("the history could not be compacted: the summary model did not answer within 2s")
                );
                assert_eq!(started.elapsed(), Duration::from_secs(2));
            }
        }
    }
}

#[tokio::test]
async fn a_strategy_dropping_the_question_stops_a_run_set_to_stop_with_a_typed_reason() {
    use toolstack::agent::compaction::OnCompactionError;
    let (model, tools) = reading(2, 64);
    let no_question = |messages: &[Message]| {
        let kept: Vec<Message> = messages
            .iter()
            .filter(|m| !matches!(m, Message::User { .. }))
            .cloned()
            .collect();
        Ok((kept.len() < messages.len()).then_some(kept))
    };
    let agent = Agent::new(model, tools)
        .compaction(0, no_question)
        .compaction_failure(OnCompactionError::Stop);
    let events = run_to_end(agent.run(vec![Message::user("read")])).await;
    assert_eq!(done(&events).stop, StopReason::CompactionFailed);
    let error = events.iter().find_map(|e| match e {
        AgentEvent::Error(err) => Some(err.message().to_owned()),
        _ => None,
    });
    assert_eq!(
        error.as_deref(),
        Some(
            "the history could not be compacted: the compaction would drop the latest user message"
        )
    );
}

/// An output store that refuses everything.
struct Refusing;

impl toolstack_layers::budget::OutputStore for Refusing {
    fn put(
        &self,
        _: &str,
        _: toolstack_layers::budget::WholeOutput,
    ) -> futures_util::future::BoxFuture<
        'static,
        Result<(), toolstack_layers::budget::OutputStoreError>,
    > {
        Box::pin(std::future::ready(Err(
            toolstack_layers::budget::OutputStoreError::new("the disk is full"),
        )))
    }

    fn read(
        &self,
        _: &str,
        _: usize,
        _: usize,
    ) -> futures_util::future::BoxFuture<
        'static,
        Result<Option<toolstack_layers::budget::Chunk>, toolstack_layers::budget::OutputStoreError>,
    > {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn ttl(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn max_output_bytes(&self) -> usize {
        1 << 20
    }
}

#[tokio::test]
async fn an_elided_result_is_kept_and_its_notice_reads_it_back_or_nothing_is_elided() {
    use toolstack_layers::budget::{read_tool_result, ElidedOutputs, MemoryOutputStore};
    let outputs = MemoryOutputStore::new(1 << 20, Duration::from_secs(3600));
    let (model, tools) = reading(4, 4096);
    let agent = Agent::new(model, tools.tool(read_tool_result(outputs.clone())))
        .max_steps(6)
        .compaction(
            2_500,
            ElideToolResults::new(1).keep_in(ElidedOutputs::new(outputs.clone())),
        );
    let events = run_to_end(agent.run(vec![Message::user("read")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    let notice = done
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } if content.starts_with("[elided") => {
                Some(content.clone())
            }
            _ => None,
        })
        .expect("an elided result");
    // `… it is kept: read it with read_tool_result {"handle":"…","offset":0}]`
    let (_, call) = notice
        .split_once("read it with read_tool_result ")
        .unwrap_or_else(|| panic!("{notice}"));
    let arguments = call.strip_suffix(']').unwrap().to_owned();
    let reader = read_tool_result(outputs);
    let stream = tower::ServiceExt::oneshot(
        reader,
        toolstack::ToolRequest::new("read_tool_result", arguments),
    )
    .await
    .unwrap();
    let items: Vec<_> = stream.collect().await;
    let page = items[0].as_ref().unwrap().model_text().unwrap().to_owned();
    assert_eq!(page, "x".repeat(4096), "the whole result reads back");

    // A store that cannot keep them: nothing is elided.
    let (model, tools) = reading(4, 4096);
    let agent = Agent::new(model, tools).max_steps(6).compaction(
        2_500,
        ElideToolResults::new(1).keep_in(ElidedOutputs::new(Refusing)),
    );
    let events = run_to_end(agent.run(vec![Message::user("read")])).await;
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::Compacted { .. })));
    assert!(!done_messages_elided(&events));
}

fn done_messages_elided(events: &[AgentEvent]) -> bool {
    done(events)
        .messages
        .iter()
        .any(|m| matches!(m, Message::Tool { content, .. } if content.starts_with("[elided")))
}
