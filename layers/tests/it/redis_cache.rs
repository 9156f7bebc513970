//! The result cache with its entries in a real Redis (`redis-server`,
//! started per test on a free loopback port and killed at its end):
//! results shared between layers that share no memory, expiry in Redis,
//! the size bound both ways, corrupt values read as misses, and a dead
//! Redis that never fails or holds up a call.
//!
//! Real time, against a real server: every wait is bounded, and conditions
//! are awaited, not slept for. A stalled machine may slow any step down:
//! where Redis stays up, the stores wait for it patiently
//! ([`PATIENT_TIMEOUT`]), so that only a dead or silent Redis makes them
//! miss; bounds on time are the timeout a call may cost by design and
//! seconds of slack ([`STALL`]), never milliseconds; and a round that a
//! stall made prove nothing (an entry that expired, or a lookup that timed
//! out, while the test waited to be polled) is done again.

use crate::redis_server;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::{stream, StreamExt};
use redis::aio::ConnectionManager;
use redis_server::{eventually, RedisServer, COMMAND_TIMEOUT, PATIENCE, PATIENT_TIMEOUT, STALL};
use support::capture::Capture;
use toolstack::{
    tool, ToolAnnotations, ToolError, ToolItem, ToolOutput, ToolRequest, ToolStream, Toolbox,
};
use toolstack_layers::cache::{CacheLayer, CacheStore, Cached, RedisCacheStore};
use tower::ServiceExt;

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct Q {
    city: String,
}

/// A toolbox with one read-only tool, `weather`, that counts its runs in
/// `runs`, cached in `store`.
fn toolbox(runs: &Arc<AtomicUsize>, store: RedisCacheStore) -> Toolbox {
    let runs = Arc::clone(runs);
    let weather = tool::from_stream("weather", move |q: Q| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        stream::iter([
            Ok::<_, ToolError>(ToolOutput::text(format!("sunny in {}", q.city))),
            Ok(ToolOutput::json(
                serde_json::json!({"run": n, "temp": 21.5}),
            )),
        ])
    })
    .with_annotations(ToolAnnotations {
        read_only_hint: Some(true),
        ..Default::default()
    });
    Toolbox::new().layered(weather, CacheLayer::new(store))
}

/// Calls `weather` for `city` and reads the whole response, within
/// [`PATIENCE`] (a call that hangs fails its test).
async fn call(tools: &Toolbox, city: &str) -> Vec<ToolItem> {
    call_within(PATIENCE, tools, city).await
}

/// `call`, which must be over within the command timeout and what a
/// stalled machine may add to it.
async fn bounded_call(tools: &Toolbox, city: &str) -> Vec<ToolItem> {
    call_within(COMMAND_TIMEOUT + STALL, tools, city).await
}

async fn call_within(bound: Duration, tools: &Toolbox, city: &str) -> Vec<ToolItem> {
    let args = format!(r#"{{"city": "{city}"}}"#);
    let call = async {
        let stream: ToolStream = tools
            .clone()
            .oneshot(ToolRequest::new("weather", args))
            .await
            .expect("the call opens");
        stream.collect::<Vec<_>>().await
    };
    tokio::time::timeout(bound, call)
        .await
        .unwrap_or_else(|_| panic!("the call took longer than {bound:?}"))
}

fn is_hit(items: &[ToolItem]) -> bool {
    matches!(items.first(), Some(Ok(ToolOutput::Progress(p)))
        if p.message.as_deref().is_some_and(|m| m.starts_with("cached result")))
}

/// A store for a test in which Redis stays up.
fn store(manager: ConnectionManager) -> RedisCacheStore {
    RedisCacheStore::new(manager, Duration::from_secs(60))
        .prefix("cache")
        .timeout(PATIENT_TIMEOUT)
}

/// Waits until Redis holds `n` keys (a stored result is written after the
/// stream that produced it has ended).
async fn until_keys(redis: &RedisServer, n: usize) -> Vec<String> {
    eventually(PATIENCE, "the result reached Redis", || async {
        redis.keys().await.len() == n
    })
    .await;
    redis.keys().await
}

/// The keys of the store with `prefix`.
async fn keys_under(redis: &RedisServer, prefix: &str) -> Vec<String> {
    let mut keys = redis.keys().await;
    keys.retain(|key| {
        key.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(':'))
    });
    keys
}

