//! The stream-aware layers on model calls: a model stacked with trace,
//! timeout, retry, rate limit, concurrency limit and catch-panic, driven by
//! the agent loop. Time is tokio's paused clock.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::support;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::Instant;
use toolstack::agent::{Agent, AgentDone, AgentEvent, StopReason};
use toolstack::model::{
    ChatRequest, FinishReason, Message, ModelDelta, ScriptedModel, ToolCallDelta, Turn,
};
use toolstack::{tool, ErrorKind, TimeoutPhase, ToolError, Toolbox};
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Service, ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------
// A model that plays planned attempts on tokio's clock.

/// One step of a planned answer; delays are in milliseconds.
#[derive(Clone, Debug)]
enum Step {
    /// Wait, then yield a delta.
    Delta(u64, ModelDelta),
    /// Wait, then yield an error (the last item).
    Fail(u64, ToolError),
    /// Wait, then panic.
    Panic(u64),
    /// Wait forever.
    Hang,
}

/// What one call of the model does.
#[derive(Clone, Debug)]
enum Attempt {
    /// The call fails to open.
    Refuse(ToolError),
    /// The call opens and streams these steps.
    Answer(Vec<Step>),
}

/// Counts the answer streams dropped (finished or not).
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A model service whose call number `n` plays `attempts[n]` (the last one
/// repeats), counting calls and dropped answer streams.
#[derive(Clone)]
struct PlannedModel {
    attempts: Arc<Vec<Attempt>>,
    calls: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl PlannedModel {
    fn new(attempts: Vec<Attempt>) -> Self {
        PlannedModel {
            attempts: Arc::new(attempts),
            calls: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
}

type DeltaStream = BoxStream<'static, Result<ModelDelta, ToolError>>;

impl Service<ChatRequest> for PlannedModel {
    type Response = DeltaStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<DeltaStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: ChatRequest) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let attempt = self.attempts[n.min(self.attempts.len() - 1)].clone();
        let guard = Dropped(self.dropped.clone());
        Box::pin(async move {
            let steps = match attempt {
                Attempt::Refuse(err) => return Err(err),
                Attempt::Answer(steps) => steps,
            };
            let deltas = stream::unfold(
                (steps.into_iter(), guard),
                |(mut steps, guard)| async move {
                    let item = match steps.next()? {
                        Step::Delta(ms, delta) => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            Ok(delta)
                        }
                        Step::Fail(ms, err) => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            Err(err)
                        }
                        Step::Panic(ms) => {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            panic!("the weights fell over");
                        }
                        Step::Hang => std::future::pending().await,
                    };
                    Some((item, (steps, guard)))
                },
            );
            Ok(deltas.boxed())
        })
    }
}

fn text(ms: u64, text: &str) -> Step {
    Step::Delta(ms, ModelDelta::Text(text.to_owned()))
}

fn stop() -> Step {
    Step::Delta(0, ModelDelta::Finish(FinishReason::Stop))
}

fn unavailable() -> ToolError {
    ToolError::new(ErrorKind::Unavailable, "the model endpoint is down")
}

// ---------------------------------------------------------------------------
// The agent around it.

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn toolbox() -> Toolbox {
    Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }))
}

/// Three model calls: two rounds of `add`, then an answer.
fn three_steps() -> ScriptedModel {
    let add = || Turn::new().tool_call("add", r#"{"a":1,"b":2}"#);
    ScriptedModel::new([add(), add(), Turn::new().text("It is 3.")])
}

async fn run<M, St>(agent: &Agent<M>) -> (Vec<AgentEvent>, AgentDone)
where
    M: Service<ChatRequest, Response = St> + Clone + Send + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: futures_util::Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    let mut events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    match events.pop() {
        Some(AgentEvent::Done(done)) => (events, done),
        other => panic!("the run did not end with Done: {other:?}"),
    }
}

/// The text deltas and errors of a run, in order (`ERR(kind)` for errors).
fn texts_and_errors(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(text) => Some(text.clone()),
            AgentEvent::Error(err) => Some(format!("ERR({})", err.kind())),
            _ => None,
        })
        .collect()
}

fn the_error(events: &[AgentEvent]) -> &ToolError {
    let errors: Vec<&ToolError> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Error(err) => Some(err),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    errors[0]
}

// ---------------------------------------------------------------------------
// Timeout

