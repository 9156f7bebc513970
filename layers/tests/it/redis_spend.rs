//! The spend limit with its counters in a real Redis (`redis-server`,
//! started per test on a free loopback port and killed at its end): two
//! layers with their own connections, as two replicas, count in the same
//! counters; the keys and their times to live; and what a call does when
//! Redis dies, open or closed — never waiting past the command timeout.

use crate::redis_server;

use std::time::Instant;

use futures_util::StreamExt;
use redis_server::{eventually, RedisServer, COMMAND_TIMEOUT, PATIENCE, PATIENT_TIMEOUT, STALL};
use toolstack::model::{
    thousands, ChatRequest, Cost, Message, ModelDelta, Price, Prices, RunId, ScriptedModel, Turn,
    Usage,
};
use toolstack::{ErrorKind, ToolError};
use toolstack_layers::spend::{Limit, RedisSpend, SpendLimit, SpendLimitLayer, Window};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct User(&'static str);

fn prices() -> Prices {
    Prices::builder()
        .model("m", Price::per_million_tokens(1.0, 2.0))
        .build()
        .unwrap()
}

/// Answers of 100,000 prompt and 50,000 completion tokens ($0.20).
fn model(turns: usize) -> ScriptedModel {
    ScriptedModel::new(
        (0..turns).map(|_| Turn::new().text("ok").usage(Usage::new(100_000, 50_000))),
    )
}

fn request(user: &'static str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
        .with_model("m")
        .with_extension(User(user))
        .with_extension(RunId::new("run-1"))
}

async fn call<S>(model: &S, request: ChatRequest) -> Result<Vec<ModelDelta>, ToolError>
where
    S: Service<ChatRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = Result<ModelDelta, ToolError>>,
{
    let answer = model.clone().oneshot(request).await?;
    answer.collect::<Vec<_>>().await.into_iter().collect()
}

#[tokio::test]
async fn two_replicas_count_in_the_same_counters_in_redis() {
    let Some(redis) = RedisServer::start("two_replicas_count_in_the_same_counters_in_redis") else {
        return;
    };
    let replica = |manager| {
        SpendLimitLayer::new(prices())
            .per_caller::<User>(Window::Day, Limit::cost(Cost::from_cents(30)))
            .per_run(Limit::tokens(1_000_000))
            .redis(
                RedisSpend::new(manager)
                    .prefix("t")
                    .timeout(PATIENT_TIMEOUT),
            )
    };
    let (a_inner, b_inner) = (model(3), model(3));
    let a = replica(redis.patient_manager().await).layer(a_inner.clone());
    let b = replica(redis.patient_manager().await).layer(b_inner.clone());

    // $0.20 on replica a, $0.40 with b's: over alice's $0.30, for both.
    call(&a, request("alice")).await.unwrap();
    call(&b, request("alice")).await.unwrap();
    for replica in [&a, &b] {
        let err = call(replica, request("alice")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SpendLimited);
        assert!(
            err.message()
                .starts_with("this caller has spent $0.40 of its $0.30 limit for today"),
            "{}",
            err.message()
        );
    }
    assert_eq!((a_inner.turns_played(), b_inner.turns_played()), (1, 1));
    // Bob has his own counter, on either replica.
    call(&b, request("bob")).await.unwrap();

    let keys = redis.keys().await;
    assert_eq!(keys.len(), 3, "alice's day, bob's day, the run: {keys:?}");
    let day = keys.iter().filter(|k| k.starts_with("t:caller:")).count();
    assert_eq!(day, 2, "{keys:?}");
    let run = keys.iter().find(|k| k.starts_with("t:run:")).unwrap();
    assert_eq!(run.len(), "t:run:".len() + 32, "a hashed run id: {run}");
    let alice = keys
        .iter()
        .find(|k| k.starts_with("t:caller:") && k.contains(":day:"))
        .unwrap();
    let mut connection = redis.connection().await;
    let (tokens, nanos): (u64, u64) = redis::cmd("HMGET")
        .arg(run)
        .arg("tokens")
        .arg("nanos")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(
        (tokens, nanos),
        (450_000, 600_000_000),
        "three calls of the run"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(alice)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        (1..=86_400 + 300).contains(&ttl),
        "a day's counter lives until the day ends: {ttl}"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(run)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(
        (86_000..=86_400).contains(&ttl),
        "a run's lives a day after its last call: {ttl}"
    );
}

/// Two replicas on one Redis (and their models); the first spends $0.20
/// for alice, then Redis dies.
async fn replicas_then_redis_dies(
    redis: &mut RedisServer,
    open: bool,
) -> [(SpendLimit<ScriptedModel>, ScriptedModel); 2] {
    let replica = |manager| {
        let store = RedisSpend::new(manager).prefix("t");
        let store = if open {
            store.fail_open()
        } else {
            store.fail_closed()
        };
        SpendLimitLayer::new(prices())
            .per_caller::<User>(Window::Day, Limit::cost(Cost::from_cents(20)))
            .redis(store)
    };
    let (a, b) = (model(5), model(5));
    let a = (replica(redis.manager().await).layer(a.clone()), a);
    let b = (replica(redis.manager().await).layer(b.clone()), b);
    call(&a.0, request("alice")).await.unwrap();
    redis.kill();
    [a, b]
}

async fn bounded<T>(call: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(COMMAND_TIMEOUT + STALL, call)
        .await
        .expect("a call is never held longer than the command timeout");
    assert!(started.elapsed() < COMMAND_TIMEOUT + STALL);
    out
}

#[tokio::test]
async fn a_dead_redis_fails_open_to_each_replicas_own_counts() {
    let Some(mut redis) = RedisServer::start("a_dead_redis_fails_open_to_each_replicas_own_counts")
    else {
        return;
    };
    let [(a, _), (b, _)] = replicas_then_redis_dies(&mut redis, true).await;
    // Replica a counted alice's $0.20 itself; b never saw it.
    let err = bounded(call(&a, request("alice"))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited, "{err}");
    bounded(call(&b, request("alice")))
        .await
        .expect("b's own count is nothing");
    let err = bounded(call(&b, request("alice"))).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::SpendLimited,
        "b counted its own call: {err}"
    );
}

#[tokio::test]
async fn a_dead_redis_fails_closed_as_unavailable_without_calling_the_model() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_fails_closed_as_unavailable_without_calling_the_model")
    else {
        return;
    };
    let [_, (b, b_inner)] = replicas_then_redis_dies(&mut redis, false).await;
    for _ in 0..3 {
        let err = bounded(call(&b, request("bob"))).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert_eq!(
            err.message(),
            "the spend limit could not be checked: its store (redis) is unreachable; the model was not called"
        );
    }
    assert_eq!(b_inner.turns_played(), 0, "the model was not called");
}