#[tokio::test]
async fn a_result_one_layer_stored_is_replayed_by_another_from_redis() {
    let Some(redis) =
        RedisServer::start("a_result_one_layer_stored_is_replayed_by_another_from_redis")
    else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    // Two layers, two connections: two processes sharing one Redis.
    let first = toolbox(&runs, store(redis.patient_manager().await));
    let second = toolbox(&runs, store(redis.patient_manager().await));

    let fresh = call(&first, "Oslo").await;
    assert!(!is_hit(&fresh));
    let keys = until_keys(&redis, 1).await;
    let hash = keys[0].strip_prefix("cache:").expect("the prefix");
    assert!(
        hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "the key is the SHA-256 of the cache key: {}",
        keys[0]
    );

    let replayed = call(&second, "Oslo").await;
    assert!(is_hit(&replayed), "{replayed:?}");
    assert_eq!(replayed[1..], fresh[..], "the items, as the tool made them");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "served from Redis");
    assert!(is_hit(&call(&first, "Oslo").await));
    assert!(!is_hit(&call(&second, "Bergen").await));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_entry_expires_with_its_ttl_in_redis() {
    let Some(redis) = RedisServer::start("an_entry_expires_with_its_ttl_in_redis") else {
        return;
    };
    let manager = redis.patient_manager().await;
    let ttl = Duration::from_secs(1);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap();
    // Until it is a TTL old, the entry is in Redis with at most the TTL to
    // live, and a call is a hit. A round that takes longer (a stalled
    // machine) may find it gone already, as it should: it proves nothing,
    // and the next round starts afresh under another prefix.
    for round in 1..=5 {
        let prefix = format!("cache{round}");
        let runs = Arc::new(AtomicUsize::new(0));
        let tools = toolbox(
            &runs,
            RedisCacheStore::new(manager.clone(), ttl)
                .prefix(&prefix)
                .timeout(PATIENT_TIMEOUT),
        );
        let stored_after = Instant::now();
        assert!(!is_hit(&call(&tools, "Oslo").await));
        let young = || stored_after.elapsed() < ttl;
        eventually(PATIENCE, "the result reached Redis", || async {
            !keys_under(&redis, &prefix).await.is_empty() || !young()
        })
        .await;
        let keys = keys_under(&redis, &prefix).await;
        let pttl: i64 = match &keys[..] {
            [key] => redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut redis.connection().await)
                .await
                .unwrap(),
            _ => -2,
        };
        let hit = is_hit(&call(&tools, "Oslo").await);
        if !young() {
            eprintln!(
                "round {round} took {:?}, more than the TTL",
                stored_after.elapsed()
            );
            continue;
        }
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(
            pttl > 0 && pttl <= ttl_ms,
            "the entry's time to live in Redis: {pttl} ms"
        );
        assert!(hit, "a miss while the entry is younger than its TTL");

        eventually(ttl + PATIENCE, "the entry expired in Redis", || async {
            keys_under(&redis, &prefix).await.is_empty()
        })
        .await;
        assert!(!is_hit(&call(&tools, "Oslo").await), "expired: a miss");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        return;
    }
    panic!("five rounds in a row took longer than the {ttl:?} TTL");
}

#[tokio::test]
async fn a_result_larger_than_max_entry_bytes_is_neither_stored_nor_read() {
    let Some(redis) =
        RedisServer::start("a_result_larger_than_max_entry_bytes_is_neither_stored_nor_read")
    else {
        return;
    };
    let result = |text: String| Cached {
        items: Arc::from(vec![ToolOutput::text(text)]),
        stored_at: SystemTime::now(),
    };
    let small = store(redis.patient_manager().await).max_entry_bytes(64);
    let large = store(redis.patient_manager().await);

    small.put("big".to_owned(), result("x".repeat(100))).await;
    assert!(redis.keys().await.is_empty(), "not stored");
    assert!(small.get("big").await.is_none());

    small.put("small".to_owned(), result("x".repeat(40))).await;
    assert_eq!(
        small.get("small").await.unwrap().items[0]
            .as_text()
            .unwrap()
            .len(),
        40
    );

    // Stored by a store with a larger bound: the smaller one does not read
    // it (nor more than its bound of it).
    large.put("big".to_owned(), result("x".repeat(100))).await;
    assert_eq!(redis.keys().await.len(), 2);
    assert!(large.get("big").await.is_some());
    assert!(
        small.get("big").await.is_none(),
        "larger than its bound: a miss"
    );
}