#[tokio::test(start_paused = true)]
async fn idle_timeout_between_deltas_ends_the_run_with_the_timeout_error() {
    let model = PlannedModel::new(vec![Attempt::Answer(vec![
        text(0, "Hel"),
        text(100, "lo"),
        Step::Hang,
    ])]);
    let layered = ServiceBuilder::new()
        .stream_timeout(
            TimeoutLayer::new()
                .first_item(Duration::from_secs(30))
                .idle(Duration::from_secs(1)),
        )
        .service(model.clone());
    let agent = Agent::new(layered, toolbox());

    let start = Instant::now();
    let (events, done) = run(&agent).await;
    assert_eq!(start.elapsed(), Duration::from_millis(1100));
    assert_eq!(texts_and_errors(&events), ["Hel", "lo", "ERR(timeout)"]);
    let err = the_error(&events);
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Idle
        }
    );
    assert_eq!(err.message(), "the model produced no further output for 1s");
    assert_eq!((done.stop, done.steps), (StopReason::ModelError, 1));
    assert_eq!(model.dropped(), 1, "the stalled answer was cancelled");
}

#[tokio::test(start_paused = true)]
async fn first_item_timeout_bounds_a_model_that_never_starts_answering() {
    let model = PlannedModel::new(vec![Attempt::Answer(vec![Step::Hang])]);
    let layered = ServiceBuilder::new()
        .stream_timeout(TimeoutLayer::new().first_item(Duration::from_secs(30)))
        .service(model);
    let start = Instant::now();
    let (events, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(
        the_error(&events).kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::FirstItem
        }
    );
    assert_eq!(done.stop, StopReason::ModelError);
}

// ---------------------------------------------------------------------------
// Retry

fn quick_retries() -> RetryPolicy {
    RetryPolicy::new()
        .jitter(false)
        .backoff(Duration::from_millis(100), Duration::from_secs(10))
}

#[tokio::test(start_paused = true)]
async fn retry_before_the_first_delta_gives_the_agent_the_full_answer_once() {
    let model = PlannedModel::new(vec![
        // Refused while opening, then failing before its first delta: both
        // retried, as a model call is idempotent.
        Attempt::Refuse(unavailable()),
        Attempt::Answer(vec![Step::Fail(5, unavailable())]),
        Attempt::Answer(vec![text(0, "Hello"), text(0, " world"), stop()]),
    ]);
    let layered = ServiceBuilder::new()
        .stream_retry(quick_retries())
        .service(model.clone());
    let agent = Agent::new(layered, toolbox());

    let start = Instant::now();
    let (events, done) = run(&agent).await;
    assert_eq!(texts_and_errors(&events), ["Hello", " world"]);
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 1));
    assert_eq!(model.calls(), 3);
    // Backoff 100 ms, then 200 ms; the second attempt failed after 5 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(305));
    assert_eq!(
        done.messages.last(),
        Some(&Message::assistant("Hello world"))
    );
}

