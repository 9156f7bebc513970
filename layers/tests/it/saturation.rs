//! The stack under saturation: waiting for quota or a permit is admission,
//! not execution. With the recommended order —
//!
//! `trace ▸ catch_panic ▸ timeout(deadline) ▸ validate ▸ retry ▸ rate_limit ▸
//! concurrency_limit ▸ timeout(first_item, idle) ▸ tool`
//!
//! — the first-item and idle bounds measure the tool alone, a wait is
//! bounded by the admission layer that makes it (and says "the tool never
//! started"), and a call refused for capacity may be retried whatever the
//! tool's idempotency.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use toolstack::{
    tool, ErrorKind, TimeoutPhase, ToolAnnotations, ToolError, ToolRequest, ToolResult, Toolbox,
};
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{ServiceBuilder, ServiceExt};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Sleep {
    ms: u64,
}

/// A tool that sleeps `ms` then answers, counting its runs.
fn sleeper(
    name: &'static str,
    runs: &Arc<AtomicUsize>,
) -> impl tower::Service<
    ToolRequest,
    Error = ToolError,
    Response = impl futures_util::Stream<Item = toolstack::ToolItem> + Send + 'static,
    Future = impl Send + 'static,
> + toolstack::Describe
       + Clone
       + Send
       + Sync
       + 'static {
    let runs = runs.clone();
    tool::from_fn(name, move |Sleep { ms }| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>("done")
        }
    })
}

async fn call(tools: &Toolbox, name: &str, arguments: &str) -> (ToolResult, Duration) {
    let start = Instant::now();
    let result = match tools
        .clone()
        .oneshot(ToolRequest::new(name.to_owned(), arguments.to_owned()))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        Err(err) => ToolResult::from_error(err),
    };
    (result, start.elapsed())
}

fn kind(result: &ToolResult) -> Option<ErrorKind> {
    result.error.as_ref().map(ToolError::kind)
}

fn every_20ms() -> Quota {
    Quota::with_period(Duration::from_millis(20))
        .unwrap()
        .allow_burst(NonZeroU32::MIN)
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waited_for_quota_and_a_permit_is_not_blamed_on_the_tool() {
    // `t` and `u` share one permit; `t` has a quota of one call per 20 ms.
    // B on `t` waits 20 ms for quota, then for the permit that C on `u`
    // holds for 450 ms: the first-item bound (100 ms) is the tool's alone,
    // so B runs once the permit is free instead of timing out unrun.
    let permit = ConcurrencyLimitLayer::shared(1);
    let (t_runs, u_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tool_bounds = TimeoutLayer::new().first_item(Duration::from_millis(100));
    let tools = Toolbox::new()
        .layered(
            sleeper("t", &t_runs),
            ServiceBuilder::new()
                .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(2)))
                .stream_rate_limit(RateLimitLayer::per_tool(every_20ms()))
                .layer(permit.clone())
                .stream_timeout(tool_bounds),
        )
        .layered(
            sleeper("u", &u_runs),
            ServiceBuilder::new()
                .layer(permit)
                .stream_timeout(TimeoutLayer::new().first_item(Duration::from_secs(1))),
        );
    let a = call(&tools, "t", r#"{"ms":1}"#).await;
    assert!(a.0.error.is_none(), "{:?}", a.0);
    let b = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "t", r#"{"ms":1}"#).await }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let c = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "u", r#"{"ms":450}"#).await }
    });
    let (b, c) = (b.await.unwrap(), c.await.unwrap());
    assert!(c.0.error.is_none(), "{:?}", c.0);
    assert!(b.0.error.is_none(), "B was blamed for waiting: {:?}", b.0);
    assert_eq!(t_runs.load(Ordering::SeqCst), 2);
    // B waited for C's permit (5 + 450 ms) and then ran for 1 ms.
    assert!(b.1 >= Duration::from_millis(455), "{:?}", b.1);
}

