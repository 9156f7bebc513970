//! tower's own layers (LoadShed, Buffer, ConcurrencyLimit, Timeout) stacked
//! onto tools next to ours, the tools put in a toolbox, the toolbox layered
//! as a whole: every failure reaches the caller as a classified `ToolError`.

use crate::support;

use std::time::Duration;

use support::{texts, Scripted, Step};
use toolstack::{ErrorKind, TimeoutPhase, ToolError, ToolInfo, ToolRequest, Toolbox};
use toolstack_layers::catch_panic::CatchPanicLayer;
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Service, ServiceBuilder, ServiceExt};

fn info(name: &str) -> ToolInfo {
    ToolInfo::new(name.to_owned())
}

/// Runs one call through `svc`, as the texts of its items or `OPEN ERR(..)`.
async fn call<S>(svc: &mut S, name: &str) -> Result<Vec<String>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError>,
    S::Response: futures_util::Stream<Item = toolstack::ToolItem>,
{
    let stream = svc
        .ready()
        .await?
        .call(ToolRequest::new(name.to_owned(), "{}"))
        .await?;
    Ok(texts(Box::pin(stream)).await)
}

#[tokio::test(start_paused = true)]
async fn tower_layers_stack_onto_tools_in_a_layered_toolbox_and_errors_arrive_classified() {
    // tower's ConcurrencyLimit + LoadShed: a second call while the first is
    // still opening is shed.
    let held_open = Scripted::new(vec![vec![Step::Text(0, "late")]]).open_after(60_000);
    let shed = ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(1)
        .service(held_open);
    // tower's Timeout bounds the opening only.
    let slow_open = ServiceBuilder::new()
        .timeout(Duration::from_millis(100))
        .service(Scripted::new(vec![vec![Step::Text(0, "late")]]).open_after(1_000));
    // tower's Buffer whose worker is gone.
    let (closed, worker) =
        tower::buffer::Buffer::pair(Scripted::new(vec![vec![Step::Text(0, "x")]]), 4);
    drop(worker);
    // A working Buffer, with our idle timeout inside it.
    let (buffered, worker) = tower::buffer::Buffer::pair(
        ServiceBuilder::new()
            .stream_timeout(TimeoutLayer::new().idle(Duration::from_millis(50)))
            .service(Scripted::new(vec![vec![Step::Text(1, "a"), Step::Hang]])),
        4,
    );
    tokio::spawn(worker);

    let toolbox = Toolbox::new()
        .service(info("shed"), shed)
        .service(info("slow_open"), slow_open)
        .service(info("closed"), closed)
        .service(info("buffered"), buffered);

    // The whole toolbox, layered with ours and tower's.
    let mut layered = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .layer(CatchPanicLayer::new())
        .layer(ConcurrencyLimitLayer::new(16))
        .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
        .map_err(ToolError::from_box_error)
        .timeout(Duration::from_secs(20))
        .service(toolbox);

    // Hold the "shed" tool's only slot with a call that is still opening.
    let mut first = layered.clone();
    let holder = tokio::spawn(async move { call(&mut first, "shed").await });
    tokio::task::yield_now().await;

    let err = call(&mut layered, "shed").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");

    let err = call(&mut layered, "slow_open").await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Open
        },
        "{err}"
    );

    let err = call(&mut layered, "closed").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");

    assert_eq!(
        call(&mut layered, "buffered").await.unwrap(),
        ["a", "ERR(timeout)"]
    );

    let err = call(&mut layered, "nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    // The outer tower Timeout (20 s) ends the held call's opening.
    let err = holder.await.unwrap().unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Open
        },
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_over_tower_load_shed_retries_the_shed_call() {
    // An overloaded refusal never reached the tool, so even a tool that is
    // not idempotent is retried.
    let tool = Scripted::new(vec![vec![Step::Text(0, "done")]]).open_after(50);
    let inner = ServiceBuilder::new()
        .map_err(ToolError::from_box_error)
        .load_shed()
        .concurrency_limit(1)
        .service(tool.clone());
    let policy = RetryPolicy::new()
        .jitter(false)
        .backoff(Duration::from_millis(40), Duration::from_secs(1));
    let svc = toolstack_layers::retry::Retry::with_idempotency(inner, policy, false);

    let mut first = svc.clone();
    let holder = tokio::spawn(async move { call(&mut first, "t").await });
    tokio::task::yield_now().await;
    // Shed at 0 ms and 40 ms, admitted at 120 ms once the first call opened.
    // (`oneshot` drops the handle whose readiness was shed, as a toolbox
    // does, so that its queued permit request does not hold the slot.)
    let stream = svc.oneshot(ToolRequest::new("t", "{}")).await.unwrap();
    assert_eq!(texts(Box::pin(stream)).await, ["done"]);
    assert_eq!(holder.await.unwrap().unwrap(), ["done"]);
    assert_eq!(tool.calls(), 2, "shed attempts never reached the tool");
}
