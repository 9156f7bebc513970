//! The rate limit with its buckets in a real Redis (`redis-server`, started
//! per test on a free loopback port and killed at its end): one quota for
//! layers that do not share memory (two connection managers, as two
//! processes have), the keys in Redis, waiting for the time Redis says,
//! and what a call does when Redis dies — never more than the command
//! timeout.
//!
//! Real time, against a real server: every wait is bounded, and conditions
//! are awaited, not slept for. A stalled machine may slow any step down:
//! where Redis stays up, the layers wait for it patiently
//! ([`PATIENT_TIMEOUT`]), so that only a dead or silent Redis makes them
//! fall back; bounds on time are the timeout a call may cost by design and
//! seconds of slack ([`STALL`]), never milliseconds; and a round that a
//! stall made prove nothing (a cell that came back while a call waited to
//! be polled) is done again.

use crate::redis_server;
use crate::support;

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis_server::{RedisServer, COMMAND_TIMEOUT, PATIENCE, PATIENT_TIMEOUT, STALL};
use support::capture::Capture;
use toolstack::model::{ChatRequest, Message, ScriptedModel, Turn};
use toolstack::{tool, BoxTool, ErrorKind, ToolError, ToolItem, ToolRequest};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer, RedisLimiter};
use toolstack_layers::trace::TraceLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_layer::Layer;
use tracing::subscriber::DefaultGuard;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Caller(String);

fn ok_tool(name: &'static str) -> BoxTool {
    BoxTool::new(tool::from_fn(
        name,
        move |_: serde_json::Value| async move { Ok::<_, ToolError>(name) },
    ))
}

fn request(name: &str) -> ToolRequest {
    ToolRequest::new(name.to_owned(), "{}")
}

/// Calls once and reads the whole response, within [`PATIENCE`] (a call
/// that hangs fails its test).
async fn call<S>(service: &S, request: ToolRequest) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    call_within(PATIENCE, service, request).await
}

/// `call`, which must be over within the command timeout and what a
/// stalled machine may add to it.
async fn bounded_call<S>(service: &S, request: ToolRequest) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    call_within(COMMAND_TIMEOUT + STALL, service, request).await
}

async fn call_within<S>(
    bound: Duration,
    service: &S,
    request: ToolRequest,
) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    let call = async {
        let stream = service.clone().oneshot(request).await?;
        Ok(stream.collect().await)
    };
    tokio::time::timeout(bound, call)
        .await
        .unwrap_or_else(|_| panic!("the call took longer than {bound:?}"))
}

fn retry_after(result: &Result<Vec<ToolItem>, ToolError>) -> Option<Duration> {
    match result {
        Err(err) => match err.kind() {
            ErrorKind::RateLimited { retry_after } => retry_after,
            other => panic!("expected a rate-limit error, got {other:?}: {err}"),
        },
        Ok(_) => None,
    }
}

/// A cell a minute: however slow the machine, the quota refills far more
/// slowly than a test asks.
fn burst_then_per_minute(burst: u32) -> Quota {
    Quota::per_minute(NonZeroU32::MIN).allow_burst(NonZeroU32::new(burst).unwrap())
}

/// Buckets in the test's Redis under `prefix`, for a test in which Redis
/// stays up.
fn patient(manager: redis::aio::ConnectionManager, prefix: &str) -> RedisLimiter {
    RedisLimiter::new(manager)
        .prefix(prefix)
        .timeout(PATIENT_TIMEOUT)
}

/// Redis decided every call: none fell back to the local limiter.
fn assert_no_fallback(capture: &Capture) {
    let fallbacks = capture.events_with(MESSAGE);
    assert!(fallbacks.is_empty(), "Redis is up: {fallbacks:?}");
}

