//! Run stores, one contract: the same checks against the memory store,
//! SQLite (a file in a temporary directory) and Redis (a real
//! `redis-server`, started per test on a free loopback port) — the
//! compare-and-set, the waiting index, deletion, the bounds, corrupt and
//! newer checkpoints, and the expiry of finished runs.

#[cfg(feature = "redis")]
#[path = "../layers/tests/support/redis.rs"]
mod redis_server;

use std::time::Duration;

use toolstack::agent::store::{
    CallRecord, CallState, Checkpoint, MemoryStore, RunStatus, RunStore, StoreError, Version,
};
use toolstack::agent::StopReason;
use toolstack::model::{Message, ToolCall};

fn checkpoint(run_id: &str, status: RunStatus) -> Checkpoint {
    Checkpoint {
        run_id: run_id.to_owned(),
        status,
        messages: vec![Message::user("delete the old rows")],
        step: vec![CallRecord {
            call: ToolCall {
                id: "call_0_0".into(),
                name: "sql".into(),
                arguments: r#"{"sql": "DELETE FROM t"}"#.into(),
            },
            state: CallState::Planned,
        }],
        usage: None,
        steps: 1,
        tool_calls: 1,
        holder: None,
        saved_at_ms: 1,
    }
}

/// What every store must do. `raw` writes bytes under a run's id as the
/// store would (a test's way to corrupt a checkpoint).
async fn contract<S: RunStore>(store: &S, raw: impl AsyncFn(&str, &[u8])) {
    // Unknown runs.
    assert!(store.load("nobody").await.unwrap().is_none());
    assert!(!store.delete("nobody").await.unwrap());

    // The first save expects no checkpoint; each later one the last version.
    let mut run = checkpoint("r1", RunStatus::Running);
    let v1 = store.save(&run, Version::NONE).await.unwrap();
    assert_eq!(v1, Version(1));
    let loaded = store.load("r1").await.unwrap().expect("stored");
    assert_eq!(loaded.version, v1);
    assert_eq!(loaded.checkpoint, run);

    run.step[0].state = CallState::Started;
    let v2 = store.save(&run, v1).await.unwrap();
    assert_eq!(v2, Version(2));

    // A writer that read an older version loses, and is told what it found.
    match store.save(&run, v1).await {
        Err(StoreError::Conflict {
            run_id,
            expected,
            found,
        }) => {
            assert_eq!((run_id.as_str(), expected, found), ("r1", v1, v2));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        store.save(&run, Version::NONE).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        store.load("r1").await.unwrap().unwrap().checkpoint.step[0].state,
        CallState::Started
    );

    // Two writers of the same version at once: exactly one wins.
    let (a, b) = futures_util::join!(store.save(&run, v2), store.save(&run, v2));
    assert_eq!(
        [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "{a:?} {b:?}"
    );
    let v3 = a.or(b).unwrap();

    // The waiting index follows the status.
    assert!(store.waiting().await.unwrap().is_empty());
    run.status = RunStatus::Waiting;
    let v4 = store.save(&run, v3).await.unwrap();
    let other = checkpoint("r2", RunStatus::Waiting);
    store.save(&other, Version::NONE).await.unwrap();
    assert_eq!(store.waiting().await.unwrap(), ["r1", "r2"]);
    run.status = RunStatus::Running;
    store.save(&run, v4).await.unwrap();
    assert_eq!(store.waiting().await.unwrap(), ["r2"]);

    // Deleting forgets the run, and its place in the index.
    assert!(store.delete("r2").await.unwrap());
    assert!(store.load("r2").await.unwrap().is_none());
    assert!(store.waiting().await.unwrap().is_empty());
    assert!(!store.delete("r2").await.unwrap());

    // Corrupt and newer checkpoints are typed errors naming the run.
    store
        .save(&checkpoint("bad", RunStatus::Running), Version::NONE)
        .await
        .unwrap();
    raw("bad", b"{\"format\": 1, \"run_id\": ").await;
    let err = store.load("bad").await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("run bad"), "{err}");
    raw("bad", br#"{"format": 9, "run_id": "bad"}"#).await;
    let err = store.load("bad").await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::UnknownFormat {
                found: 9,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
}

/// A checkpoint over the bound is refused on the way in.
async fn bounded<S: RunStore>(store: &S, limit: usize) {
    let mut big = checkpoint("big", RunStatus::Running);
    big.messages.push(Message::user("x".repeat(limit)));
    let err = store.save(&big, Version::NONE).await.unwrap_err();
    assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
    assert!(store.load("big").await.unwrap().is_none());
}

/// A finished run expires; one still running does not (in the stores
/// that expire runs: SQLite and Redis).
#[cfg(any(feature = "sqlite", feature = "redis"))]
async fn finished_runs_expire<S: RunStore>(store: &S) {
    let done = checkpoint(
        "done",
        RunStatus::Done {
            stop: StopReason::Finished,
        },
    );
    store.save(&done, Version::NONE).await.unwrap();
    let running = checkpoint("running", RunStatus::Running);
    store.save(&running, Version::NONE).await.unwrap();
    assert!(store.load("done").await.unwrap().is_some());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.load("done").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the finished run never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.load("running").await.unwrap().is_some());
}

#[tokio::test]
async fn the_memory_store_keeps_the_contract() {
    let store = MemoryStore::new();
    contract(&store, async |id: &str, bytes: &[u8]| {
        store.put_raw(id, bytes)
    })
    .await;
    bounded(&MemoryStore::new().max_checkpoint_bytes(4096), 4096).await;
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use toolstack::agent::store::sqlite::SqliteStore;

    fn temp_file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "toolstack-runs-{}-{name}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("runs.db")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sqlite_store_keeps_the_contract() {
        let path = temp_file("contract");
        let store = SqliteStore::open(&path).unwrap();
        let raw = async |id: &str, bytes: &[u8]| {
            let connection = rusqlite::Connection::open(&path).unwrap();
            connection
                .execute(
                    "UPDATE toolstack_runs SET checkpoint = ?1 WHERE run_id = ?2",
                    rusqlite::params![bytes, id],
                )
                .unwrap();
        };
        contract(&store, raw).await;
        bounded(
            &SqliteStore::in_memory().unwrap().max_checkpoint_bytes(4096),
            4096,
        )
        .await;
        let expiring = SqliteStore::in_memory()
            .unwrap()
            .finished_ttl(Duration::from_millis(100));
        finished_runs_expire(&expiring).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_processes_share_one_file() {
        // Two stores on one file stand for two processes: the
        // compare-and-set holds across connections.
        let path = temp_file("shared");
        let (a, b) = (
            SqliteStore::open(&path).unwrap(),
            SqliteStore::open(&path).unwrap(),
        );
        let run = checkpoint("r", RunStatus::Waiting);
        let v1 = a.save(&run, Version::NONE).await.unwrap();
        assert_eq!(b.load("r").await.unwrap().unwrap().version, v1);
        assert_eq!(b.waiting().await.unwrap(), ["r"]);
        let mut won = 0;
        for _ in 0..20 {
            let version = a.load("r").await.unwrap().unwrap().version;
            let (x, y) = futures_util::join!(a.save(&run, version), b.save(&run, version));
            won += 1;
            assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
        }
        assert_eq!(
            a.load("r").await.unwrap().unwrap().version,
            Version(1 + won)
        );
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use toolstack::agent::store::redis::RedisStore;

    #[tokio::test]
    async fn the_redis_store_keeps_the_contract() {
        let Some(server) = redis_server::RedisServer::start("the_redis_store_keeps_the_contract")
        else {
            return;
        };
        let store = RedisStore::new(server.patient_manager().await)
            .prefix("test:")
            .timeout(redis_server::PATIENT_TIMEOUT);
        let raw = async |id: &str, bytes: &[u8]| {
            let mut connection = server.connection().await;
            let _: () = ::redis::cmd("HSET")
                .arg(format!("test:run:{id}"))
                .arg("checkpoint")
                .arg(bytes)
                .query_async(&mut connection)
                .await
                .unwrap();
        };
        contract(&store, raw).await;
        bounded(&store.clone().max_checkpoint_bytes(4096), 4096).await;
        let expiring = store
            .clone()
            .prefix("ttl:")
            .finished_ttl(Duration::from_millis(100));
        finished_runs_expire(&expiring).await;
        // Two stores over separate connections share the runs.
        let other = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .prefix("test:");
        assert!(other.load("r1").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_dead_redis_is_unavailable_within_the_timeout() {
        let Some(mut server) =
            redis_server::RedisServer::start("a_dead_redis_is_unavailable_within_the_timeout")
        else {
            return;
        };
        let store = RedisStore::new(server.manager().await).timeout(redis_server::COMMAND_TIMEOUT);
        server.kill();
        let started = std::time::Instant::now();
        let err = store
            .save(&checkpoint("r", RunStatus::Running), Version::NONE)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
        assert!(
            started.elapsed() < redis_server::COMMAND_TIMEOUT * 4 + redis_server::STALL,
            "took {:?}",
            started.elapsed()
        );
    }
}
