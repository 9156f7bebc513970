//! The retry layer: retries before the first item only, never duplicates.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use support::{texts, CountClones, Scripted, Step};
use tokio::time::Instant;
use toolstack::model::{ChatRequest, Message, ModelDelta};
use toolstack::{
    BoxTool, Describe, ErrorKind, TimeoutPhase, ToolAnnotations, ToolError, ToolRequest,
};
use toolstack_layers::retry::{Retry, RetryLayer, RetryPolicy, TpsBudget};
use toolstack_layers::timeout::TimeoutLayer;
use tower::{Layer, Service, ServiceExt};

fn request() -> ToolRequest {
    ToolRequest::new("scripted", "{}")
}

fn slow() -> ToolError {
    ToolError::timeout(TimeoutPhase::FirstItem, "slow")
}

fn policy() -> RetryPolicy {
    RetryPolicy::new()
        .jitter(false)
        .backoff(Duration::from_millis(100), Duration::from_secs(10))
}

async fn run<S>(svc: &mut S) -> Vec<String>
where
    S: Service<ToolRequest, Error = ToolError>,
    S::Response: futures_util::Stream<Item = toolstack::ToolItem>,
{
    match svc.ready().await.unwrap().call(request()).await {
        Ok(stream) => texts(stream).await,
        Err(err) => vec![format!("OPEN ERR({})", err.kind())],
    }
}