#[tokio::test]
async fn an_answer_dropped_early_still_adds_its_usage_to_redis() {
    let Some(redis) = RedisServer::start("an_answer_dropped_early_still_adds_its_usage_to_redis")
    else {
        return;
    };
    // Usage first, then an answer that never ends.
    let endless = tower::service_fn(|_: ChatRequest| {
        let answer = futures_util::stream::iter([Ok(ModelDelta::Usage(Usage::new(100, 0)))])
            .chain(futures_util::stream::pending());
        std::future::ready(Ok::<_, ToolError>(answer))
    });
    // Each call reserves 5 + 40 tokens: a's leaves room for b's.
    let replica = |manager| {
        SpendLimitLayer::new(prices())
            .per_caller::<User>(Window::Hour, Limit::tokens(100))
            .reserve_output_tokens(40)
            .redis(
                RedisSpend::new(manager)
                    .prefix("t")
                    .timeout(PATIENT_TIMEOUT),
            )
    };
    let a = replica(redis.patient_manager().await).layer(endless);
    // b's own answers spend nothing: only a's usage can reach its limit.
    let free = ScriptedModel::new((0..10_000).map(|_| Turn::new().usage(Usage::default())));
    let b = replica(redis.patient_manager().await).layer(free);
    let mut answer = a.clone().oneshot(request("alice")).await.unwrap();
    assert!(answer.next().await.is_some());
    call(&b, request("alice")).await.unwrap();
    drop(answer);
    // The drop cannot wait for Redis: a task adds it, and replica b sees it.
    eventually(PATIENCE, "the dropped answer's usage in Redis", || {
        let b = b.clone();
        async move {
            matches!(
                call(&b, request("alice")).await,
                Err(err) if err.kind() == ErrorKind::SpendLimited
            )
        }
    })
    .await;
}

/// A model whose answer says "…" and never ends.
fn endless() -> impl Service<
    ChatRequest,
    Response = impl futures_util::Stream<Item = Result<ModelDelta, ToolError>>,
    Error = ToolError,
    Future = impl Send,
> + Clone {
    tower::service_fn(|_: ChatRequest| {
        let answer = futures_util::stream::iter([Ok(ModelDelta::Text("…".into()))])
            .chain(futures_util::stream::pending());
        std::future::ready(Ok::<_, ToolError>(answer))
    })
}

