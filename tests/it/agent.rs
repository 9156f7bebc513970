//! The agent loop against the scripted model.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::agent::{Agent, AgentDone, AgentEvent, StopReason};
use toolstack::model::{
    ChatRequest, FinishReason, Message, ModelDelta, ScriptedModel, Turn, Usage,
    MAX_TOOL_CALLS_PER_ANSWER,
};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Nap {
    ms: u64,
}

fn toolbox() -> Toolbox {
    Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }))
}

async fn events(agent: &Agent<ScriptedModel>, prompt: &str) -> (Vec<AgentEvent>, AgentDone) {
    let mut all: Vec<AgentEvent> = agent.run(vec![Message::user(prompt)]).collect().await;
    match all.pop() {
        Some(AgentEvent::Done(done)) => (all, done),
        other => panic!("the run did not end with Done: {other:?}"),
    }
}

fn tool_messages(done: &AgentDone) -> Vec<(String, String)> {
    done.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_only_answer_ends_the_run_in_one_step() {
    let agent = Agent::new(
        ScriptedModel::new([Turn::new().text("Hello there")]),
        toolbox(),
    );
    let (events, done) = events(&agent, "hi").await;
    let text: String = events
        .iter()
        .map(|e| match e {
            AgentEvent::TextDelta(t) => t.as_str(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(text, "Hello there");
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 1));
    assert_eq!(
        done.messages.last(),
        Some(&Message::assistant("Hello there"))
    );
}

#[tokio::test]
async fn one_tool_call_runs_and_its_result_goes_back_to_the_model() {
    let model = ScriptedModel::new([
        Turn::new().tool_call("add", r#"{"a":2,"b":40}"#),
        Turn::new().text("It is 42."),
    ]);
    let agent = Agent::new(model, toolbox());
    let (events, done) = events(&agent, "2+40?").await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            AgentEvent::ToolCallStarted { .. } => "started",
            AgentEvent::ToolCallInputDelta { .. } => "input",
            AgentEvent::ToolCall(_) => "call",
            AgentEvent::ToolOutput { .. } => "output",
            AgentEvent::ToolResult { .. } => "result",
            AgentEvent::TextDelta(_) => "text",
            _ => "other",
        })
        .collect();
    let mut dedup = kinds.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        ["started", "input", "call", "output", "result", "text"]
    );
    assert_eq!(
        tool_messages(&done),
        [("call_0_0".to_owned(), "42".to_owned())]
    );
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 2));
    assert!(done.usage.unwrap().completion_tokens > 0);
}

#[tokio::test]
async fn tool_errors_unknown_tools_and_bad_arguments_go_back_to_the_model() {
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("ad", r#"{"a":1,"b":2}"#)
            .tool_call("add", r#"{"a":"one","b":2}"#)
            .tool_call("add", "not json"),
        Turn::new().text("Sorry."),
    ]);
    let agent = Agent::new(model, toolbox());
    let (events, done) = events(&agent, "?").await;
    let results: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result.is_error),
            _ => None,
        })
        .collect();
    assert_eq!(results, [true, true, true]);
    let fed_back = tool_messages(&done);
    assert!(
        fed_back[0].1.contains("unknown tool") && fed_back[0].1.contains("did you mean `add`"),
        "{}",
        fed_back[0].1
    );
    assert!(
        fed_back[1].1.contains("invalid_arguments") && fed_back[1].1.contains('a'),
        "{}",
        fed_back[1].1
    );
    assert!(
        fed_back[2].1.contains("invalid_arguments"),
        "{}",
        fed_back[2].1
    );
    assert_eq!(
        done.stop,
        StopReason::Finished,
        "the loop went on after the failures"
    );
}

