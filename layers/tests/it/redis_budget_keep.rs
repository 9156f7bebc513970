//! The budget's kept outputs in a real Redis (`redis-server`, started per
//! test on a free loopback port and killed at its end): the stores'
//! contract, the time to live set in Redis (read with `PTTL`, no
//! sleeping), outputs shared by stores that share no memory, and a dead
//! Redis that never fails a call: the cut stands and the notice says the
//! output was not kept; a read is a retryable `Unavailable`.

use crate::redis_server;
use crate::support;

use std::time::{Duration, Instant};

use redis_server::{RedisServer, COMMAND_TIMEOUT, PATIENT_TIMEOUT, STALL};
use support::output_store::{call, contract, next_args, rows, toolbox};
use toolstack::ErrorKind;
use toolstack_layers::budget::{BudgetLayer, OutputStore, RedisOutputStore, WholeOutput};

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn the_redis_store_keeps_its_contract() {
    let Some(redis) = RedisServer::start("the_redis_store_keeps_its_contract") else {
        return;
    };
    let store = RedisOutputStore::new(redis.patient_manager().await, HOUR)
        .timeout(PATIENT_TIMEOUT)
        .max_output_bytes(4096);
    contract(store, 4096).await;
}

#[tokio::test]
async fn a_kept_output_has_its_time_to_live_in_redis_and_is_read_by_another_store() {
    let Some(redis) = RedisServer::start(
        "a_kept_output_has_its_time_to_live_in_redis_and_is_read_by_another_store",
    ) else {
        return;
    };
    let ttl = Duration::from_secs(600);
    let store = RedisOutputStore::new(redis.patient_manager().await, ttl)
        .prefix("app:kept")
        .timeout(PATIENT_TIMEOUT);
    let tools = toolbox(
        rows(100),
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store,
    );
    let read = call(&tools, "rows", "{}".into()).await.unwrap();
    assert!(read[8].contains("is kept for 10m"), "{}", read[8]);
    let (handle, offset) = next_args(&read[8]).unwrap();
    let key = format!("app:kept:{handle}");
    assert_eq!(redis.keys().await, std::slice::from_ref(&key));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap();
    // Set, and counting down from the store's time to live.
    assert!(pttl > ttl_ms - 60_000 && pttl <= ttl_ms, "PTTL {pttl} ms");

    // Another process's store (its own connection, the same prefix) reads it.
    let other = RedisOutputStore::new(redis.patient_manager().await, ttl)
        .prefix("app:kept")
        .timeout(PATIENT_TIMEOUT);
    let chunk = other.read(&handle, offset, 5).await.unwrap().unwrap();
    assert_eq!(chunk.bytes, b"row 9");
    // Under another prefix it is not there.
    let elsewhere =
        RedisOutputStore::new(redis.patient_manager().await, ttl).timeout(PATIENT_TIMEOUT);
    assert!(elsewhere.read(&handle, 0, 5).await.unwrap().is_none());

    // Once Redis has dropped it (as at its time to live), it is not found.
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut redis.connection().await)
        .await
        .unwrap();
    let args = format!(r#"{{"handle":"{handle}","offset":{offset}}}"#);
    let err = call(&tools, "read_tool_result", args).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.message().contains("kept for 10m"), "{err}");
}

#[tokio::test]
async fn a_dead_redis_never_fails_the_call_and_a_read_is_retryable() {
    let Some(mut redis) =
        RedisServer::start("a_dead_redis_never_fails_the_call_and_a_read_is_retryable")
    else {
        return;
    };
    let store = RedisOutputStore::new(redis.manager().await, HOUR).timeout(COMMAND_TIMEOUT);
    let tools = toolbox(
        rows(100),
        BudgetLayer::new().max_items(10).keep(store.clone()),
        store.clone(),
    );
    store
        .put(
            &toolstack::id::new_token(),
            WholeOutput::new("up".into(), 2),
        )
        .await
        .expect("Redis is up");
    redis.kill();

    let started = Instant::now();
    let read = call(&tools, "rows", "{}".into())
        .await
        .expect("the call ends well");
    assert!(started.elapsed() < COMMAND_TIMEOUT + STALL);
    assert_eq!(read.len(), 11);
    assert!(
        read[8].contains("could not be kept for reading (its store failed)"),
        "{}",
        read[8]
    );
    assert_eq!(read[10], "row 100");

    let args = format!(r#"{{"handle":"{}"}}"#, toolstack::id::new_token());
    let err = call(&tools, "read_tool_result", args).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
}