#[tokio::test]
async fn a_reservation_in_redis_holds_for_every_replica_until_it_is_given_back() {
    let Some(redis) = RedisServer::start("a_reservation_in_redis_holds_for_every_replica") else {
        return;
    };
    // 5 prompt tokens and 95 written: a whole run's limit per call.
    let replica = |manager| {
        SpendLimitLayer::new(prices())
            .per_run(Limit::tokens(100))
            .reserve_output_tokens(95)
            .redis(
                RedisSpend::new(manager)
                    .prefix("t")
                    .timeout(PATIENT_TIMEOUT),
            )
    };
    let a = replica(redis.patient_manager().await).layer(endless());
    let b = replica(redis.patient_manager().await).layer(endless());
    let answer = a.clone().oneshot(request("alice")).await.unwrap();
    // The counter and its reservations live as long as the reservation
    // (10 minutes) at least: a long call keeps what it holds.
    let mut connection = redis.connection().await;
    for key in redis.keys().await {
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .expect("TTL");
        assert!(ttl > 590, "{key} expires in {ttl} s");
    }
    // Nothing spent yet, but a's call holds the run's 100 tokens.
    let err = b.clone().oneshot(request("alice")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(
        err.message(),
        "this run has used 0 of its 100 tokens, and calls in flight have reserved 100: \
         what is left cannot take this call's prompt (about 5 tokens); the model was not called"
    );
    drop(answer);
    // Given back by a task (a drop cannot wait): b's call then goes.
    eventually(PATIENCE, "a's reservation given back", || {
        let b = b.clone();
        async move { b.oneshot(request("alice")).await.is_ok() }
    })
    .await;
    // Every answer was dropped: no reservation is left in Redis.
    eventually(PATIENCE, "no reservation left", || {
        let redis = &redis;
        async move { !redis.keys().await.iter().any(|k| k.ends_with(":r")) }
    })
    .await;
}

#[tokio::test]
async fn the_reservations_of_a_process_that_died_expire() {
    let Some(redis) = RedisServer::start("the_reservations_of_a_process_that_died_expire") else {
        return;
    };
    let replica = |manager| {
        SpendLimitLayer::new(prices())
            .per_run(Limit::tokens(100))
            .reserve_output_tokens(95)
            .redis(
                RedisSpend::new(manager)
                    .prefix("t")
                    .timeout(PATIENT_TIMEOUT)
                    .reservation_ttl(STALL),
            )
    };
    let a = replica(redis.patient_manager().await).layer(endless());
    let b = replica(redis.patient_manager().await).layer(endless());
    // a's process "dies": its answer is never dropped, never settled.
    std::mem::forget(a.clone().oneshot(request("alice")).await.unwrap());
    // Checked at once: a TTL of seconds leaves a stalled machine room.
    assert!(b.clone().oneshot(request("alice")).await.is_err(), "held");
    // Redis's clock, not tokio's: asked again until the TTL has passed
    // (and failing if the reservation never expires).
    eventually(PATIENCE, "the dead process's reservation expired", || {
        let b = b.clone();
        async move { b.oneshot(request("alice")).await.is_ok() }
    })
    .await;
}

type Answer = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;

/// A model that writes `deltas` pieces of 40 bytes (10 tokens each) and
/// reports nothing.
fn writer(
    deltas: usize,
) -> impl Service<ChatRequest, Response = Answer, Error = ToolError> + Clone {
    tower::service_fn(move |_: ChatRequest| {
        let text = (0..deltas).map(|_| Ok(ModelDelta::Text("x".repeat(40))));
        let answer: Answer = futures_util::stream::iter(text).boxed();
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    })
}

#[tokio::test]
async fn answers_on_two_replicas_ask_redis_for_more_and_are_cut_at_the_shared_limit() {
    let Some(redis) = RedisServer::start("answers_on_two_replicas_are_cut_at_the_shared_limit")
    else {
        return;
    };
    // 1,000 tokens for the run, 50 output tokens reserved per call: each
    // answer (2,000 tokens' worth) asks Redis for more as it writes.
    let replica = |manager| {
        SpendLimitLayer::new(prices())
            .per_run(Limit::tokens(1_000))
            .reserve_output_tokens(50)
            .redis(
                RedisSpend::new(manager)
                    .prefix("t")
                    .timeout(PATIENT_TIMEOUT),
            )
    };
    let a = replica(redis.patient_manager().await).layer(writer(200));
    let b = replica(redis.patient_manager().await).layer(writer(200));
    let read = |answer: Answer| async move {
        let items: Vec<_> = answer.collect().await;
        let written: u64 = items
            .iter()
            .filter_map(|item| match item {
                Ok(ModelDelta::Text(text)) => Some(text.len() as u64 / 4),
                _ => None,
            })
            .sum();
        (written, items.last().cloned())
    };
    let (one, two) = tokio::join!(
        async { read(a.clone().oneshot(request("alice")).await.unwrap().boxed()).await },
        async { read(b.clone().oneshot(request("alice")).await.unwrap().boxed()).await },
    );
    for (_, last) in [&one, &two] {
        let Some(Err(err)) = last else {
            panic!("cut: {last:?}");
        };
        assert_eq!(err.kind(), ErrorKind::SpendLimited, "{err}");
        assert!(
            err.message().contains("the answer was cut after about"),
            "{err}"
        );
    }
    // Two prompts of 5 and what was written: at most a piece (10 tokens)
    // each past the limit.
    let spent = 10 + one.0 + two.0;
    assert!((960..=1_020).contains(&spent), "spent {spent}");
    // Every reservation, first and more, was given back.
    eventually(PATIENCE, "no reservation left", || {
        let redis = &redis;
        async move { !redis.keys().await.iter().any(|k| k.ends_with(":r")) }
    })
    .await;
    // What Redis counted is what was written.
    let err = a.oneshot(request("alice")).await.unwrap_err();
    assert!(
        err.message().starts_with(&format!(
            "this run has used {} of its 1,000 tokens",
            thousands(spent)
        )),
        "{err}"
    );
}