#[tokio::test(start_paused = true)]
async fn above_the_admission_layers_a_first_item_bound_that_expires_in_the_wait_says_the_tool_never_started(
) {
    // The order the README used to show: the same scenario, the first-item
    // bound above the quota and the permit. It expires while B waits for
    // C's permit — why the tool's own bounds go below — and B's error says
    // that B waited, not that the tool was slow.
    let permit = ConcurrencyLimitLayer::shared(1);
    let (t_runs, u_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            sleeper("t", &t_runs),
            ServiceBuilder::new()
                .stream_timeout(TimeoutLayer::new().first_item(Duration::from_millis(100)))
                .stream_rate_limit(RateLimitLayer::per_tool(every_20ms()))
                .layer(permit.clone()),
        )
        .layered(sleeper("u", &u_runs), ServiceBuilder::new().layer(permit));
    call(&tools, "t", r#"{"ms":1}"#).await;
    let b = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "t", r#"{"ms":1}"#).await }
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    call(&tools, "u", r#"{"ms":450}"#).await;
    let b = b.await.unwrap();
    assert_eq!(kind(&b.0), Some(ErrorKind::Overloaded), "{:?}", b.0);
    assert_eq!(
        b.0.error.as_ref().unwrap().message(),
        "waited 100ms for capacity over 1 attempt, until its first-item bound of 100ms passed; the tool never started"
    );
    assert_eq!(t_runs.load(Ordering::SeqCst), 1, "t never ran for B");
}

#[tokio::test(start_paused = true)]
async fn a_call_that_waits_too_long_for_a_permit_fails_as_overloaded_and_never_starts() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(
        sleeper("busy", &runs),
        ConcurrencyLimitLayer::new(1).max_wait(Duration::from_millis(100)),
    );
    let holder = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "busy", r#"{"ms":1000}"#).await }
    });
    tokio::task::yield_now().await;
    let (result, waited) = call(&tools, "busy", r#"{"ms":1}"#).await;
    assert_eq!(kind(&result), Some(ErrorKind::Overloaded));
    assert_eq!(
        result.error.as_ref().unwrap().message(),
        "waited 100ms for capacity; the tool never started"
    );
    assert!(result.error.as_ref().unwrap().is_retryable());
    assert_eq!(waited, Duration::from_millis(100));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the shed call reached the tool"
    );
    assert!(holder.await.unwrap().0.error.is_none());
    // The limit is not broken by the shed call: the next one runs.
    assert!(call(&tools, "busy", r#"{"ms":1}"#).await.0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_non_idempotent_call_shed_for_capacity_is_retried_and_runs_once() {
    // The tool is not idempotent, but a shed call never reached it.
    let runs = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .stream_retry(
            RetryPolicy::new()
                .max_attempts(5)
                .backoff(Duration::from_millis(50), Duration::from_millis(50))
                .jitter(false),
        )
        .layer(ConcurrencyLimitLayer::new(1).max_wait(Duration::from_millis(50)));
    let send = sleeper("send", &runs);
    let tools = Toolbox::new().layered(send, stack);
    let holder = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "send", r#"{"ms":120}"#).await }
    });
    tokio::task::yield_now().await;
    let (result, took) = call(&tools, "send", r#"{"ms":1}"#).await;
    assert!(result.error.is_none(), "{:?}", result);
    assert!(holder.await.unwrap().0.error.is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "each call ran exactly once");
    // Shed at 50 ms, retried at 100 ms, shed at 150 ms... the permit is
    // free at 120 ms, so the second wait ends then.
    assert!(took >= Duration::from_millis(120), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn bad_arguments_under_load_are_refused_at_once_not_queued() {
    // Validation sits above the admission layers: a call that cannot run
    // takes no quota and waits for no permit.
    let runs = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .stream_validate()
        .stream_rate_limit(RateLimitLayer::per_tool(every_20ms()))
        .stream_concurrency_limit(1)
        .stream_timeout(TimeoutLayer::new().first_item(Duration::from_millis(100)));
    let tools = Toolbox::new().layered(sleeper("t", &runs), stack);
    let holder = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "t", r#"{"ms":50}"#).await }
    });
    tokio::task::yield_now().await;
    let (result, took) = call(&tools, "t", r#"{"ms":"soon"}"#).await;
    assert_eq!(kind(&result), Some(ErrorKind::InvalidArguments));
    assert_eq!(took, Duration::ZERO);
    assert!(holder.await.unwrap().0.error.is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_quota_wait_longer_than_allowed_is_refused_with_its_retry_after() {
    let runs = Arc::new(AtomicUsize::new(0));
    let slow_quota = Quota::with_period(Duration::from_secs(10))
        .unwrap()
        .allow_burst(NonZeroU32::MIN);
    let tools = Toolbox::new().layered(
        sleeper("search", &runs),
        RateLimitLayer::per_tool(slow_quota).wait_at_most(Duration::from_millis(500)),
    );
    assert!(call(&tools, "search", r#"{"ms":1}"#)
        .await
        .0
        .error
        .is_none());
    let (result, took) = call(&tools, "search", r#"{"ms":1}"#).await;
    let err = result.error.as_ref().unwrap();
    let ErrorKind::RateLimited {
        retry_after: Some(after),
    } = err.kind()
    else {
        panic!("{err:?}");
    };
    assert!(after > Duration::from_secs(9), "{after:?}");
    assert_eq!(took, Duration::ZERO, "a refused call does not wait");
    assert!(
        err.message().starts_with("would wait ")
            && err.message().ends_with(
                "for the quota of tool `search`, more than the 500 ms a call may wait; the tool never started"
            ),
        "{err}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_longer_than_the_policy_waits_for_is_handed_back_at_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let make = |after: Duration| {
        let calls = calls.clone();
        tool::from_fn("quota", move |_: serde_json::Value| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n.is_multiple_of(2) {
                    Err(ToolError::rate_limited(Some(after)))
                } else {
                    Ok("served")
                }
            }
        })
        .with_annotations(ToolAnnotations::new().read_only())
    };
    // Past the cap: the typed error comes back, with its retry-after.
    let long = Toolbox::new().layered(
        make(Duration::from_secs(120)),
        ServiceBuilder::new().stream_retry(RetryPolicy::new()),
    );
    let (result, took) = call(&long, "quota", "{}").await;
    assert!(matches!(
        kind(&result),
        Some(ErrorKind::RateLimited { retry_after: Some(d) }) if d == Duration::from_secs(120)
    ));
    assert_eq!(took, Duration::ZERO);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Within the cap (10 s by default): honoured, then served.
    calls.store(0, Ordering::SeqCst);
    let short = Toolbox::new().layered(
        make(Duration::from_secs(2)),
        ServiceBuilder::new().stream_retry(RetryPolicy::new()),
    );
    let (result, took) = call(&short, "quota", "{}").await;
    assert!(result.error.is_none(), "{result:?}");
    assert!(took >= Duration::from_secs(2), "{took:?}");

    // The cap is the policy's to set.
    calls.store(0, Ordering::SeqCst);
    let patient = Toolbox::new().layered(
        make(Duration::from_secs(120)),
        ServiceBuilder::new()
            .stream_retry(RetryPolicy::new().max_retry_after(Duration::from_secs(300))),
    );
    let (result, took) = call(&patient, "quota", "{}").await;
    assert!(result.error.is_none());
    assert!(took >= Duration::from_secs(120));
    let _ = futures_util::stream::empty::<()>().next().await;
}

/// A tool whose first run fails as unavailable, then answers; it counts
/// its runs.
fn flaky_once(
    runs: &Arc<AtomicUsize>,
) -> impl tower::Service<
    ToolRequest,
    Error = ToolError,
    Response = impl futures_util::Stream<Item = toolstack::ToolItem> + Send + 'static,
    Future = impl Send + 'static,
> + toolstack::Describe
       + Clone
       + Send
       + Sync
       + 'static {
    flaky(runs, 1)
}

/// A tool whose first `failures` runs fail as unavailable, then answers;
/// it counts its runs.
fn flaky(
    runs: &Arc<AtomicUsize>,
    failures: usize,
) -> impl tower::Service<
    ToolRequest,
    Error = ToolError,
    Response = impl futures_util::Stream<Item = toolstack::ToolItem> + Send + 'static,
    Future = impl Send + 'static,
> + toolstack::Describe
       + Clone
       + Send
       + Sync
       + 'static {
    let runs = runs.clone();
    tool::from_fn("flaky", move |_: serde_json::Value| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < failures {
                Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the backend blinked",
                ))
            } else {
                Ok("fine")
            }
        }
    })
    .with_annotations(ToolAnnotations::new().read_only())
}