#[tokio::test]
async fn a_corrupt_value_under_the_hashed_key_is_a_miss() {
    let Some(redis) = RedisServer::start("a_corrupt_value_under_the_hashed_key_is_a_miss") else {
        return;
    };
    let capture = Capture::default();
    let _guard = capture.install();
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = toolbox(&runs, store(redis.patient_manager().await));
    let expected = call(&tools, "Oslo").await;
    let key = until_keys(&redis, 1).await.remove(0);
    let mut conn = redis.connection().await;
    let stored: Vec<u8> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();

    let mut wrong_length = stored[..9].to_vec();
    wrong_length.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0x7f, b'x']);
    let mut not_utf8 = stored[..9].to_vec();
    not_utf8.extend_from_slice(&[1, 2, 0, 0, 0, 0xc3, 0x28]);
    let corrupt: [&[u8]; 6] = [
        b"garbage",
        &stored[..5],
        &[2, 0, 0, 0, 0, 0, 0, 0, 0],
        &wrong_length,
        &not_utf8,
        &stored[..stored.len() - 1],
    ];
    for (i, value) in corrupt.iter().enumerate() {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(*value)
            .query_async(&mut conn)
            .await
            .unwrap();
        let items = call(&tools, "Oslo").await;
        assert!(!is_hit(&items), "corrupt value {i} read as a hit");
        assert_eq!(items[0], expected[0]);
        // The fresh result is stored over the corrupt one.
        eventually(PATIENCE, "the corrupt value replaced", || {
            let mut conn = conn.clone();
            let key = key.clone();
            async move {
                let now: Vec<u8> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                now != *value
            }
        })
        .await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1 + corrupt.len());
    let unread = capture.events_with("a stored result could not be read; treated as a miss");
    assert_eq!(unread.len(), corrupt.len(), "{unread:?}");

    // Another type under the key: Redis refuses the read, and that is a
    // miss too (the store then writes over it).
    let _: () = redis::pipe()
        .del(&key)
        .rpush(&key, "x")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!is_hit(&call(&tools, "Oslo").await));
    eventually(PATIENCE, "a string again", || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            kind == "string"
        }
    })
    .await;
    assert!(
        is_hit(&call(&tools, "Oslo").await),
        "Redis is asked again at once"
    );
}

#[tokio::test]
async fn a_dead_redis_is_a_miss_and_the_call_runs_within_the_timeout() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_is_a_miss_and_the_call_runs_within_the_timeout")
    else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    call(
        &toolbox(&runs, store(redis.patient_manager().await)),
        "Oslo",
    )
    .await;
    until_keys(&redis, 1).await;

    // The toolbox under test, with the command timeout: a hit while Redis
    // is up. On a machine stalled past the timeout the lookup is a miss, as
    // it should be, and its store leaves Redis alone for a while: such a
    // round proves nothing, and a fresh store is made.
    let manager = redis.manager().await;
    let mut round = 0;
    let (tools, capture, _guard) = loop {
        round += 1;
        assert!(
            round <= 5,
            "five lookups in a row waited longer than the command timeout for a Redis that is up"
        );
        let capture = Capture::default();
        let guard = capture.install();
        let tools = toolbox(
            &runs,
            RedisCacheStore::new(manager.clone(), Duration::from_secs(60)).prefix("cache"),
        );
        let start = Instant::now();
        if is_hit(&bounded_call(&tools, "Oslo").await) {
            break (tools, capture, guard);
        }
        assert!(
            start.elapsed() >= COMMAND_TIMEOUT,
            "Redis is up and holds the entry, yet the lookup missed at once"
        );
    };

    redis.kill();
    let ran = runs.load(Ordering::SeqCst);
    for n in 1..=3 {
        let items = bounded_call(&tools, "Oslo").await;
        assert!(!is_hit(&items));
        assert_eq!(items[0], Ok(ToolOutput::text("sunny in Oslo")));
        assert_eq!(runs.load(Ordering::SeqCst), ran + n, "the tool ran");
    }
    let warned = capture
        .events()
        .into_iter()
        .filter(|e| e.field("toolstack.cache.store") == Some("redis"))
        .count();
    assert!(warned >= 1, "the failure is logged");
}

#[tokio::test]
async fn a_redis_that_never_answers_holds_a_call_up_by_one_timeout_at_most() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", silent.local_addr().unwrap());
    let _held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in silent.incoming().take(8) {
            open.push(stream);
        }
    });
    // The manager's own timeouts are far past the bound of a call: only
    // the store's can end it in time.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(60)))
        .set_response_timeout(Some(Duration::from_secs(60)));
    let manager =
        ConnectionManager::new_lazy_with_config(redis::Client::open(url).unwrap(), config).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = toolbox(
        &runs,
        store(manager)
            .timeout(COMMAND_TIMEOUT)
            // No recheck within the test, however slow the machine.
            .recheck_after(Duration::from_secs(3600)),
    );
    let capture = Capture::default();
    let _guard = capture.install();
    let start = Instant::now();
    assert!(!is_hit(&bounded_call(&tools, "Oslo").await));
    assert!(
        start.elapsed() >= COMMAND_TIMEOUT,
        "the lookup waited for Redis"
    );
    // Redis is left alone until the recheck: the lookup, and the write of
    // the result, are not asked of it (so they do not wait for it).
    assert!(!is_hit(&bounded_call(&tools, "Oslo").await));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let warnings: Vec<String> = capture
        .events()
        .iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .map(|e| e.message().to_owned())
        .collect();
    assert_eq!(
        warnings,
        ["the cache's store failed; the call runs uncached (no answer in time)"],
        "one lookup waited for Redis, and nothing else asked it"
    );
    let unasked = capture.events_with("the cache's store was unreachable a moment ago; a miss");
    assert_eq!(unasked.len(), 1, "the second lookup was not asked of Redis");
}