#[tokio::test]
async fn two_layers_on_one_redis_share_one_quota() {
    let Some(redis) = RedisServer::start("two_layers_on_one_redis_share_one_quota") else {
        return;
    };
    let capture = Capture::default();
    let _guard = capture.install();
    // Two layers that share no memory, each with its own connection: two
    // processes, as far as the quota can tell.
    let layer = |manager| {
        RateLimitLayer::global(burst_then_per_minute(10))
            .reject()
            .redis(patient(manager, "shared"))
    };
    let first = layer(redis.patient_manager().await).layer(ok_tool("a"));
    let second = layer(redis.patient_manager().await).layer(ok_tool("a"));

    let start = Instant::now();
    let mut admitted = [0, 0];
    let mut refused = [0, 0];
    for i in 0..40 {
        let service = if i % 2 == 0 { &first } else { &second };
        let result = call(service, request("a")).await;
        match retry_after(&result) {
            None => admitted[i % 2] += 1,
            Some(after) => {
                assert!(after > Duration::ZERO && after <= Duration::from_secs(60));
                refused[i % 2] += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    // The burst, and one call more per minute that went by (each minute
    // brings back one cell): two quotas would have admitted twenty.
    let most = 10 + (elapsed.as_secs() / 60) as usize;
    let total = admitted[0] + admitted[1];
    assert!(
        (10..=most).contains(&total),
        "{total} calls admitted in {elapsed:?}, {admitted:?} by layer"
    );
    assert!(
        admitted.iter().all(|&n| n > 0) && refused.iter().all(|&n| n > 0),
        "both layers took from and were refused by one quota: admitted {admitted:?}, refused {refused:?}"
    );
    assert_no_fallback(&capture);

    // Another prefix is another quota.
    let other = RateLimitLayer::global(burst_then_per_minute(10))
        .reject()
        .redis(patient(redis.patient_manager().await, "other"))
        .layer(ok_tool("a"));
    assert!(call(&other, request("a")).await.is_ok());
    assert_eq!(redis.keys().await, ["other:all", "shared:all"]);
}

#[tokio::test]
async fn per_tool_and_per_caller_keys_are_separate_buckets_in_redis() {
    let Some(redis) =
        RedisServer::start("per_tool_and_per_caller_keys_are_separate_buckets_in_redis")
    else {
        return;
    };
    let one_a_minute = Quota::per_minute(NonZeroU32::MIN);

    let per_tool = RateLimitLayer::per_tool(one_a_minute)
        .reject()
        .redis(patient(redis.patient_manager().await, "t"));
    let a = per_tool.layer(ok_tool("a"));
    let b = per_tool.layer(ok_tool("b"));
    let long_name = "x".repeat(200);
    let taken = Instant::now();
    assert!(call(&a, request("a")).await.is_ok());
    assert!(retry_after(&call(&a, request("a")).await).is_some());
    assert!(call(&b, request("b")).await.is_ok(), "b has its own bucket");
    assert!(call(&a, request(&long_name)).await.is_ok());

    let per_caller = RateLimitLayer::per_caller::<Caller>(one_a_minute)
        .reject()
        .redis(patient(redis.patient_manager().await, "c"))
        .layer(ok_tool("a"));
    let from = |who: &str| request("a").with_extension(Caller(who.to_owned()));
    assert!(call(&per_caller, from("alice")).await.is_ok());
    let refused = call(&per_caller, from("alice")).await;
    assert!(retry_after(&refused).is_some());
    assert!(
        refused.unwrap_err().message().contains("this caller"),
        "the message names the bucket as the local limit does"
    );
    assert!(call(&per_caller, from("bob")).await.is_ok());
    assert!(call(&per_caller, from(&"m".repeat(10_000))).await.is_ok());
    assert!(call(&per_caller, request("a")).await.is_ok());
    assert!(retry_after(&call(&per_caller, request("a")).await).is_some());

    let keys = redis.keys().await;
    let callers: Vec<&String> = keys.iter().filter(|k| k.starts_with("c:caller:")).collect();
    assert_eq!(callers.len(), 3, "{keys:?}");
    for key in &callers {
        let hash = &key["c:caller:".len()..];
        assert!(
            hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "a caller is 128 bits of hash, however long: {key}"
        );
    }
    let hashed: Vec<&String> = keys.iter().filter(|k| k.starts_with("t:tool:#")).collect();
    assert!(
        hashed.len() == 1 && hashed[0].len() == "t:tool:#".len() + 32,
        "a long tool name is a hash: {keys:?}"
    );
    let plain: Vec<&str> = keys
        .iter()
        .filter(|k| !k.starts_with("c:caller:") && !k.starts_with("t:tool:#"))
        .map(String::as_str)
        .collect();
    assert_eq!(plain, ["c:anonymous", "t:tool:a", "t:tool:b"]);
    // Each key lives until its bucket is full again: a minute from the
    // cell taken, less the time gone by since.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("t:tool:a")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let since = i64::try_from(taken.elapsed().as_millis()).unwrap();
    assert!(
        (60_000 - since - 2..=60_000).contains(&ttl),
        "{ttl} ms, {since} ms after the cell was taken"
    );
}

#[tokio::test]
async fn model_calls_take_from_the_bucket_of_the_model_they_name() {
    let Some(redis) = RedisServer::start("model_calls_take_from_the_bucket_of_the_model_they_name")
    else {
        return;
    };
    let turns = (0..4).map(|_| Turn::new().text("ok"));
    let model = ServiceBuilder::new()
        .layer(
            RateLimitLayer::per_tool(Quota::per_minute(NonZeroU32::MIN))
                .reject()
                .redis(patient(redis.patient_manager().await, "m")),
        )
        .service(ScriptedModel::new(turns));
    let ask = |name: Option<&str>| {
        let request = ChatRequest::new(vec![Message::user("hi")]);
        match name {
            Some(name) => request.with_model(name),
            None => request,
        }
    };
    let within = |request| tokio::time::timeout(PATIENCE, model.clone().oneshot(request));
    assert!(within(ask(Some("gpt-x"))).await.unwrap().is_ok());
    let err = within(ask(Some("gpt-x"))).await.unwrap().err();
    assert!(
        matches!(
            err.as_ref().map(|e| e.kind()),
            Some(ErrorKind::RateLimited { .. })
        ),
        "{err:?}"
    );
    assert!(err.unwrap().message().contains("model `gpt-x`"));
    assert!(within(ask(Some("other one"))).await.unwrap().is_ok());
    assert!(within(ask(None)).await.unwrap().is_ok());
    let keys = redis.keys().await;
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert_eq!(keys[0], "m:model");
    assert!(keys[1].starts_with("m:model:#"), "{keys:?}");
    assert_eq!(keys[2], "m:model:gpt-x");
}

#[tokio::test]
async fn wait_mode_sleeps_for_the_time_redis_says_then_admits() {
    let Some(redis) = RedisServer::start("wait_mode_sleeps_for_the_time_redis_says_then_admits")
    else {
        return;
    };
    let capture = Capture::default();
    let _guard = capture.install();
    let manager = redis.patient_manager().await;

    // A call that may not wait as long as Redis says is refused at once, and
    // told how long. A cell a minute: whatever the machine's speed, the
    // wait is longer than the 100 ms the call may wait.
    let a_minute = Quota::per_minute(NonZeroU32::MIN);
    let taker = RateLimitLayer::global(a_minute)
        .reject()
        .redis(patient(manager.clone(), "r"))
        .layer(ok_tool("a"));
    let impatient = RateLimitLayer::global(a_minute)
        .wait_at_most(Duration::from_millis(100))
        .redis(patient(manager.clone(), "r"))
        .layer(ok_tool("a"));
    assert!(call(&taker, request("a")).await.is_ok());
    let refused = call(&impatient, request("a")).await;
    let after = retry_after(&refused).expect("refused: the wait is longer than it may wait");
    assert!(
        after > Duration::from_millis(100) && after <= Duration::from_secs(60),
        "{after:?}"
    );
    assert!(refused
        .unwrap_err()
        .message()
        .contains("more than the 100 ms"));

    // A call that may wait: it asks, sleeps as long as Redis says, and asks
    // once more. Should the machine stall for a whole period between the
    // taker's call and the waiter's, the cell is back before the waiter
    // asks and it is admitted at its first ask, as it should: that round
    // proves nothing, and another bucket is tried.
    let period = Duration::from_millis(300);
    let quota = Quota::with_period(period).unwrap();
    for round in 1..=5 {
        let prefix = format!("w{round}");
        let taker = RateLimitLayer::global(quota)
            .reject()
            .redis(patient(manager.clone(), &prefix))
            .layer(ok_tool("a"));
        // Its own in-process limiter has never seen a call: only Redis can
        // make it wait.
        let waiter = RateLimitLayer::global(quota)
            .wait()
            .redis(patient(manager.clone(), &prefix))
            .layer(ok_tool("a"));

        let asked = redis.command_calls("evalsha").await;
        let start = Instant::now();
        assert!(call(&taker, request("a")).await.is_ok());
        assert!(call(&waiter, request("a")).await.is_ok());
        let waited = start.elapsed();
        let asks = redis.command_calls("evalsha").await - asked;
        assert!(
            waited >= period - Duration::from_millis(5),
            "admitted {waited:?} after the cell was taken; the period is {period:?}"
        );
        if asks == 2 {
            eprintln!("round {round}: the cell was back before the waiter asked ({waited:?})");
            continue;
        }
        assert_eq!(
            asks, 3,
            "the taker asked; the waiter asked, slept as long as Redis said, and asked once more"
        );
        // Admitted when the cell came back: within the period and what a
        // stall may add to it.
        assert!(
            waited < period + STALL,
            "admitted {waited:?} after the cell was taken; the period is {period:?}"
        );
        assert_no_fallback(&capture);
        return;
    }
    panic!("five rounds in a row stalled for a whole {period:?} period between two calls");
}

/// Builds the stack, with its buckets under `prefix` and a round number,
/// until its first call is decided by Redis, with no fallback. On a machine
/// stalled past the command timeout, that call falls back, as it should,
/// and the round proves nothing (the stack's own limiter has counted it,
/// and Redis may have too): then a fresh stack is built, under another
/// prefix. Answers the stack and the capture of what it logs from then on.
async fn decided_by_redis<S>(
    prefix: &str,
    build: impl Fn(String) -> S,
) -> (S, Capture, DefaultGuard)
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    for round in 1..=5 {
        let capture = Capture::default();
        let guard = capture.install();
        let service = build(format!("{prefix}{round}"));
        let start = Instant::now();
        let result = bounded_call(&service, request("a")).await;
        let fallbacks = capture.events_with(MESSAGE);
        if fallbacks.is_empty() {
            assert!(result.is_ok(), "{result:?}");
            return (service, capture, guard);
        }
        assert!(
            start.elapsed() >= COMMAND_TIMEOUT,
            "Redis is up, yet the call fell back at once: {fallbacks:?}"
        );
    }
    panic!("five calls in a row waited longer than the command timeout for a Redis that is up");
}

#[tokio::test]
async fn a_dead_redis_fails_open_to_the_local_limiter_within_the_timeout() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_fails_open_to_the_local_limiter_within_the_timeout")
    else {
        return;
    };
    let manager = redis.manager().await;
    let (service, capture, _guard) = decided_by_redis("open", |prefix| {
        ServiceBuilder::new()
            .layer(TraceLayer::new())
            .layer(
                RateLimitLayer::global(Quota::per_minute(NonZeroU32::new(3).unwrap()))
                    .reject()
                    .redis(RedisLimiter::new(manager.clone()).prefix(prefix)),
            )
            .service(ok_tool("a"))
    })
    .await;

    redis.kill();
    // The in-process limiter, with the same quota, decides now: its burst
    // of 3 (it counts only the calls it decides), then a refusal.
    for _ in 0..3 {
        assert!(bounded_call(&service, request("a")).await.is_ok());
    }
    let refused = bounded_call(&service, request("a")).await;
    assert!(retry_after(&refused).is_some(), "{refused:?}");

    assert!(capture
        .events_with(MESSAGE)
        .iter()
        .all(|e| e.level == tracing::Level::WARN));
    let events = capture.events_with_parent(MESSAGE);
    assert_eq!(events.len(), 4, "one warning per call: {events:?}");
    for (parent, fields) in &events {
        assert_eq!(*parent, Some("execute_tool"), "on the call's span");
        assert_eq!(fields["toolstack.rate_limit.store"], "redis");
        assert_eq!(fields["toolstack.rate_limit.fallback"], "open");
    }
}

const MESSAGE: &str = "the shared rate limit's store is unreachable";

#[tokio::test]
async fn a_dead_redis_fails_closed_as_unavailable_within_the_timeout() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_fails_closed_as_unavailable_within_the_timeout")
    else {
        return;
    };
    let manager = redis.manager().await;
    let (service, capture, _guard) = decided_by_redis("closed", |prefix| {
        ServiceBuilder::new()
            .layer(TraceLayer::new())
            .layer(
                RateLimitLayer::per_tool(Quota::per_minute(NonZeroU32::new(3).unwrap())).redis(
                    RedisLimiter::new(manager.clone())
                        .prefix(prefix)
                        .fail_closed(),
                ),
            )
            .service(ok_tool("a"))
    })
    .await;

    redis.kill();
    for _ in 0..3 {
        let err = bounded_call(&service, request("a")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert_eq!(
            err.message(),
            "the shared rate limit for tool `a` could not be checked: its store (redis) is unreachable; the tool never started"
        );
    }
    assert!(capture
        .events_with(MESSAGE)
        .iter()
        .all(|e| e.level == tracing::Level::WARN));
    let events = capture.events_with_parent(MESSAGE);
    assert_eq!(events.len(), 3, "{events:?}");
    for (parent, fields) in &events {
        assert_eq!(*parent, Some("execute_tool"));
        assert_eq!(fields["toolstack.rate_limit.fallback"], "closed");
    }
}

#[tokio::test]
async fn a_redis_that_never_answers_costs_one_timeout_then_none_until_the_recheck() {
    let capture = Capture::default();
    let _guard = capture.install();
    // A server that accepts connections and never says a word: only the
    // timeouts can end a call.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in silent.incoming().take(8) {
            open.push(stream);
        }
    });
    // The manager's own timeouts are far past the bound of a call: only
    // the layer's can end it in time.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(60)))
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_number_of_retries(1);
    // Lazy: a process starts whether Redis answers or not.
    let manager = redis::aio::ConnectionManager::new_lazy_with_config(
        redis::Client::open(url).unwrap(),
        config,
    )
    .unwrap();
    let service = RateLimitLayer::global(Quota::per_minute(NonZeroU32::new(2).unwrap()))
        .reject()
        .redis(
            RedisLimiter::new(manager)
                .timeout(COMMAND_TIMEOUT)
                // No recheck within the test, however slow the machine.
                .recheck_after(Duration::from_secs(3600)),
        )
        .layer(ok_tool("a"));

    let start = Instant::now();
    assert!(bounded_call(&service, request("a")).await.is_ok());
    assert!(
        start.elapsed() >= COMMAND_TIMEOUT,
        "the first call waited for Redis"
    );
    // Redis is left alone now: the next calls fall back without asking it
    // (so without waiting for it), the local limiter deciding.
    assert!(bounded_call(&service, request("a")).await.is_ok());
    assert!(retry_after(&bounded_call(&service, request("a")).await).is_some());
    let why: Vec<String> = capture
        .events_with(MESSAGE)
        .iter()
        .map(|e| e.field("error").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        why,
        [
            "no answer within 250 ms",
            "unreachable a moment ago; not asked again yet",
            "unreachable a moment ago; not asked again yet",
        ],
        "one timeout, then no question to Redis"
    );
    drop(held);
}

