//! The rate limit with its buckets in a real Redis (`redis-server`, started
//! per test on a free loopback port and killed at its end): one quota for
//! layers that do not share memory (two connection managers, as two
//! processes have), the keys in Redis, waiting for the time Redis says,
//! and what a call does when Redis dies — never more than the command
//! timeout.
//!
//! Real time, against a real server: every wait is bounded, and conditions
//! are awaited, not slept for.

#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis_server::{RedisServer, COMMAND_TIMEOUT};
use support::capture::Capture;
use toolstack::model::{ChatRequest, Message, ScriptedModel, Turn};
use toolstack::{tool, BoxTool, ErrorKind, ToolError, ToolItem, ToolRequest};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer, RedisLimiter};
use toolstack_layers::trace::TraceLayer;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_layer::Layer;

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

/// Calls once and reads the whole response, within two seconds (a call
/// that hangs fails its test).
async fn call<S>(service: &S, request: ToolRequest) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    call_within(Duration::from_secs(2), service, request).await
}

/// `call`, which must be over within the command timeout and a margin.
async fn bounded_call<S>(service: &S, request: ToolRequest) -> Result<Vec<ToolItem>, ToolError>
where
    S: Service<ToolRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = ToolItem>,
{
    call_within(
        COMMAND_TIMEOUT + Duration::from_millis(150),
        service,
        request,
    )
    .await
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

fn burst_then_per_second(burst: u32) -> Quota {
    Quota::per_second(NonZeroU32::MIN).allow_burst(NonZeroU32::new(burst).unwrap())
}

#[tokio::test]
async fn two_layers_on_one_redis_share_one_quota() {
    let Some(redis) = RedisServer::start("two_layers_on_one_redis_share_one_quota") else {
        return;
    };
    // Two layers that share no memory, each with its own connection: two
    // processes, as far as the quota can tell.
    let layer = |manager| {
        RateLimitLayer::global(burst_then_per_second(10))
            .reject()
            .redis(RedisLimiter::new(manager).prefix("shared"))
    };
    let first = layer(redis.manager().await).layer(ok_tool("a"));
    let second = layer(redis.manager().await).layer(ok_tool("a"));

    let start = Instant::now();
    let mut admitted = [0, 0];
    let mut refused = [0, 0];
    for i in 0..40 {
        let service = if i % 2 == 0 { &first } else { &second };
        let result = call(service, request("a")).await;
        match retry_after(&result) {
            None => admitted[i % 2] += 1,
            Some(after) => {
                assert!(after > Duration::ZERO && after <= Duration::from_secs(1));
                refused[i % 2] += 1;
            }
        }
    }
    let elapsed = start.elapsed();
    // The burst, and one call more per second that went by (each second
    // brings back one cell).
    let most = 10 + elapsed.as_secs() as usize;
    let total = admitted[0] + admitted[1];
    assert!(
        (10..=most).contains(&total),
        "{total} calls admitted in {elapsed:?}, {admitted:?} by layer"
    );
    assert!(
        admitted.iter().all(|&n| n > 0) && refused.iter().all(|&n| n > 0),
        "both layers took from and were refused by one quota: admitted {admitted:?}, refused {refused:?}"
    );

    // Another prefix is another quota.
    let other = RateLimitLayer::global(burst_then_per_second(10))
        .reject()
        .redis(RedisLimiter::new(redis.manager().await).prefix("other"))
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
        .redis(RedisLimiter::new(redis.manager().await).prefix("t"));
    let a = per_tool.layer(ok_tool("a"));
    let b = per_tool.layer(ok_tool("b"));
    let long_name = "x".repeat(200);
    assert!(call(&a, request("a")).await.is_ok());
    assert!(retry_after(&call(&a, request("a")).await).is_some());
    assert!(call(&b, request("b")).await.is_ok(), "b has its own bucket");
    assert!(call(&a, request(&long_name)).await.is_ok());

    let per_caller = RateLimitLayer::per_caller::<Caller>(one_a_minute)
        .reject()
        .redis(RedisLimiter::new(redis.manager().await).prefix("c"))
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
    // Each key lives until its bucket is full again: about a minute here.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("t:tool:a")
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    assert!((50_000..=60_000).contains(&ttl), "{ttl} ms");
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
                .redis(RedisLimiter::new(redis.manager().await).prefix("m")),
        )
        .service(ScriptedModel::new(turns));
    let ask = |name: Option<&str>| {
        let request = ChatRequest::new(vec![Message::user("hi")]);
        match name {
            Some(name) => request.with_model(name),
            None => request,
        }
    };
    let within =
        |request| tokio::time::timeout(Duration::from_secs(2), model.clone().oneshot(request));
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
    let period = Duration::from_millis(300);
    let quota = Quota::with_period(period).unwrap();
    let shared = |manager| RedisLimiter::new(manager).prefix("w");
    let taker = RateLimitLayer::global(quota)
        .reject()
        .redis(shared(redis.manager().await))
        .layer(ok_tool("a"));
    // Its own in-process limiter has never seen a call: only Redis can
    // make it wait.
    let waiter = RateLimitLayer::global(quota)
        .wait()
        .redis(shared(redis.manager().await))
        .layer(ok_tool("a"));
    let impatient = RateLimitLayer::global(quota)
        .wait_at_most(Duration::from_millis(100))
        .redis(shared(redis.manager().await))
        .layer(ok_tool("a"));

    let start = Instant::now();
    assert!(call(&taker, request("a")).await.is_ok());
    let refused = call(&impatient, request("a")).await;
    let after = retry_after(&refused).expect("refused: the wait is longer than it may wait");
    assert!(
        after > Duration::from_millis(100) && after <= period,
        "{after:?}"
    );
    assert!(refused
        .unwrap_err()
        .message()
        .contains("more than the 100 ms"));

    let asked = redis.command_calls("evalsha").await;
    assert!(call(&waiter, request("a")).await.is_ok());
    let waited = start.elapsed();
    assert!(
        waited >= period - Duration::from_millis(5) && waited < period + Duration::from_millis(250),
        "admitted {waited:?} after the cell was taken; the period is {period:?}"
    );
    assert_eq!(
        redis.command_calls("evalsha").await - asked,
        2,
        "the waiter asked, slept as long as Redis said, and asked once more"
    );
}