fn fixed_backoff(attempts: u32, ms: u64) -> RetryPolicy {
    RetryPolicy::new()
        .max_attempts(attempts)
        .backoff(Duration::from_millis(ms), Duration::from_millis(ms))
        .jitter(false)
}

/// `t` behind `timeout ▸ retry` and `busy`, sharing one permit (a call
/// waits 100 ms for it at most), with `busy` holding it for a second from
/// now: each call of `t` is refused for capacity. Returns the toolbox,
/// `t`'s runs and the holder.
async fn t_while_busy_holds_the_permit(
    timeout: TimeoutLayer,
    retry: RetryPolicy,
) -> (
    Toolbox,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<(ToolResult, Duration)>,
) {
    let permit = ConcurrencyLimitLayer::shared(1).max_wait(Duration::from_millis(100));
    let (runs, busy_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            sleeper("t", &runs),
            ServiceBuilder::new()
                .stream_timeout(timeout)
                .stream_retry(retry)
                .layer(permit.clone()),
        )
        .layered(sleeper("busy", &busy_runs), permit);
    let holder = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "busy", r#"{"ms":1000}"#).await }
    });
    tokio::task::yield_now().await;
    (tools, runs, holder)
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_for_capacity_after_an_attempt_that_ran_ends_with_that_attempts_error() {
    // `flaky` and `busy` share one permit. flaky's first run fails; while
    // it backs off, `busy` takes the permit for a second; both retries of
    // flaky wait 100 ms for it and are shed.
    let permit = ConcurrencyLimitLayer::shared(1).max_wait(Duration::from_millis(100));
    let (flaky_runs, busy_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            flaky_once(&flaky_runs),
            ServiceBuilder::new()
                .stream_retry(fixed_backoff(3, 50))
                .layer(permit.clone()),
        )
        .layered(sleeper("busy", &busy_runs), permit);
    let flaky = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "flaky", "{}").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let busy = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "busy", r#"{"ms":1000}"#).await }
    });
    let (result, _) = flaky.await.unwrap();
    let err = result.error.expect("flaky's retries never got the permit");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.message(),
        "the backend blinked; it was tried again, and that attempt was refused: waited 100ms for capacity; the tool never started"
    );
    assert_eq!(flaky_runs.load(Ordering::SeqCst), 1);
    assert!(busy.await.unwrap().0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_passes_while_a_retry_waits_for_a_permit_says_the_tool_never_started() {
    let (tools, runs, holder) = t_while_busy_holds_the_permit(
        TimeoutLayer::new().deadline(Duration::from_millis(150)),
        fixed_backoff(5, 100),
    )
    .await;
    // Waits 100 ms for the permit before the call (and its deadline)
    // starts, is shed, backs off 100 ms (it ends before the deadline),
    // waits again: the deadline passes 50 ms into the second wait.
    let (result, took) = call(&tools, "t", r#"{"ms":1}"#).await;
    let err = result.error.expect("the call cannot have run");
    assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");
    assert_eq!(
        err.message(),
        "waited 150ms for capacity over 2 attempts, until its deadline of 150ms passed; the tool never started"
    );
    assert_eq!(took, Duration::from_millis(250));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "`t` never ran");
    assert!(holder.await.unwrap().0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_would_start_after_the_deadline_is_not_waited_for() {
    let (tools, runs, holder) = t_while_busy_holds_the_permit(
        TimeoutLayer::new().deadline(Duration::from_millis(150)),
        fixed_backoff(5, 200),
    )
    .await;
    // Shed after its 100 ms wait; the 200 ms backoff would end past the
    // 150 ms deadline, so the call ends at once with the refusal, and
    // says why it was not tried again.
    let (result, took) = call(&tools, "t", r#"{"ms":1}"#).await;
    let err = result.error.expect("the call cannot have run");
    assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");
    assert_eq!(
        err.message(),
        "waited 100ms for capacity; the tool never started; not tried again: its backoff of 200ms would pass the deadline of 150ms"
    );
    assert_eq!(took, Duration::from_millis(100), "it waited for nothing");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "`t` never ran");
    assert!(holder.await.unwrap().0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_passes_while_a_late_tool_runs_says_how_late_it_started() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(
        sleeper("t", &runs),
        ServiceBuilder::new()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(300)))
            .stream_rate_limit(RateLimitLayer::per_tool(every_20ms())),
    );
    assert!(call(&tools, "t", r#"{"ms":1}"#).await.0.error.is_none());
    // The quota allows the next call 19 ms on; it then runs for 500 ms.
    let (result, took) = call(&tools, "t", r#"{"ms":500}"#).await;
    let err = result.error.expect("the deadline passed");
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Deadline
        }
    );
    assert_eq!(
        err.message(),
        "the tool did not finish within its deadline of 300ms (it started 19ms after the call, having waited for capacity)"
    );
    assert_eq!(took, Duration::from_millis(300));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn refusals_alone_over_several_attempts_say_how_many() {
    // No deadline: a timeout with no bound passes the call through.
    let (tools, runs, holder) =
        t_while_busy_holds_the_permit(TimeoutLayer::new(), fixed_backoff(3, 50)).await;
    let (result, took) = call(&tools, "t", r#"{"ms":1}"#).await;
    let err = result.error.expect("the call cannot have run");
    assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");
    assert_eq!(
        err.message(),
        "refused for capacity 3 times; the tool never started (the last refusal: waited 100ms for capacity; the tool never started)"
    );
    // Three waits of 100 ms, two backoffs of 50 ms.
    assert_eq!(took, Duration::from_millis(400));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(holder.await.unwrap().0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_ran_fewer_times_for_an_attempt_refused_for_capacity_says_how_many() {
    // `flaky` fails its first two runs, and shares one permit (a call waits
    // 40 ms for it at most) with `busy`, which holds it from 10 to 100 ms.
    // Run 1 fails at 0; the retry at 50 ms waits for the permit until it
    // is shed at 90; the third and last attempt, at 140 ms, runs and fails.
    let permit = ConcurrencyLimitLayer::shared(1).max_wait(Duration::from_millis(40));
    let (flaky_runs, busy_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            flaky(&flaky_runs, 2),
            ServiceBuilder::new()
                .stream_retry(fixed_backoff(3, 50))
                .layer(permit.clone()),
        )
        .layered(sleeper("busy", &busy_runs), permit);
    let flaky = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "flaky", "{}").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let busy = tokio::spawn({
        let tools = tools.clone();
        async move { call(&tools, "busy", r#"{"ms":90}"#).await }
    });
    let (result, took) = flaky.await.unwrap();
    let err = result.error.expect("its two runs failed");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.message(),
        "the backend blinked; 3 attempts: 2 ran, 1 was refused for capacity"
    );
    assert_eq!(flaky_runs.load(Ordering::SeqCst), 2);
    assert_eq!(took, Duration::from_millis(140));
    assert!(busy.await.unwrap().0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_backoff_would_pass_the_deadline_says_why_it_was_not_made() {
    // The tool fails its first run after 397 ms of a 400 ms deadline: a
    // backoff of 4 ms would end past it.
    let runs = Arc::new(AtomicUsize::new(0));
    let late_failure = {
        let runs = runs.clone();
        tool::from_fn("late", move |_: serde_json::Value| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(397)).await;
                Err::<&str, _>(ToolError::new(
                    ErrorKind::Unavailable,
                    "the backend blinked",
                ))
            }
        })
        .with_annotations(ToolAnnotations::new().read_only())
    };
    let tools = Toolbox::new().layered(
        late_failure,
        ServiceBuilder::new()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(400)))
            .stream_retry(fixed_backoff(3, 4)),
    );
    let (result, took) = call(&tools, "late", "{}").await;
    let err = result.error.expect("it failed");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.message(),
        "the backend blinked; not tried again: its backoff of 4ms would pass the deadline of 400ms"
    );
    assert_eq!(took, Duration::from_millis(397), "it waited for nothing");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_permit_granted_as_the_deadline_passes_never_reaches_the_tool() {
    // `flaky` and `busy` share one permit. flaky's first run fails at once;
    // while it backs off, `busy` takes the permit, and flaky's retry waits
    // for it. busy lets it go at flaky's deadline, between two polls of
    // flaky's call: the poll that finds the permit finds the deadline
    // passed too.
    let permit = ConcurrencyLimitLayer::shared(1);
    let (flaky_runs, busy_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            flaky_once(&flaky_runs),
            ServiceBuilder::new()
                .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(100)))
                .stream_retry(fixed_backoff(3, 10))
                .layer(permit.clone()),
        )
        .layered(sleeper("busy", &busy_runs), permit);
    let mut flaky = Box::pin(call(&tools, "flaky", "{}"));
    assert!(
        futures_util::poll!(&mut flaky).is_pending(),
        "its first run failed; it backs off"
    );
    // busy works toward its first item, holding the permit.
    let mut held = Box::pin(
        tools
            .clone()
            .oneshot(ToolRequest::new("busy", r#"{"ms":1000}"#)),
    );
    assert!(futures_util::poll!(&mut held).is_pending(), "busy works");
    tokio::time::advance(Duration::from_millis(10)).await;
    assert!(
        futures_util::poll!(&mut flaky).is_pending(),
        "its retry waits for busy's permit"
    );
    tokio::time::advance(Duration::from_millis(90)).await;
    // The permit goes to flaky's retry, as its deadline passes.
    drop(held);
    let (result, took) = flaky.await;
    let err = result
        .error
        .expect("the deadline passed before the retry ran");
    assert_eq!(
        flaky_runs.load(Ordering::SeqCst),
        1,
        "no run after the deadline"
    );
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.message(),
        "the backend blinked; its deadline of 100ms passed while a retry waited for capacity, so it was not tried again"
    );
    assert_eq!(took, Duration::from_millis(100));
    // The permit was not kept: the next call runs at once.
    assert!(call(&tools, "busy", r#"{"ms":1}"#).await.0.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_permit_granted_to_a_validated_call_as_its_deadline_passes_never_reaches_the_tool() {
    // Validation readies the tool only for good arguments: the first
    // attempt's wait for a permit is in the call's future, within its
    // deadline, and is reported as a wait for capacity.
    let permit = ConcurrencyLimitLayer::shared(1);
    let (runs, busy_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tools = Toolbox::new()
        .layered(
            sleeper("t", &runs),
            ServiceBuilder::new()
                .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(100)))
                .stream_validate()
                .layer(permit.clone()),
        )
        .layered(sleeper("busy", &busy_runs), permit);
    let held = tools
        .clone()
        .oneshot(ToolRequest::new("busy", r#"{"ms":1000}"#))
        .await
        .unwrap();
    let mut t = Box::pin(call(&tools, "t", r#"{"ms":1}"#));
    assert!(
        futures_util::poll!(&mut t).is_pending(),
        "it waits for the permit"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    drop(held);
    let (result, took) = t.await;
    let err = result.error.expect("the deadline passed before it ran");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "`t` never ran");
    assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");
    assert_eq!(
        err.message(),
        "waited 100ms for capacity over 1 attempt, until its deadline of 100ms passed; the tool never started"
    );
    assert_eq!(took, Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_quota_that_comes_back_at_the_deadline_is_not_taken_and_the_tool_never_starts() {
    // One call per 100 ms: the second call's quota comes back exactly at
    // its deadline, on the same timer tick.
    let runs = Arc::new(AtomicUsize::new(0));
    let every_100ms = Quota::with_period(Duration::from_millis(100))
        .unwrap()
        .allow_burst(NonZeroU32::MIN);
    let tools = Toolbox::new().layered(
        sleeper("t", &runs),
        ServiceBuilder::new()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(100)))
            .stream_rate_limit(RateLimitLayer::per_tool(every_100ms)),
    );
    assert!(call(&tools, "t", r#"{"ms":0}"#).await.0.error.is_none());
    let (result, took) = call(&tools, "t", r#"{"ms":1}"#).await;
    let err = result
        .error
        .expect("the deadline passed as its quota came back");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "no run after the deadline");
    assert!(matches!(err.kind(), ErrorKind::RateLimited { .. }), "{err}");
    assert_eq!(
        err.message(),
        "waited 100ms for the rate limit's quota over 1 attempt, until its deadline of 100ms passed; the tool never started; retry after 0 ms"
    );
    assert_eq!(took, Duration::from_millis(100));
    // The quota it did not take is the next call's, at once.
    let (result, took) = call(&tools, "t", r#"{"ms":1}"#).await;
    assert!(result.error.is_none(), "{result:?}");
    assert_eq!(took, Duration::from_millis(1));
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_backoff_ends_on_the_deadline_starts_no_further_attempt() {
    // The call starts half a millisecond into one of the timers'
    // millisecond ticks: its deadline is at 100.5 ms. Its first run fails
    // at once, and its backoff of 99.7 ms ends at 100.2 ms, before the
    // deadline — but tokio's timers fire on whole-millisecond ticks, the
    // backoff's and the deadline's on the same one: the backoff is over
    // only once the deadline has passed.
    let runs = Arc::new(AtomicUsize::new(0));
    let backoff = Duration::from_micros(99_700);
    let tools = Toolbox::new().layered(
        flaky_once(&runs),
        ServiceBuilder::new()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(100)))
            .stream_retry(
                RetryPolicy::new()
                    .max_attempts(3)
                    .backoff(backoff, backoff)
                    .jitter(false),
            ),
    );
    tokio::time::advance(Duration::from_micros(500)).await;
    let (result, took) = call(&tools, "flaky", "{}").await;
    let err = result
        .error
        .expect("the deadline passed before the retry ran");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "no run after the deadline");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.message(),
        "the backend blinked; its deadline of 100ms passed while a retry backed off, so it was not tried again"
    );
    assert!(took >= Duration::from_micros(100_500), "{took:?}");
}