#[tokio::test(start_paused = true)]
async fn retry_never_repeats_a_model_call_after_a_delta() {
    let model = PlannedModel::new(vec![
        Attempt::Answer(vec![text(0, "Hel"), Step::Fail(10, unavailable())]),
        Attempt::Answer(vec![text(0, "Hello"), stop()]),
    ]);
    let layered = ServiceBuilder::new()
        .stream_retry(quick_retries())
        .service(model.clone());
    let (events, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!(texts_and_errors(&events), ["Hel", "ERR(unavailable)"]);
    assert_eq!(done.stop, StopReason::ModelError);
    assert_eq!(model.calls(), 1, "no second attempt after a delta");
}

#[tokio::test(start_paused = true)]
async fn retry_leaves_a_model_error_that_is_not_retryable_alone() {
    let model = PlannedModel::new(vec![
        Attempt::Refuse(ToolError::new(ErrorKind::Denied, "bad key")),
        Attempt::Answer(vec![text(0, "Hello"), stop()]),
    ]);
    let layered = ServiceBuilder::new()
        .stream_retry(quick_retries())
        .service(model.clone());
    let (events, _) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!(the_error(&events).kind(), ErrorKind::Denied);
    assert_eq!(model.calls(), 1);
}

// ---------------------------------------------------------------------------
// Rate limit

fn one_per_second() -> Quota {
    Quota::per_second(NonZeroU32::MIN)
}

#[tokio::test(start_paused = true)]
async fn rate_limit_wait_spaces_the_model_calls_of_a_run_by_the_quota_period() {
    let model = three_steps();
    let layered = ServiceBuilder::new()
        .stream_rate_limit(RateLimitLayer::global(one_per_second()).wait())
        .service(model.clone());
    let start = Instant::now();
    let (_, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 3));
    assert_eq!(model.turns_played(), 3);
    // The second and the third call each waited one period.
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn rate_limit_reject_ends_the_run_at_the_first_call_over_the_quota() {
    let model = three_steps();
    let layered = ServiceBuilder::new()
        .stream_rate_limit(RateLimitLayer::global(one_per_second()).reject())
        .service(model.clone());
    let start = Instant::now();
    let (events, done) = run(&Agent::new(layered, toolbox())).await;
    let err = the_error(&events);
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    assert_eq!(
        err.message(),
        "rate limit for all model calls reached; retry after 1000 ms"
    );
    assert_eq!((done.stop, done.steps), (StopReason::ModelError, 2));
    assert_eq!(
        model.turns_played(),
        1,
        "the refused call never reached the model"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn retry_above_a_rejecting_rate_limit_waits_out_the_retry_after() {
    let model = three_steps();
    let layered = ServiceBuilder::new()
        .stream_retry(quick_retries())
        .stream_rate_limit(RateLimitLayer::global(one_per_second()).reject())
        .service(model.clone());
    let start = Instant::now();
    let (_, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 3));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Caller(&'static str);

#[tokio::test(start_paused = true)]
async fn rate_limit_per_caller_reads_the_chat_request_extensions() {
    let mut model = ServiceBuilder::new()
        .stream_rate_limit(RateLimitLayer::per_caller::<Caller>(one_per_second()).reject())
        .service(ScriptedModel::new([Turn::new().text("ok")]));
    let ask = |who| ChatRequest::new(vec![Message::user("hi")]).with_extension(Caller(who));
    assert!(model
        .ready()
        .await
        .unwrap()
        .call(ask("alice"))
        .await
        .is_ok());
    let err = model
        .ready()
        .await
        .unwrap()
        .call(ask("alice"))
        .await
        .expect_err("alice is over her quota");
    assert!(
        err.message().starts_with("rate limit for this caller"),
        "{err}"
    );
    // Bob has his own bucket; the refusal took nothing, so the scripted
    // model (out of turns) answers bob with its own error.
    let err = model.ready().await.unwrap().call(ask("bob")).await.err();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Unavailable));
}

// ---------------------------------------------------------------------------
// Concurrency limit

#[tokio::test(start_paused = true)]
async fn concurrency_permit_is_held_while_the_delta_stream_is_alive() {
    let model = PlannedModel::new(vec![Attempt::Answer(vec![
        text(0, "a"),
        text(1000, "b"),
        stop(),
    ])]);
    let mut layered = ServiceBuilder::new()
        .stream_concurrency_limit(1)
        .service(model);
    let request = || ChatRequest::new(vec![Message::user("hi")]);
    let stream = layered
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    assert!(matches!(stream.next().await, Some(Ok(ModelDelta::Text(_)))));
    assert!(stream.holds_permit());

    let mut other = layered.clone();
    let waited = tokio::time::timeout(Duration::from_millis(500), other.ready()).await;
    assert!(waited.is_err(), "the open stream keeps the only permit");

    // The next delta's 1 s wait starts with the next poll; the permit
    // goes to the waiting clone when the stream ends, not before.
    let start = Instant::now();
    while stream.next().await.is_some() {}
    assert!(!stream.holds_permit());
    other.ready().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn two_runs_sharing_a_limit_of_one_stream_their_model_answers_in_turn() {
    let model = PlannedModel::new(vec![Attempt::Answer(vec![
        text(0, "thinking"),
        text(1000, " done"),
        stop(),
    ])]);
    let layered = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(1))
        .service(model);
    let agent = Agent::new(layered, toolbox());
    let start = Instant::now();
    let ((_, first), (_, second)) = tokio::join!(run(&agent), run(&agent));
    assert_eq!(first.stop, StopReason::Finished);
    assert_eq!(second.stop, StopReason::Finished);
    // Each answer streams for 1 s, and the second waits for the first.
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

// ---------------------------------------------------------------------------
// Catch panic

#[tokio::test(start_paused = true)]
async fn a_model_that_panics_mid_stream_ends_the_run_with_a_panicked_error() {
    let model = PlannedModel::new(vec![Attempt::Answer(vec![text(0, "Hi"), Step::Panic(5)])]);
    let layered = ServiceBuilder::new().stream_catch_panic().service(model);
    let (events, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!(texts_and_errors(&events), ["Hi", "ERR(panicked)"]);
    assert_eq!(
        the_error(&events).message(),
        "the model panicked: the weights fell over"
    );
    assert_eq!(done.stop, StopReason::ModelError);
}

// ---------------------------------------------------------------------------
// Trace

use support::capture::Capture;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_gives_each_model_call_a_chat_span_with_the_gen_ai_attributes() {
    let capture = Capture::default();
    let _guard = capture.install();
    let model = ScriptedModel::new([
        Turn::new().tool_call("add", r#"{"a":2,"b":40}"#),
        Turn::new().text("It is 42."),
    ]);
    let layered = ServiceBuilder::new()
        .layer(TraceLayer::new().record_arguments(24).record_output(100))
        .service(model);
    let agent = Agent::new(layered, toolbox()).model_name("scripted-1");
    let (_, done) = run(&agent).await;
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 2));

    let spans: Vec<_> = capture
        .spans()
        .into_iter()
        .filter(|s| s.name == "chat")
        .collect();
    assert_eq!(spans.len(), 2, "one span per model call: {spans:?}");
    for span in &spans {
        let field = |name: &str| span.fields.get(name).map(String::as_str);
        assert_eq!(field("otel.name"), Some("chat scripted-1"));
        assert_eq!(field("gen_ai.operation.name"), Some("chat"));
        assert_eq!(field("gen_ai.request.model"), Some("scripted-1"));
        assert_eq!(field("error.type"), None);
        assert_eq!(
            field("gen_ai.input.messages"),
            Some(r#"[{"role":"user","content…"#),
            "the conversation, cut to 24 bytes"
        );
    }
    assert_eq!(
        spans[1]
            .fields
            .get("gen_ai.output.messages")
            .map(String::as_str),
        Some("It is 42."),
        "the answer's text"
    );

    let ended = capture.events_with_parent("model call ended");
    assert_eq!(ended.len(), 2);
    assert!(ended.iter().all(|(parent, fields)| {
        *parent == Some("chat") && fields.get("outcome").map(String::as_str) == Some("completed")
    }));
    assert!(capture.events_with_parent("tool call ended").is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_names_a_chat_span_without_a_model_and_records_the_failure() {
    let capture = Capture::default();
    let _guard = capture.install();
    let model = PlannedModel::new(vec![Attempt::Answer(vec![
        text(0, "Hel"),
        Step::Fail(0, unavailable()),
    ])]);
    let layered = ServiceBuilder::new().stream_trace().service(model);
    let (_, done) = run(&Agent::new(layered, toolbox())).await;
    assert_eq!(done.stop, StopReason::ModelError);

    let spans: Vec<_> = capture
        .spans()
        .into_iter()
        .filter(|s| s.name == "chat")
        .collect();
    assert_eq!(spans.len(), 1);
    let field = |name: &str| spans[0].fields.get(name).map(String::as_str);
    assert_eq!(field("otel.name"), Some("chat"));
    assert_eq!(field("gen_ai.operation.name"), Some("chat"));
    assert_eq!(field("gen_ai.request.model"), None);
    assert_eq!(field("error.type"), Some("unavailable"));
    assert_eq!(field("otel.status_code"), Some("ERROR"));
    let failed = capture.events_with_parent("model call failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, Some("chat"));
    let ended = capture.events_with_parent("model call ended");
    assert_eq!(
        ended[0].1.get("items").map(String::as_str),
        Some("1"),
        "one delta before the error"
    );
}

// ---------------------------------------------------------------------------
// All of it at once, in the order the README shows.

#[tokio::test(start_paused = true)]
async fn the_full_stack_over_a_model_drives_an_agent_run() {
    let model = PlannedModel::new(vec![
        Attempt::Refuse(unavailable()),
        Attempt::Answer(vec![
            Step::Delta(
                10,
                ModelDelta::ToolCall(
                    ToolCallDelta::new(0)
                        .id("call_1")
                        .name("add")
                        .arguments(r#"{"a":1,"b":2}"#),
                ),
            ),
            Step::Delta(0, ModelDelta::Finish(FinishReason::ToolCalls)),
        ]),
        Attempt::Answer(vec![text(10, "It is"), text(10, " 3."), stop()]),
    ]);
    let layered = ServiceBuilder::new()
        .stream_trace()
        .stream_catch_panic()
        .stream_retry(quick_retries())
        .stream_timeout(
            TimeoutLayer::new()
                .first_item(Duration::from_secs(30))
                .idle(Duration::from_secs(10)),
        )
        .stream_rate_limit(RateLimitLayer::global(Quota::per_second(
            NonZeroU32::new(10).unwrap(),
        )))
        .stream_concurrency_limit(4)
        .service(model.clone());
    let agent = Agent::new(layered, toolbox());
    let (events, done) = run(&agent).await;
    assert_eq!(texts_and_errors(&events), ["It is", " 3."]);
    assert_eq!((done.stop, done.steps), (StopReason::Finished, 2));
    assert_eq!(model.calls(), 3, "the refused call was retried");
}