#[tokio::test]
async fn a_dead_redis_fails_open_to_the_local_limiter_within_the_timeout() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_fails_open_to_the_local_limiter_within_the_timeout")
    else {
        return;
    };
    let capture = Capture::default();
    let _guard = capture.install();
    let service = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .layer(
            RateLimitLayer::global(Quota::per_minute(NonZeroU32::new(3).unwrap()))
                .reject()
                .redis(RedisLimiter::new(redis.manager().await).prefix("open")),
        )
        .service(ok_tool("a"));
    assert!(bounded_call(&service, request("a")).await.is_ok());
    assert!(capture.events_with(MESSAGE).is_empty());

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
    let capture = Capture::default();
    let _guard = capture.install();
    let service = ServiceBuilder::new()
        .layer(TraceLayer::new())
        .layer(
            RateLimitLayer::per_tool(Quota::per_minute(NonZeroU32::new(3).unwrap())).redis(
                RedisLimiter::new(redis.manager().await)
                    .prefix("closed")
                    .fail_closed(),
            ),
        )
        .service(ok_tool("a"));
    assert!(bounded_call(&service, request("a")).await.is_ok());

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
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)))
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
                .recheck_after(Duration::from_secs(30)),
        )
        .layer(ok_tool("a"));

    let start = Instant::now();
    assert!(bounded_call(&service, request("a")).await.is_ok());
    assert!(
        start.elapsed() >= COMMAND_TIMEOUT,
        "the first call waited for Redis"
    );
    // Redis is left alone now: the next calls fall back at once.
    let start = Instant::now();
    assert!(bounded_call(&service, request("a")).await.is_ok());
    assert!(retry_after(&bounded_call(&service, request("a")).await).is_some());
    assert!(
        start.elapsed() < COMMAND_TIMEOUT / 5,
        "{:?}: the calls did not wait for Redis again",
        start.elapsed()
    );
    drop(held);
}