/// A deadline that passes while the call sleeps for the quota Redis said
/// to wait for ends it as rate limited — the tool never started — not as
/// the tool's timeout.
#[tokio::test]
async fn a_deadline_that_passes_while_waiting_for_redis_quota_says_the_tool_never_started() {
    let Some(redis) = RedisServer::start(
        "a_deadline_that_passes_while_waiting_for_redis_quota_says_the_tool_never_started",
    ) else {
        return;
    };
    let manager = redis.patient_manager().await;
    // A cell a minute, and calls that may wait that long: the second call
    // sleeps for most of a minute, far past its 300 ms deadline.
    let a_minute = Quota::per_minute(NonZeroU32::MIN);
    let stack = |prefix: &str| {
        ServiceBuilder::new()
            .layer(
                toolstack_layers::timeout::TimeoutLayer::new().deadline(Duration::from_millis(300)),
            )
            .layer(
                RateLimitLayer::global(a_minute)
                    .wait_at_most(Duration::from_secs(120))
                    .redis(patient(manager.clone(), prefix)),
            )
            .service(ok_tool("a"))
    };
    let service = stack("deadline");
    assert!(call(&service, request("a")).await.is_ok());
    let Err(err) = call(&service, request("a")).await else {
        panic!("the second call cannot have been admitted");
    };
    assert!(
        matches!(
            err.kind(),
            ErrorKind::RateLimited {
                retry_after: Some(_)
            }
        ),
        "{err:?}"
    );
    assert!(
        err.message().starts_with("waited ")
            && err.message().contains(
                "for the rate limit's quota over 1 attempt, until its deadline of 300ms passed; the tool never started"
            ),
        "{err}"
    );
}
