//! The timeout layer: three independent bounds, one terminal error, the
//! inner stream dropped on expiry.

use crate::support;

use std::time::Duration;

use futures_util::StreamExt;
use support::{texts, Scripted, Step};
use tokio::time::Instant;
use toolstack::{ErrorKind, TimeoutPhase, ToolRequest};
use toolstack_layers::timeout::{Timeout, TimeoutLayer};
use tower::{Service, ServiceExt};

fn request() -> ToolRequest {
    ToolRequest::new("scripted", "{}")
}

fn timeout_kind(phase: TimeoutPhase) -> ErrorKind {
    ErrorKind::Timeout { phase }
}

#[tokio::test(start_paused = true)]
async fn timeout_leaves_a_tool_that_finishes_in_time_untouched() {
    let tool = Scripted::new(vec![vec![
        Step::Text(10, "a"),
        Step::Text(10, "b"),
        Step::Text(10, "c"),
    ]]);
    let limits = TimeoutLayer::new()
        .deadline(Duration::from_secs(1))
        .first_item(Duration::from_millis(50))
        .idle(Duration::from_millis(50));
    let mut svc = Timeout::new(tool.clone(), limits);
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["a", "b", "c"]);
    assert!(tool.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn timeout_idle_fires_between_items() {
    let tool = Scripted::new(vec![vec![
        Step::Text(10, "a"),
        Step::Text(10, "b"),
        Step::Text(500, "late"),
    ]]);
    let mut svc = Timeout::new(
        tool.clone(),
        TimeoutLayer::new().idle(Duration::from_millis(100)),
    );
    let start = Instant::now();
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.next().await.unwrap().is_ok());
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind(), timeout_kind(TimeoutPhase::Idle));
    assert!(err.message().contains("100ms"), "{}", err.message());
    // Fired 100 ms after the second item, not when the late item arrives.
    assert_eq!(start.elapsed(), Duration::from_millis(120));
    assert!(tool.was_dropped(), "the inner stream is dropped at expiry");
    assert!(stream.next().await.is_none(), "exactly one terminal error");
}

#[tokio::test(start_paused = true)]
async fn timeout_idle_does_not_bound_the_first_item() {
    let tool = Scripted::new(vec![vec![
        Step::Text(500, "slow start"),
        Step::Text(10, "b"),
    ]]);
    let mut svc = Timeout::new(tool, TimeoutLayer::new().idle(Duration::from_millis(100)));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["slow start", "b"]);
}

#[tokio::test(start_paused = true)]
async fn timeout_first_item_fires_before_any_output() {
    let tool = Scripted::new(vec![vec![Step::Text(500, "late"), Step::Text(1, "never")]]);
    let mut svc = Timeout::new(
        tool.clone(),
        TimeoutLayer::new().first_item(Duration::from_millis(200)),
    );
    let start = Instant::now();
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["ERR(timeout)"]);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert!(tool.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn timeout_first_item_counts_the_opening() {
    let tool = Scripted::new(vec![vec![Step::Text(0, "a")]]).open_after(300);
    let mut svc = Timeout::new(
        tool,
        TimeoutLayer::new().first_item(Duration::from_millis(200)),
    );
    let start = Instant::now();
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), timeout_kind(TimeoutPhase::FirstItem));
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn timeout_first_item_bound_is_cleared_by_the_first_item() {
    let tool = Scripted::new(vec![vec![Step::Text(10, "a"), Step::Text(400, "b")]]);
    let mut svc = Timeout::new(
        tool,
        TimeoutLayer::new().first_item(Duration::from_millis(100)),
    );
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn timeout_deadline_bounds_the_whole_stream() {
    // Every gap is short, but the whole call is too long.
    let steps = (0..10).map(|_| Step::Text(40, "x")).collect();
    let tool = Scripted::new(vec![steps]);
    let limits = TimeoutLayer::new()
        .deadline(Duration::from_millis(150))
        .idle(Duration::from_millis(100));
    let mut svc = Timeout::new(tool.clone(), limits);
    let start = Instant::now();
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    let items = texts(stream).await;
    assert_eq!(items, ["x", "x", "x", "ERR(timeout)"]);
    assert_eq!(start.elapsed(), Duration::from_millis(150));
    assert!(tool.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn timeout_deadline_names_its_phase_when_it_expires_while_opening() {
    let tool = Scripted::new(vec![vec![Step::Text(0, "a")]]).open_after(1_000);
    let limits = TimeoutLayer::new()
        .deadline(Duration::from_millis(100))
        .first_item(Duration::from_millis(500));
    let mut svc = Timeout::new(tool, limits);
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), timeout_kind(TimeoutPhase::Deadline));
    assert!(err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn timeout_deadline_stops_a_stream_that_never_pauses() {
    let endless = tower::service_fn(|_: ToolRequest| async {
        // Always ready, so the layer never gets a chance to poll a timer.
        let items = futures_util::stream::repeat_with(|| Ok(toolstack::ToolOutput::text("x")));
        Ok::<_, toolstack::ToolError>(toolstack::ToolStream::new(items))
    });
    let mut svc = Timeout::new(
        endless,
        TimeoutLayer::new().deadline(Duration::from_millis(10)),
    );
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    let mut yielded = 0;
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => {
                yielded += 1;
                if yielded == 100 {
                    tokio::time::advance(Duration::from_millis(20)).await;
                }
            }
            Err(err) => {
                assert_eq!(err.kind(), timeout_kind(TimeoutPhase::Deadline));
                break;
            }
        }
        assert!(yielded < 1_000, "the deadline was never checked");
    }
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn timeout_dropping_the_stream_cancels_the_tool() {
    let tool = Scripted::new(vec![vec![Step::Text(1, "a"), Step::Hang]]);
    let mut svc = Timeout::new(
        tool.clone(),
        TimeoutLayer::new().idle(Duration::from_secs(5)),
    );
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    assert!(!tool.was_dropped());
    drop(stream);
    assert!(tool.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn timeout_passes_tool_errors_through() {
    let failure = toolstack::ToolError::failed("boom");
    let tool = Scripted::new(vec![vec![Step::Text(1, "a"), Step::Fail(1, failure)]]);
    let mut svc = Timeout::new(tool, TimeoutLayer::new().deadline(Duration::from_secs(1)));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["a", "ERR(failed)"]);
}

#[tokio::test(start_paused = true)]
async fn timeout_stacks_in_service_builder_and_keeps_the_description() {
    #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
    #[schemars(crate = "toolstack::schemars")]
    struct Args {}
    let tool = toolstack::tool::from_fn("echo", |_: Args| async {
        Ok::<_, toolstack::ToolError>("hi")
    });
    let mut svc = tower::ServiceBuilder::new()
        .layer(TimeoutLayer::new().deadline(Duration::from_secs(1)))
        .service(tool);
    let stream = svc
        .ready()
        .await
        .unwrap()
        .call(ToolRequest::new("echo", "{}"))
        .await
        .unwrap();
    assert_eq!(texts(stream).await, ["hi"]);
}
