//! The rate-limit layer: shared quotas, keys, wait and reject modes, and
//! the readiness contract. Time is tokio's paused clock throughout.
#![cfg(feature = "rate-limit")]

use std::num::NonZeroU32;
use std::task::Poll;
use std::time::Duration;

use futures_core::Stream;
use futures_util::{stream, StreamExt};
use tokio::time::Instant;
use toolstack::{tool, BoxTool, ErrorKind, ToolError, ToolItem, ToolOutput, ToolRequest, Toolbox};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_layer::Layer;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Caller(&'static str);

fn one_per_second() -> Quota {
    Quota::per_second(NonZeroU32::MIN)
}

/// A tool that answers its own name, type-erased to keep signatures short.
fn ok_tool(name: &'static str) -> BoxTool {
    BoxTool::new(tool::from_fn(
        name,
        move |_: serde_json::Value| async move { Ok::<_, ToolError>(name) },
    ))
}

fn request(name: &str) -> ToolRequest {
    ToolRequest::new(name.to_owned(), "{}")
}

/// Calls once and reads the whole response.
async fn call<S, St>(service: S, request: ToolRequest) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Response = St, Error = ToolError>,
    St: Stream<Item = ToolItem>,
{
    let stream = service.oneshot(request).await?;
    Ok(stream.collect().await)
}

fn assert_rate_limited(result: Result<Vec<ToolItem>, ToolError>) -> ToolError {
    match result {
        Err(err) if matches!(err.kind(), ErrorKind::RateLimited { .. }) => err,
        other => panic!("expected a rate-limit error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn calls_within_the_limit_get_the_inner_stream_untouched() {
    let counter = || {
        tool::from_stream("count", |_: serde_json::Value| {
            stream::iter(1..=3).map(Ok::<_, ToolError>)
        })
    };
    let quota = Quota::per_second(NonZeroU32::new(2).unwrap());
    let limited = RateLimitLayer::global(quota).layer(counter());

    let expected = call(counter(), request("count")).await.unwrap();
    let got = call(limited, request("count")).await.unwrap();
    assert_eq!(got, expected);
    assert_eq!(
        got,
        [1, 2, 3].map(|n| Ok(ToolOutput::json(serde_json::json!(n))))
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limit_is_shared_across_clones() {
    let service = RateLimitLayer::global(one_per_second())
        .reject()
        .layer(ok_tool("a"));
    let clone = service.clone();

    call(service, request("a")).await.unwrap();
    assert_rate_limited(call(clone, request("a")).await);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_is_shared_across_services_from_one_layer() {
    let layer = RateLimitLayer::global(one_per_second()).reject();
    let a = layer.layer(ok_tool("a"));
    let b = layer.clone().layer(ok_tool("b"));

    call(a, request("a")).await.unwrap();
    assert_rate_limited(call(b, request("b")).await);
}

#[tokio::test(start_paused = true)]
async fn separate_layers_have_separate_quotas() {
    let a = RateLimitLayer::global(one_per_second())
        .reject()
        .layer(ok_tool("a"));
    let b = RateLimitLayer::global(one_per_second())
        .reject()
        .layer(ok_tool("b"));

    call(a, request("a")).await.unwrap();
    call(b, request("b")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reject_mode_fails_fast_with_retry_after() {
    let service = RateLimitLayer::global(one_per_second())
        .reject()
        .layer(ok_tool("a"));
    call(service.clone(), request("a")).await.unwrap();

    let start = Instant::now();
    let err = assert_rate_limited(call(service.clone(), request("a")).await);
    assert_eq!(start.elapsed(), Duration::ZERO, "rejecting must not wait");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(err.is_retryable());
    assert_eq!(
        err.message(),
        "rate limit for all tool calls reached; retry after 1000 ms"
    );

    tokio::time::advance(Duration::from_millis(400)).await;
    let err = assert_rate_limited(call(service.clone(), request("a")).await);
    assert_eq!(err.retry_after(), Some(Duration::from_millis(600)));

    tokio::time::advance(Duration::from_millis(600)).await;
    call(service, request("a")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wait_mode_waits_until_the_bucket_allows_the_call() {
    let service = RateLimitLayer::global(one_per_second()).layer(ok_tool("a"));
    let start = Instant::now();

    call(service.clone(), request("a")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let items = call(service, request("a")).await.unwrap();
    assert_eq!(items, [Ok(ToolOutput::text("a"))]);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn waiting_calls_go_one_per_replenished_cell() {
    let service = RateLimitLayer::global(one_per_second()).layer(ok_tool("a"));
    let start = Instant::now();

    let calls = (0..3).map(|_| {
        let service = service.clone();
        async move {
            call(service, request("a")).await.unwrap();
            start.elapsed()
        }
    });
    let mut done = futures_util::future::join_all(calls).await;
    done.sort();
    assert_eq!(
        done,
        [0, 1, 2].map(Duration::from_secs),
        "each waiter woken for a cell another took must sleep again"
    );
}

#[tokio::test(start_paused = true)]
async fn per_tool_buckets_are_independent() {
    let toolbox = Toolbox::new().tool(ok_tool("a")).tool(ok_tool("b"));
    let service = ServiceBuilder::new()
        .layer(RateLimitLayer::per_tool(one_per_second()).reject())
        .service(toolbox);

    call(service.clone(), request("a")).await.unwrap();
    call(service.clone(), request("b")).await.unwrap();
    let err = assert_rate_limited(call(service.clone(), request("a")).await);
    assert_eq!(
        err.message(),
        "rate limit for tool `a` reached; retry after 1000 ms"
    );
    assert_rate_limited(call(service, request("b")).await);
}

#[tokio::test(start_paused = true)]
async fn per_caller_buckets_come_from_request_extensions() {
    let service = RateLimitLayer::per_caller::<Caller>(one_per_second())
        .reject()
        .layer(ok_tool("a"));
    let as_caller = |name| request("a").with_extension(Caller(name));

    call(service.clone(), as_caller("alice")).await.unwrap();
    call(service.clone(), as_caller("bob")).await.unwrap();
    let err = assert_rate_limited(call(service.clone(), as_caller("alice")).await);
    assert!(err.message().starts_with("rate limit for this caller"));
    // Neither caller's call used the anonymous bucket.
    call(service, request("a")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn requests_without_the_caller_key_share_the_anonymous_bucket() {
    let service = RateLimitLayer::per_caller::<Caller>(one_per_second())
        .reject()
        .layer(ok_tool("a"));

    call(service.clone(), request("a")).await.unwrap();
    let err = assert_rate_limited(call(service.clone(), request("a").with_id("other")).await);
    assert!(err
        .message()
        .starts_with("rate limit for anonymous callers"));
    call(service, request("a").with_extension(Caller("alice")))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropped_waiting_call_takes_no_quota() {
    let service = RateLimitLayer::global(one_per_second()).layer(ok_tool("a"));
    let start = Instant::now();
    call(service.clone(), request("a")).await.unwrap();

    // A call that waits for the next cell, then is given up on half-way.
    let waiting = call(service.clone(), request("a"));
    let gave_up = tokio::time::timeout(Duration::from_millis(500), waiting).await;
    assert!(gave_up.is_err());

    // The next call gets the cell the dropped one was waiting for.
    call(service, request("a")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn waiting_call_holds_no_capacity_of_the_inner_service() {
    // One call at a time inside, and a per-caller limit outside: Alice
    // waiting for her quota must not keep Bob out of the inner service.
    let service = ServiceBuilder::new()
        .layer(RateLimitLayer::per_caller::<Caller>(one_per_second()))
        .concurrency_limit(1)
        .service(ok_tool("a"));
    let as_caller = |name| request("a").with_extension(Caller(name));
    let start = Instant::now();

    call(service.clone(), as_caller("alice")).await.unwrap();
    let alice = tokio::spawn(call(service.clone(), as_caller("alice")));
    tokio::task::yield_now().await;

    call(service, as_caller("bob")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    alice.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

type MockStream = stream::Iter<std::vec::IntoIter<ToolItem>>;

#[tokio::test(start_paused = true)]
async fn inner_is_called_only_after_poll_ready() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, MockStream>();
    let mut service =
        tower_test::mock::Spawn::new(RateLimitLayer::global(one_per_second()).layer(mock));

    // Readiness is the inner service's.
    handle.allow(0);
    assert!(service.poll_ready().is_pending());
    handle.allow(1);
    assert!(service.poll_ready().is_ready());

    // Within the limit: straight through.
    let first = tokio::spawn(service.call(request("a")));
    let (_, respond) = handle.next_request().await.unwrap();
    respond.send_response(stream::iter(vec![]));
    assert!(first.await.unwrap().is_ok());

    // Over the limit: once the wait is over, the waiting call makes a
    // clone of the inner service ready (the mock panics otherwise), which
    // here must wait until the mock allows another request.
    handle.allow(1);
    assert!(service.poll_ready().is_ready());
    let start = Instant::now();
    let second = tokio::spawn(service.call(request("a")));
    handle.allow(0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        handle.poll_request().is_pending(),
        "called without readiness"
    );

    handle.allow(1);
    let (req, respond) = handle.next_request().await.unwrap();
    assert_eq!(req.name(), "a");
    respond.send_response(stream::iter(vec![]));
    assert!(second.await.unwrap().is_ok());
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn inner_errors_become_tool_errors() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, MockStream>();
    let mut service =
        tower_test::mock::Spawn::new(RateLimitLayer::global(one_per_second()).layer(mock));
    handle.send_error(ToolError::failed("inner is down"));
    let Poll::Ready(Err(err)) = service.poll_ready() else {
        panic!("expected the inner readiness error");
    };
    assert_eq!(err, ToolError::failed("inner is down"));
}

#[tokio::test(start_paused = true)]
async fn retain_recent_forgets_only_full_buckets() {
    let layer = RateLimitLayer::per_tool(one_per_second()).reject();
    let toolbox = Toolbox::new().tool(ok_tool("a")).tool(ok_tool("b"));
    let service = layer.layer(toolbox);

    call(service.clone(), request("a")).await.unwrap();
    tokio::time::advance(Duration::from_millis(500)).await;
    call(service.clone(), request("b")).await.unwrap();
    tokio::time::advance(Duration::from_millis(600)).await;

    // `a` is full again and forgotten, which changes nothing for it; `b`
    // is still half-empty and stays limited.
    layer.retain_recent();
    assert_rate_limited(call(service.clone(), request("b")).await);
    call(service, request("a")).await.unwrap();
}

#[test]
fn the_layer_reports_its_quota_and_mode() {
    let layer = RateLimitLayer::per_caller::<Caller>(one_per_second()).reject();
    assert_eq!(layer.quota(), one_per_second());
    let debug = format!("{layer:?}");
    assert!(
        debug.contains("PerCaller") && debug.contains("Reject"),
        "{debug}"
    );
}