#[tokio::test]
async fn an_empty_tool_name_from_the_model_goes_back_as_an_unknown_tool() {
    let model = ScriptedModel::new([
        Turn::new().tool_call("", r#"{"a":1,"b":2}"#),
        Turn::new().text("Let me use a real tool."),
    ]);
    let agent = Agent::new(model, toolbox());
    let (_, done) = events(&agent, "?").await;
    let fed_back = tool_messages(&done);
    assert_eq!(fed_back.len(), 1);
    assert!(
        fed_back[0].1.contains("not_found")
            && fed_back[0].1.contains("names no tool")
            && fed_back[0].1.contains("add"),
        "{}",
        fed_back[0].1
    );
    assert_eq!(done.stop, StopReason::Finished, "the run went on");
}

#[tokio::test]
async fn max_steps_ends_the_run_with_its_reason() {
    let again = || Turn::new().tool_call("add", r#"{"a":1,"b":1}"#);
    let agent = Agent::new(ScriptedModel::new([again(), again(), again()]), toolbox()).max_steps(2);
    let (_, done) = events(&agent, "loop").await;
    assert_eq!((done.stop, done.steps), (StopReason::MaxSteps, 2));
}

#[tokio::test]
async fn max_tool_calls_ends_the_run_and_answers_every_call() {
    let three = Turn::new()
        .tool_call("add", r#"{"a":1,"b":1}"#)
        .tool_call("add", r#"{"a":1,"b":2}"#)
        .tool_call("add", r#"{"a":1,"b":3}"#);
    let agent = Agent::new(ScriptedModel::new([three.clone(), three]), toolbox()).max_tool_calls(4);
    let (_, done) = events(&agent, "many").await;
    assert_eq!(done.stop, StopReason::MaxToolCalls);
    let fed_back = tool_messages(&done);
    assert_eq!(fed_back.len(), 6, "every call has a result, run or refused");
    assert!(
        fed_back[3].1.contains("limit of 4 tool calls"),
        "{}",
        fed_back[3].1
    );
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_respect_the_bound_and_keep_call_order() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let nap = tool::from_fn("nap", move |Nap { ms }| {
        let (r, p) = (r.clone(), p.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            r.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ToolError>(format!("slept {ms}"))
        }
    });
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("nap", r#"{"ms":40}"#)
            .tool_call("nap", r#"{"ms":10}"#)
            .tool_call("nap", r#"{"ms":30}"#)
            .tool_call("nap", r#"{"ms":20}"#),
        Turn::new().text("done"),
    ]);
    let agent = Agent::new(model, Toolbox::new().tool(nap)).parallel_tools(2);
    let (_, done) = events(&agent, "nap").await;
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    let order: Vec<String> = tool_messages(&done).into_iter().map(|(_, c)| c).collect();
    assert_eq!(order, ["slept 40", "slept 10", "slept 30", "slept 20"]);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_event_stream_cancels_a_running_tool() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let cancelled = Arc::new(AtomicBool::new(false));
    let c = cancelled.clone();
    let slow = tool::from_fn("slow", move |_: Nap| {
        let flag = Flag(c.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(flag);
            Ok::<_, ToolError>("never")
        }
    });
    let model = ScriptedModel::new([
        Turn::new().tool_call("slow", r#"{"ms":0}"#),
        Turn::new().text("x"),
    ]);
    let agent = Agent::new(model, Toolbox::new().tool(slow));
    let mut run = agent.run(vec![Message::user("go")]);
    while let Some(event) = run.next().await {
        if matches!(event, AgentEvent::ToolCall(_)) {
            break;
        }
    }
    // Let the tool start.
    assert!(tokio::time::timeout(Duration::from_secs(1), run.next())
        .await
        .is_err());
    assert!(!cancelled.load(Ordering::SeqCst));
    drop(run);
    assert!(cancelled.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_model_failure_ends_the_run_with_an_error_event() {
    let agent = Agent::new(ScriptedModel::new([]), toolbox());
    let (events, done) = events(&agent, "hi").await;
    assert!(matches!(events.as_slice(), [AgentEvent::Error(_)]));
    assert_eq!(done.stop, StopReason::ModelError);
}

fn specialist(turns: Vec<Turn>) -> toolstack::agent::AgentTool<ScriptedModel> {
    let agent = Agent::new(ScriptedModel::new(turns), toolbox());
    toolstack::agent::AgentTool::new("math", "A specialist in arithmetic.", agent)
}

#[tokio::test]
async fn an_agent_as_a_tool_streams_its_activity_and_answers_with_its_final_text() {
    let math = specialist(vec![
        Turn::new()
            .text("Adding.")
            .tool_call("add", r#"{"a":2,"b":3}"#),
        Turn::new().text("The sum is 5."),
    ]);
    let supervisor = ScriptedModel::new([
        Turn::new().tool_call("math", r#"{"message":"what is 2+3?"}"#),
        Turn::new().text("Math says 5."),
    ]);
    let agent = Agent::new(supervisor, Toolbox::new().tool(math));
    let (events, done) = events(&agent, "2+3?").await;
    let activity: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Progress { call_id, progress } => {
                assert_eq!(call_id, "call_0_0");
                progress.message.clone()
            }
            _ => None,
        })
        .collect();
    assert!(
        activity.iter().any(|m| m.contains("calling `add`")),
        "{activity:?}"
    );
    assert!(
        activity.iter().any(|m| m.contains("`add` done")),
        "{activity:?}"
    );
    assert_eq!(
        tool_messages(&done),
        [("call_0_0".to_owned(), "The sum is 5.".to_owned())]
    );
    assert_eq!(done.stop, StopReason::Finished);
}

#[tokio::test]
async fn an_agent_tool_takes_plain_text_and_refuses_an_empty_message() {
    use tower::ServiceExt;
    let math = specialist(vec![Turn::new().text("Plain question, plain answer.")]);
    let result = toolstack::ToolResult::collect(
        math.clone()
            .oneshot(toolstack::ToolRequest::new("math", "what is one plus one"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(result.text(), "Plain question, plain answer.");
    let err = math
        .oneshot(toolstack::ToolRequest::new("math", r#"{"message":"  "}"#))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), toolstack::ErrorKind::InvalidArguments);
}

#[tokio::test]
async fn a_sub_agent_that_stops_on_a_limit_fails_the_tool_call() {
    let looping = specialist(vec![Turn::new().tool_call("add", r#"{"a":1,"b":1}"#)]);
    use tower::ServiceExt;
    let stream = looping
        .oneshot(toolstack::ToolRequest::new("math", "loop"))
        .await
        .unwrap();
    let result = toolstack::ToolResult::collect(stream).await;
    assert!(result.is_error);
    // The script has one turn: the second model call fails.
    assert!(result.text().contains("no turn left"), "{}", result.text());
}

/// Who is asking, as an auth layer would record it.
#[derive(Clone, Debug, PartialEq)]
struct Caller(&'static str);

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// `whoami` for everyone, `purge` for admins only; both report the caller.
fn per_caller_toolbox() -> Toolbox {
    let whoami = |_: NoArgs, ctx: toolstack::ToolContext| async move {
        let caller = ctx.extensions().get::<Caller>().map_or("nobody", |c| c.0);
        Ok::<_, ToolError>(format!("you are {caller}"))
    };
    Toolbox::new()
        .tool(tool::from_fn_with_context("whoami", whoami))
        .tool(tool::from_fn_with_context("purge", whoami))
        .resolver(|info: &toolstack::ToolInfo, ext: &http::Extensions| {
            info.name() != "purge" || ext.get::<Caller>() == Some(&Caller("admin"))
        })
}

#[tokio::test]
async fn a_run_for_a_caller_shows_and_runs_only_that_callers_tools() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    // The model records which tools it was shown and for whom.
    let model = tower::ServiceBuilder::new()
        .map_request(move |request: toolstack::model::ChatRequest| {
            let names: Vec<String> = request.tools.iter().map(|t| t.name().to_owned()).collect();
            let caller = request.extensions.get::<Caller>().cloned();
            record.lock().unwrap().push((names, caller));
            request
        })
        .service(ScriptedModel::new([
            Turn::new()
                .tool_call("whoami", "{}")
                .tool_call("purge", "{}"),
            Turn::new().text("done"),
        ]));
    let agent = Agent::new(model, per_caller_toolbox());
    let request = toolstack::agent::AgentRequest::new(vec![Message::user("go")])
        .with_extension(Caller("guest"));
    let all: Vec<AgentEvent> = tower::ServiceExt::oneshot(agent.clone(), request)
        .await
        .unwrap()
        .collect()
        .await;
    let Some(AgentEvent::Done(done)) = all.last() else {
        panic!("no Done: {all:?}")
    };
    let results = tool_messages(done);
    assert_eq!(results[0].1, "you are guest");
    assert!(
        results[1].1.contains("unknown tool `purge`"),
        "{}",
        results[1].1
    );
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(seen.len(), 2, "two model calls");
    for (names, caller) in seen {
        assert_eq!(names, ["whoami"], "a guest's model is not shown `purge`");
        assert_eq!(caller, Some(Caller("guest")));
    }
}

#[tokio::test]
async fn an_agent_tool_passes_its_callers_extensions_to_the_sub_agent() {
    let sub = Agent::new(
        ScriptedModel::new([
            Turn::new().tool_call("purge", "{}"),
            Turn::new().text("purged"),
        ]),
        per_caller_toolbox(),
    );
    let as_tool = toolstack::agent::AgentTool::new("ops", "Runs operations", sub);
    let stream = tower::ServiceExt::oneshot(
        as_tool,
        toolstack::ToolRequest::new("ops", "purge it").with_extension(Caller("admin")),
    )
    .await
    .unwrap();
    let items: Vec<toolstack::ToolItem> = stream.collect().await;
    let reports: Vec<String> = items
        .iter()
        .filter_map(|i| i.as_ref().ok()?.as_progress()?.message.clone())
        .collect();
    // Hidden from a caller without the extension, `purge` would have failed.
    assert!(reports.contains(&"`purge` done".to_owned()), "{reports:?}");
    let result = toolstack::ToolResult::collect(futures_util::stream::iter(items)).await;
    assert_eq!(result.text(), "purged");
}

#[tokio::test]
async fn an_answer_cut_off_at_the_token_limit_ends_the_run_with_length() {
    let model = ScriptedModel::new([Turn::new()
        .text("The answer is")
        .finish_reason(FinishReason::Length)]);
    let (_, done) = events(&Agent::new(model, toolbox()), "hi").await;
    assert_eq!((done.stop, done.steps), (StopReason::Length, 1));
    assert_eq!(
        done.messages.last(),
        Some(&Message::assistant("The answer is")),
        "the truncated text is kept, and marked by the stop reason"
    );
}

#[tokio::test]
async fn tool_calls_in_an_answer_cut_off_at_the_token_limit_are_answered_not_run() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let add = tool::from_fn("add", move |Add { a, b }| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(a + b) }
    });
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("add", r#"{"a":1,"b":"#)
            .finish_reason(FinishReason::Length),
        Turn::new().text("never asked"),
    ]);
    let (events, done) = events(&Agent::new(model, Toolbox::new().tool(add)), "hi").await;
    assert_eq!((done.stop, done.steps), (StopReason::Length, 1));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(!events.iter().any(|e| matches!(e, AgentEvent::ToolCall(_))));
    let fed_back = tool_messages(&done);
    assert_eq!(fed_back.len(), 1, "the history stays well-formed");
    assert!(fed_back[0].1.contains("token limit"), "{}", fed_back[0].1);
}

#[tokio::test]
async fn an_answer_stopped_by_a_content_filter_ends_the_run_with_content_filter() {
    let model = ScriptedModel::new([
        Turn::new()
            .text("I will")
            .tool_call("add", r#"{"a":1,"b":2}"#)
            .finish_reason(FinishReason::ContentFilter),
        Turn::new().text("never asked"),
    ]);
    let (_, done) = events(&Agent::new(model, toolbox()), "hi").await;
    assert_eq!((done.stop, done.steps), (StopReason::ContentFilter, 1));
    assert!(
        tool_messages(&done)[0].1.contains("content filter"),
        "{:?}",
        tool_messages(&done)
    );
}

#[tokio::test]
async fn other_finish_reasons_do_not_stop_the_run() {
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("add", r#"{"a":1,"b":2}"#)
            .finish_reason(FinishReason::Other("function_call".into())),
        Turn::new().text("3"),
    ]);
    let (_, done) = events(&Agent::new(model, toolbox()), "hi").await;
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 2));
}

type Deltas = futures_util::stream::Iter<std::vec::IntoIter<Result<ModelDelta, ToolError>>>;

/// A model that streams `deltas` for every request.
fn answering(
    deltas: Vec<ModelDelta>,
) -> impl tower::Service<
    ChatRequest,
    Response = Deltas,
    Error = ToolError,
    Future = std::future::Ready<Result<Deltas, ToolError>>,
> + Clone {
    tower::service_fn(move |_: ChatRequest| {
        let items: Vec<Result<ModelDelta, ToolError>> = deltas.iter().cloned().map(Ok).collect();
        std::future::ready(Ok(futures_util::stream::iter(items)))
    })
}

#[tokio::test]
async fn a_run_whose_model_reports_no_usage_has_none_and_reported_zeros_are_kept() {
    let text = ModelDelta::Text("hi".into());
    let silent = Agent::new(answering(vec![text.clone()]), Toolbox::new());
    let all: Vec<AgentEvent> = silent.run(vec![Message::user("hi")]).collect().await;
    let Some(AgentEvent::Done(done)) = all.last() else {
        panic!("no Done")
    };
    assert_eq!(done.usage, None, "no model call reported usage");

    let zero = Agent::new(
        answering(vec![text, ModelDelta::Usage(Usage::default())]),
        Toolbox::new(),
    );
    let all: Vec<AgentEvent> = zero.run(vec![Message::user("hi")]).collect().await;
    let Some(AgentEvent::Done(done)) = all.last() else {
        panic!("no Done")
    };
    assert_eq!(
        done.usage,
        Some(Usage::default()),
        "a report of zero tokens"
    );
}

#[tokio::test]
async fn more_parallel_calls_than_an_answer_may_hold_end_the_run_with_a_model_error() {
    let mut flood = Turn::new();
    for _ in 0..=MAX_TOOL_CALLS_PER_ANSWER {
        flood = flood.tool_call("add", r#"{"a":1,"b":1}"#);
    }
    let (events, done) = events(&Agent::new(ScriptedModel::new([flood]), toolbox()), "hi").await;
    assert_eq!(done.stop, StopReason::ModelError);
    let Some(AgentEvent::Error(err)) = events.last() else {
        panic!("no error: {:?}", events.last())
    };
    assert!(err.message().contains("at most 128 tool calls"), "{err}");
    assert!(!err.is_retryable());
    assert!(tool_messages(&done).is_empty(), "no call ran");
}

fn cut() -> ToolError {
    ToolError::new(ErrorKind::Unavailable, "connection reset")
}

#[tokio::test]
async fn a_turn_cut_off_mid_stream_is_discarded_and_asked_again_when_enabled() {
    let model = ScriptedModel::new([
        Turn::new()
            .text("Half an")
            .tool_call("add", r#"{"a":1"#)
            .fail(cut()),
        Turn::new().text("A whole answer."),
    ]);
    let agent = Agent::new(model.clone(), toolbox()).retry_model_turns(2);
    let (events, done) = events(&agent, "hi").await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            AgentEvent::TextDelta(_) => "text",
            AgentEvent::ToolCallStarted { .. } | AgentEvent::ToolCallInputDelta { .. } => "input",
            AgentEvent::TurnDiscarded { .. } => "discarded",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let mut dedup = kinds.clone();
    dedup.dedup();
    assert_eq!(dedup, ["text", "input", "discarded", "text"]);
    let Some(AgentEvent::TurnDiscarded { error }) = events
        .iter()
        .find(|e| matches!(e, AgentEvent::TurnDiscarded { .. }))
    else {
        unreachable!()
    };
    assert_eq!(error, &cut());
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 1));
    assert_eq!(model.turns_played(), 2);
    assert_eq!(
        &done.messages[1..],
        [Message::assistant("A whole answer.")],
        "the discarded answer is not in the conversation"
    );
}

#[tokio::test]
async fn turn_retry_is_off_by_default() {
    let model = ScriptedModel::new([
        Turn::new().text("Half an").fail(cut()),
        Turn::new().text("A whole answer."),
    ]);
    let (events, done) = events(&Agent::new(model.clone(), toolbox()), "hi").await;
    assert!(matches!(events.last(), Some(AgentEvent::Error(e)) if e == &cut()));
    assert!(!events
        .iter()
        .any(|e| matches!(e, AgentEvent::TurnDiscarded { .. })));
    assert_eq!(done.stop, StopReason::ModelError);
    assert_eq!(model.turns_played(), 1);
}

#[tokio::test]
async fn turn_retry_stops_at_its_budget_and_never_retries_a_non_retryable_error() {
    let again = || Turn::new().text("Half").fail(cut());
    let model = ScriptedModel::new([again(), again(), Turn::new().text("late")]);
    let agent = Agent::new(model.clone(), toolbox()).retry_model_turns(1);
    let (seen, done) = events(&agent, "hi").await;
    let discarded = seen
        .iter()
        .filter(|e| matches!(e, AgentEvent::TurnDiscarded { .. }))
        .count();
    assert_eq!((discarded, model.turns_played()), (1, 2));
    assert_eq!(done.stop, StopReason::ModelError);

    let broken = ToolError::failed("the model's answer was malformed");
    let model = ScriptedModel::new([
        Turn::new().text("Half").fail(broken.clone()),
        Turn::new().text("late"),
    ]);
    let agent = Agent::new(model.clone(), toolbox()).retry_model_turns(3);
    let (events, done) = events(&agent, "hi").await;
    assert!(matches!(events.last(), Some(AgentEvent::Error(e)) if e == &broken));
    assert_eq!(
        (done.stop, model.turns_played()),
        (StopReason::ModelError, 1)
    );
}

#[tokio::test]
async fn turn_retry_leaves_a_failure_before_the_first_delta_to_the_retry_layer() {
    let model = ScriptedModel::new([Turn::new().fail(cut()), Turn::new().text("late")]);
    let agent = Agent::new(model.clone(), toolbox()).retry_model_turns(3);
    let (events, done) = events(&agent, "hi").await;
    assert!(
        matches!(events.as_slice(), [AgentEvent::Error(_)]),
        "{events:?}"
    );
    assert_eq!(
        (done.stop, model.turns_played()),
        (StopReason::ModelError, 1)
    );
}

/// A tool that keeps its request's extensions past its call (a task it
/// spawned holds them): the run's event stream still ends.
#[tokio::test]
async fn a_request_kept_past_the_run_does_not_keep_its_events_open() {
    use std::sync::Mutex;
    use toolstack::ToolContext;
    let kept: Arc<Mutex<Vec<http::Extensions>>> = Arc::default();
    let keeper = kept.clone();
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoArgs {}
    let toolbox = Toolbox::new().tool(tool::from_fn_with_context(
        "keep",
        move |_: NoArgs, ctx: ToolContext| {
            keeper.lock().unwrap().push(ctx.extensions().clone());
            async { Ok::<_, ToolError>("kept") }
        },
    ));
    let model = ScriptedModel::new([Turn::new().tool_call("keep", "{}"), Turn::new().text("ok")]);
    let events = Agent::new(model, toolbox).run(vec![Message::user("go")]);
    let events: Vec<AgentEvent> =
        tokio::time::timeout(std::time::Duration::from_secs(10), events.collect())
            .await
            .expect("the stream ends");
    assert!(matches!(events.last(), Some(AgentEvent::Done(_))));
    assert_eq!(kept.lock().unwrap().len(), 1);
}