#[tokio::test(start_paused = true)]
async fn retry_leaves_a_successful_call_untouched() {
    let tool = Scripted::new(vec![vec![Step::Text(1, "a"), Step::Text(1, "b")]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    assert_eq!(run(&mut svc).await, ["a", "b"]);
    assert_eq!(tool.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_retries_an_error_before_the_first_item() {
    let tool = Scripted::new(vec![
        vec![Step::Fail(1, slow())],
        vec![Step::Fail(1, slow())],
        vec![Step::Text(1, "ok")],
    ]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    let start = Instant::now();
    assert_eq!(run(&mut svc).await, ["ok"]);
    assert_eq!(tool.calls(), 3);
    // Exponential backoff without jitter: 100 ms, then 200 ms, plus 1 ms per attempt.
    assert_eq!(start.elapsed(), Duration::from_millis(303));
}

#[tokio::test(start_paused = true)]
async fn retry_never_duplicates_emitted_items() {
    let tool = Scripted::new(vec![
        vec![Step::Text(1, "first"), Step::Fail(1, slow())],
        vec![Step::Text(1, "first"), Step::Text(1, "second")],
    ]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    assert_eq!(run(&mut svc).await, ["first", "ERR(timeout)"]);
    assert_eq!(
        tool.calls(),
        1,
        "an error after an item is passed through, not retried"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_stops_after_max_attempts_with_the_last_error() {
    let tool = Scripted::new(vec![vec![Step::Fail(1, slow())]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy().max_attempts(4), true);
    assert_eq!(run(&mut svc).await, ["ERR(timeout)"]);
    assert_eq!(tool.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn retry_does_not_retry_errors_that_are_not_retryable() {
    let tool = Scripted::new(vec![vec![Step::Fail(
        1,
        ToolError::invalid_arguments("bad"),
    )]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    assert_eq!(run(&mut svc).await, ["ERR(invalid_arguments)"]);
    assert_eq!(tool.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_if_replaces_the_retryable_check() {
    let tool = Scripted::new(vec![
        vec![Step::Fail(1, ToolError::failed("flaky"))],
        vec![Step::Text(1, "ok")],
    ]);
    let policy = policy().retry_if(|err| err.kind() == ErrorKind::Failed);
    let mut svc = Retry::with_idempotency(tool.clone(), policy, true);
    assert_eq!(run(&mut svc).await, ["ok"]);
    assert_eq!(tool.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_skips_non_idempotent_tools_once_the_call_reached_them() {
    let tool = Scripted::new(vec![vec![Step::Fail(1, slow())], vec![Step::Text(1, "ok")]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), false);
    assert_eq!(run(&mut svc).await, ["ERR(timeout)"]);
    assert_eq!(tool.calls(), 1);

    let tool = Scripted::new(vec![vec![Step::Fail(1, slow())], vec![Step::Text(1, "ok")]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy().retry_non_idempotent(true), false);
    assert_eq!(run(&mut svc).await, ["ok"], "unless the policy allows it");
}

/// What the `tracing` events of the current thread write, while the guard
/// lives.
fn captured_logs() -> (
    Arc<std::sync::Mutex<Vec<u8>>>,
    tracing::subscriber::DefaultGuard,
) {
    #[derive(Clone)]
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Sink(Arc::clone(&logs));
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    (logs, support::logs::set_default(subscriber))
}

#[tokio::test(start_paused = true)]
async fn retry_says_why_it_does_not_retry_a_tool_not_marked_idempotent() {
    let (logs, _guard) = captured_logs();
    let tool = Scripted::new(vec![vec![Step::Fail(1, slow())], vec![Step::Text(1, "ok")]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), false);
    assert_eq!(run(&mut svc).await, ["ERR(timeout)"]);
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains(" INFO ")
            && logs.contains(
                "not retrying: the call may have run, and the tool is not marked idempotent"
            )
            && logs.contains("retry_non_idempotent(true)"),
        "{logs}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_retries_non_idempotent_tools_when_the_call_was_refused() {
    let refused = ToolError::new(ErrorKind::Overloaded, "busy");
    let tool = Scripted::new(vec![
        vec![Step::Fail(0, refused)],
        vec![Step::Text(1, "ok")],
    ]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), false);
    assert_eq!(run(&mut svc).await, ["ok"]);
    assert_eq!(tool.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_honours_retry_after() {
    let limited = ToolError::rate_limited(Some(Duration::from_secs(3)));
    let tool = Scripted::new(vec![
        vec![Step::Fail(0, limited)],
        vec![Step::Text(0, "ok")],
    ]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), false);
    let start = Instant::now();
    assert_eq!(run(&mut svc).await, ["ok"]);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn retry_jitter_keeps_delays_between_half_and_full_backoff() {
    for _ in 0..20 {
        let tool = Scripted::new(vec![vec![Step::Fail(0, slow())], vec![Step::Text(0, "ok")]]);
        let jittered =
            RetryPolicy::new().backoff(Duration::from_millis(100), Duration::from_secs(1));
        let mut svc = Retry::with_idempotency(tool, jittered, true);
        let start = Instant::now();
        assert_eq!(run(&mut svc).await, ["ok"]);
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(50) && waited <= Duration::from_millis(100),
            "{waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_budget_limits_retries_across_calls() {
    // No reserve and 0% of deposits: no retry is ever allowed.
    let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 0, 0.0));
    let tool = Scripted::new(vec![vec![Step::Fail(0, slow())], vec![Step::Text(0, "ok")]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy().budget(budget), true);
    assert_eq!(run(&mut svc).await, ["ERR(timeout)"]);
    assert_eq!(tool.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_retries_failures_to_open() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let svc = tower::service_fn(move |_: ToolRequest| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            if n < 2 {
                Err(ToolError::new(ErrorKind::Unavailable, "down"))
            } else {
                Ok(toolstack::ToolStream::new(futures_util::stream::iter([
                    Ok(toolstack::ToolOutput::text("up")),
                ])))
            }
        }
    });
    let mut svc = Retry::with_idempotency(svc, policy(), true);
    assert_eq!(run(&mut svc).await, ["up"]);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn retry_drives_readiness_of_the_clone_before_each_retry() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, toolstack::ToolStream>();
    let mut svc = Retry::with_idempotency(mock, policy(), true);
    handle.allow(1);
    let fut = svc.ready().await.unwrap().call(request());
    let task = tokio::spawn(fut);
    let (_, send) = handle.next_request().await.unwrap();
    send.send_error(slow());
    // The retry waits for readiness: nothing is called until it is allowed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!task.is_finished());
    handle.allow(1);
    let (req, send) = handle.next_request().await.unwrap();
    assert_eq!(req.name(), "scripted");
    send.send_response(toolstack::ToolStream::new(futures_util::stream::iter([
        Ok(toolstack::ToolOutput::text("second")),
    ])));
    let stream = task.await.unwrap().unwrap();
    assert_eq!(texts(stream).await, ["second"]);
}

#[tokio::test(start_paused = true)]
async fn retry_dropping_the_stream_cancels_the_attempt() {
    let tool = Scripted::new(vec![vec![Step::Hang]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    let mut stream = Box::pin(stream);
    assert!(tokio::time::timeout(Duration::from_secs(1), stream.next())
        .await
        .is_err());
    drop(stream);
    assert!(tool.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn retry_layer_reads_idempotency_from_the_tool_annotations() {
    #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
    #[schemars(crate = "toolstack::schemars")]
    struct Args {}
    let make = |read_only: bool| {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = calls.clone();
        let t = toolstack::tool::from_fn("t", move |_: Args| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Err::<String, _>(slow()) }
        });
        let t = if read_only {
            t.with_annotations(ToolAnnotations::new().read_only())
        } else {
            t
        };
        // Through a BoxTool, as a toolbox calls it: the request carries the
        // tool's annotations, which the retry reads.
        let info = t.info().clone();
        (
            BoxTool::with_info(info, RetryLayer::new(policy()).layer(t)),
            calls,
        )
    };
    let (mut idempotent, calls) = make(true);
    run(&mut idempotent).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    let (mut unsafe_to_repeat, calls) = make(false);
    run(&mut unsafe_to_repeat).await;
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_clones_the_inner_service_only_when_it_retries() {
    let tool = Scripted::new(vec![
        vec![Step::Text(1, "first")],
        vec![Step::Fail(1, slow())],
        vec![Step::Text(1, "second")],
    ]);
    let clones = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = CountClones {
        inner: tool.clone(),
        clones: clones.clone(),
    };
    let mut svc = Retry::with_idempotency(counted, policy(), true);
    let made = clones.load(std::sync::atomic::Ordering::SeqCst);

    // A call that succeeds at once: no clone of the service below.
    assert_eq!(run(&mut svc).await, ["first"]);
    assert_eq!(clones.load(std::sync::atomic::Ordering::SeqCst), made);

    // A call that is retried: one clone, for the retry.
    assert_eq!(run(&mut svc).await, ["second"]);
    assert_eq!(clones.load(std::sync::atomic::Ordering::SeqCst), made + 1);
    assert_eq!(tool.calls(), 3);
}

fn blinked() -> ToolError {
    ToolError::new(ErrorKind::Unavailable, "the backend blinked")
}

/// The first error of a stream, or of its opening.
async fn first_error<S>(svc: &mut S) -> ToolError
where
    S: Service<ToolRequest, Error = ToolError>,
    S::Response: futures_util::Stream<Item = toolstack::ToolItem>,
{
    let stream = match svc.ready().await.unwrap().call(request()).await {
        Ok(stream) => stream,
        Err(err) => return err,
    };
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        if let Err(err) = item {
            return err;
        }
    }
    panic!("the call did not fail");
}

#[tokio::test(start_paused = true)]
async fn retry_not_made_because_its_backoff_would_pass_the_deadline_says_so() {
    let tool = Scripted::new(vec![
        vec![Step::Fail(397, blinked())],
        vec![Step::Text(0, "ok")],
    ]);
    let retry = Retry::with_idempotency(
        tool.clone(),
        policy().backoff(Duration::from_millis(4), Duration::from_millis(4)),
        true,
    );
    let mut svc = TimeoutLayer::new()
        .deadline(Duration::from_millis(400))
        .layer(retry);
    let err = first_error(&mut svc).await;
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(
        err.message(),
        "the backend blinked; not tried again: its backoff of 4ms would pass the deadline of 400ms"
    );
    assert_eq!(tool.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_says_why_a_retry_after_too_long_or_a_spent_budget_stopped_it() {
    let limited = ToolError::rate_limited(Some(Duration::from_secs(120)));
    let tool = Scripted::new(vec![vec![Step::Fail(0, limited)]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    let err = first_error(&mut svc).await;
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(120))
        }
    );
    assert_eq!(
        err.message(),
        "rate limited; retry after 120000 ms; not tried again: its retry-after of 120s is longer than the 10s the retry policy waits"
    );
    assert_eq!(tool.calls(), 1);

    let budget = Arc::new(TpsBudget::new(Duration::from_secs(10), 0, 0.0));
    let tool = Scripted::new(vec![vec![Step::Fail(0, blinked())]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy().budget(budget), true);
    assert_eq!(
        first_error(&mut svc).await.message(),
        "the backend blinked; not tried again: the retry budget is spent"
    );
    assert_eq!(tool.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_that_made_every_attempt_it_was_allowed_leaves_the_last_error_as_it_is() {
    let tool = Scripted::new(vec![vec![Step::Fail(1, blinked())]]);
    let mut svc = Retry::with_idempotency(tool.clone(), policy(), true);
    assert_eq!(first_error(&mut svc).await, blinked());
    assert_eq!(tool.calls(), 3);
}

// ---------------------------------------------------------------------------
// A model endpoint's refusals.

type Deltas = futures_util::stream::Iter<std::vec::IntoIter<Result<ModelDelta, ToolError>>>;

/// A model whose call number `n` is refused with `refusals[n]` (the last
/// one repeats), as the OpenAI client types an endpoint's statuses.
fn refusing_model(
    refusals: Vec<ToolError>,
    calls: &Arc<std::sync::atomic::AtomicUsize>,
) -> impl Service<ChatRequest, Response = Deltas, Error = ToolError, Future: Send> + Clone {
    let calls = calls.clone();
    let refusals = Arc::new(refusals);
    tower::service_fn(move |_: ChatRequest| {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let refusal = refusals[n.min(refusals.len() - 1)].clone();
        async move { Err::<Deltas, _>(refusal) }
    })
}

fn answered_503() -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        "the model endpoint answered 503 (server_error): Service unavailable.",
    )
}

fn answered_429(after: Duration) -> ToolError {
    ToolError::new(
        ErrorKind::RateLimited {
            retry_after: Some(after),
        },
        "the model endpoint answered 429 (rate_limit_error): Rate limit exceeded.",
    )
    .with_retry_after(after)
}

#[tokio::test(start_paused = true)]
async fn a_model_call_whose_last_refusal_is_the_endpoints_429_ends_rate_limited_saying_both() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let after = Duration::from_millis(700);
    let model = refusing_model(
        vec![
            answered_503(),
            answered_429(after),
            answered_503(),
            answered_429(after),
        ],
        &calls,
    );
    let mut svc = Retry::new(model, policy().max_attempts(4));
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let err = match svc.ready().await.unwrap().call(request).await {
        Ok(_) => panic!("every attempt was refused"),
        Err(err) => err,
    };
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
    // The endpoint's last word is the call's kind, its wait kept.
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(after)
        }
    );
    assert_eq!(err.retry_after(), Some(after));
    assert_eq!(
        err.message(),
        "the model endpoint answered 503 (server_error): Service unavailable.; it was tried again, and that attempt was refused: the model endpoint answered 429 (rate_limit_error): Rate limit exceeded."
    );
}
