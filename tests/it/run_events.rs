//! A run's event log: the contract against the memory log and a real
//! Redis, and the Redis log under two writers on two connections writing
//! the same keys at once — each key once, one order for every reader,
//! every key of the run set to expire.

#[cfg(feature = "redis")]
use crate::redis_server;

use std::time::Duration;

use toolstack::agent::run_events::{
    Cursor, EventKey, EventRecord, MemoryRunEvents, Page, RunEvents, RunEventsError, Written,
};
use toolstack::agent::AgentEvent;

fn text(text: &str) -> EventRecord {
    EventRecord::from(&AgentEvent::TextDelta(text.into()))
}

fn texts(page: &Page) -> Vec<String> {
    page.events
        .iter()
        .map(|(_, record)| match record.clone().into_event() {
            AgentEvent::TextDelta(text) => text,
            other => panic!("not a text delta: {other:?}"),
        })
        .collect()
}

/// Every event of the run, read page by page after each last cursor.
async fn read_all<L: RunEvents>(log: &L, run: &str, page: usize) -> (Vec<(Cursor, String)>, bool) {
    let mut all = Vec::new();
    let mut after: Option<Cursor> = None;
    for _ in 0..100_000 {
        let read = log
            .read(run, after.as_ref(), page, Duration::ZERO)
            .await
            .unwrap();
        let ended = read.ended;
        let got = texts(&read);
        if got.is_empty() {
            return (all, ended);
        }
        let last = read.events.last().map(|(cursor, _)| cursor.clone());
        assert_ne!(last, after, "a read after a cursor read it again");
        after = last;
        all.extend(read.events.into_iter().map(|(cursor, _)| cursor).zip(got));
        if ended {
            return (all, ended);
        }
    }
    panic!("the run's events never ran out");
}

async fn contract<L: RunEvents>(log: &L) {
    let none = Duration::ZERO;
    let empty = log.read("r", None, 10, none).await.unwrap();
    assert!(empty.events.is_empty() && !empty.ended, "{empty:?}");

    assert_eq!(log.begin("r", "turn 1").await.unwrap(), 1);
    assert_eq!(log.begin("r", "turn 1").await.unwrap(), 2);
    assert_eq!(log.begin("r", "call c1").await.unwrap(), 1);

    let mut cursors = Vec::new();
    for (part, n, what) in [("turn 1", 0, "a"), ("call c1", 0, "b"), ("turn 1", 1, "c")] {
        match log
            .write("r", EventKey::new(part, 2, n), &text(what))
            .await
            .unwrap()
        {
            Written::Appended(cursor) => cursors.push(cursor),
            Written::Duplicate => panic!("{part} {n} written before"),
        }
    }
    assert_eq!(
        log.write("r", EventKey::new("turn 1", 2, 1), &text("c"))
            .await
            .unwrap(),
        Written::Duplicate
    );
    let page = log.read("r", None, 10, none).await.unwrap();
    assert_eq!(texts(&page), ["a", "b", "c"]);
    let read: Vec<Cursor> = page.events.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(read, cursors);
    // A cursor handed back as text reads on after it.
    let handed_back = Cursor::from(cursors[0].to_string());
    let rest = log.read("r", Some(&handed_back), 10, none).await.unwrap();
    assert_eq!(texts(&rest), ["b", "c"]);
    let bad = log
        .read("r", Some(&Cursor::from("no such place")), 10, none)
        .await;
    assert!(
        matches!(bad, Err(RunEventsError::BadCursor { .. })),
        "{bad:?}"
    );

    // A reader waiting gets the next event when it comes.
    let (waited, ()) = tokio::join!(
        log.read("r", Some(&cursors[2]), 10, Duration::from_secs(20)),
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            log.write("r", EventKey::new("run", 1, 0), &text("d"))
                .await
                .unwrap();
        }
    );
    let waited = waited.unwrap();
    assert_eq!(texts(&waited), ["d"]);

    // So does the end.
    let last = waited.events[0].0.clone();
    let (ended, ()) = tokio::join!(
        log.read("r", Some(&last), 10, Duration::from_secs(20)),
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            log.end("r").await.unwrap();
        }
    );
    let ended = ended.unwrap();
    assert!(ended.events.is_empty() && ended.ended, "{ended:?}");
    log.end("r").await.unwrap();
    let (all, ended) = read_all(log, "r", 1).await;
    assert_eq!(all.len(), 4);
    assert!(ended);
    let partial = log.read("r", None, 2, none).await.unwrap();
    assert!(!partial.ended, "two events follow: not ended yet");
    assert_eq!(
        log.write("r", EventKey::new("run", 1, 0), &text("d"))
            .await
            .unwrap(),
        Written::Duplicate
    );
    let late = log.write("r", EventKey::new("run", 1, 1), &text("e")).await;
    assert!(
        matches!(late, Err(RunEventsError::Ended { .. })),
        "{late:?}"
    );
}

#[tokio::test]
async fn the_memory_log_keeps_the_contract() {
    contract(&MemoryRunEvents::new()).await;
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;

    use std::collections::BTreeSet;

    use redis::AsyncCommands;
    use toolstack::agent::run_events::RedisRunEvents;
    use toolstack::agent::store::redis::RedisStore;

    async fn store(server: &redis_server::RedisServer) -> RedisStore {
        RedisStore::new(server.patient_manager().await)
            .timeout(redis_server::PATIENT_TIMEOUT)
            .prefix("t:")
    }

    #[tokio::test]
    async fn the_redis_log_keeps_the_contract() {
        let Some(server) = redis_server::RedisServer::start("the_redis_log_keeps_the_contract")
        else {
            return;
        };
        contract(&RedisRunEvents::new(&store(&server).await)).await;
    }

    /// Two processes' writers of one run, each on its own connection,
    /// writing the same keys at once (a step replayed on one process
    /// while the first still writes): every key is appended once, and
    /// readers on either connection read one sequence.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_writers_write_every_key_once_in_one_order() {
        let Some(server) =
            redis_server::RedisServer::start("two_writers_write_every_key_once_in_one_order")
        else {
            return;
        };
        let one = RedisRunEvents::new(&store(&server).await);
        let two = RedisRunEvents::new(&store(&server).await);
        const PER_PART: u64 = 150;
        let parts = ["turn 1", "call c1", "call c2"];
        let keys: Vec<(&str, u64)> = parts
            .iter()
            .flat_map(|part| (0..PER_PART).map(move |n| (*part, n)))
            .collect();
        let write_all = |log: RedisRunEvents, keys: Vec<(&'static str, u64)>| {
            tokio::spawn(async move {
                let (mut appended, mut duplicates) = (0, 0);
                for (part, n) in keys {
                    let record = text(&format!("{part}/{n}"));
                    match log
                        .write("r", EventKey::new(part, 1, n), &record)
                        .await
                        .unwrap()
                    {
                        Written::Appended(_) => appended += 1,
                        Written::Duplicate => duplicates += 1,
                    }
                }
                (appended, duplicates)
            })
        };
        // One forward, one backward: they meet in the middle, each
        // writing keys the other wrote or is writing.
        let backward: Vec<_> = keys.iter().rev().copied().collect();
        let (first, second) = tokio::join!(
            write_all(one.clone(), keys.clone()),
            write_all(two.clone(), backward)
        );
        let ((a1, d1), (a2, d2)) = (first.unwrap(), second.unwrap());
        let total = keys.len();
        assert_eq!(a1 + a2, total, "every key appended once");
        assert_eq!(d1 + d2, total, "and refused once as a duplicate");
        assert!(a1 > 0 && a2 > 0, "both writers wrote: {a1} and {a2}");

        let (by_one, _) = read_all(&one, "r", 97).await;
        let (by_two, _) = read_all(&two, "r", 1000).await;
        assert_eq!(by_one, by_two, "both readers read one sequence");
        let written: BTreeSet<&str> = by_one.iter().map(|(_, text)| text.as_str()).collect();
        assert_eq!(written.len(), total, "no event twice");
        for (part, n) in &keys {
            assert!(written.contains(format!("{part}/{n}").as_str()));
        }
        // Within a part, each writer wrote in its own order; the log keeps
        // the order in which Redis appended them, so cursors rise.
        let ids: Vec<&str> = by_one.iter().map(|(cursor, _)| cursor.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort_by_key(|id| {
            let (ms, seq) = id.split_once('-').unwrap();
            (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
        });
        assert_eq!(ids, sorted);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn attempts_are_counted_once_each_across_processes() {
        let Some(server) =
            redis_server::RedisServer::start("attempts_are_counted_once_each_across_processes")
        else {
            return;
        };
        let one = RedisRunEvents::new(&store(&server).await);
        let two = RedisRunEvents::new(&store(&server).await);
        let begin = |log: RedisRunEvents| {
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..50 {
                    got.push(log.begin("r", "turn 1").await.unwrap());
                }
                got
            })
        };
        let (a, b) = tokio::join!(begin(one.clone()), begin(two));
        let mut all: Vec<u32> = a.unwrap().into_iter().chain(b.unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (1..=100).collect::<Vec<u32>>());
        assert_eq!(one.begin("r", "turn 2").await.unwrap(), 1);
    }

    #[tokio::test]
    async fn every_key_of_a_run_expires_after_its_last_write() {
        let Some(server) =
            redis_server::RedisServer::start("every_key_of_a_run_expires_after_its_last_write")
        else {
            return;
        };
        let ttl = Duration::from_secs(600);
        let log = RedisRunEvents::new(&store(&server).await).ttl(ttl);
        log.begin("r", "turn 1").await.unwrap();
        log.write("r", EventKey::new("turn 1", 1, 0), &text("a"))
            .await
            .unwrap();
        log.end("r").await.unwrap();
        let keys = server.keys().await;
        assert_eq!(
            keys,
            ["t:event-keys:r", "t:event-parts:r", "t:events:r"],
            "the run's keys, under the store's prefix"
        );
        assert_eq!(log.stream_key("r"), "t:events:r");
        let mut connection = server.connection().await;
        for key in &keys {
            let left: i64 = connection.pttl(key).await.unwrap();
            assert!(
                left > 0 && left <= ttl.as_millis() as i64,
                "{key} expires in {left} ms"
            );
        }

        // Each call sets the expiry of what it makes, alone too.
        log.begin("b", "turn 1").await.unwrap();
        log.write("w", EventKey::new("run", 1, 0), &text("a"))
            .await
            .unwrap();
        log.end("e").await.unwrap();
        for key in [
            "t:event-parts:b",
            "t:events:w",
            "t:event-keys:w",
            "t:events:e",
        ] {
            let left: i64 = connection.pttl(key).await.unwrap();
            assert!(
                left > 0 && left <= ttl.as_millis() as i64,
                "{key} expires in {left} ms"
            );
        }

        // A run that expires is gone: nothing, and not ended.
        let short = RedisRunEvents::new(&store(&server).await).ttl(Duration::from_millis(50));
        short
            .write("s", EventKey::new("run", 1, 0), &text("a"))
            .await
            .unwrap();
        redis_server::eventually(redis_server::PATIENCE, "the run expires", || async {
            short
                .read("s", None, 10, Duration::ZERO)
                .await
                .unwrap()
                .events
                .is_empty()
        })
        .await;
        assert!(server.keys().await.iter().all(|key| !key.ends_with(":s")));
    }

    #[tokio::test]
    async fn the_redis_log_refuses_writes_past_its_bounds() {
        let Some(server) =
            redis_server::RedisServer::start("the_redis_log_refuses_writes_past_its_bounds")
        else {
            return;
        };
        let log = RedisRunEvents::new(&store(&server).await)
            .max_events(2)
            .max_record_bytes(64);
        for n in 0..2 {
            log.write("r", EventKey::new("run", 1, n), &text("a"))
                .await
                .unwrap();
        }
        let full = log.write("r", EventKey::new("run", 1, 2), &text("a")).await;
        assert!(
            matches!(full, Err(RunEventsError::TooManyEvents { limit: 2, .. })),
            "{full:?}"
        );
        let large = log
            .write("s", EventKey::new("run", 1, 0), &text(&"x".repeat(64)))
            .await;
        assert!(
            matches!(large, Err(RunEventsError::TooLarge { limit: 64, .. })),
            "{large:?}"
        );
        assert!(server.keys().await.iter().all(|key| !key.ends_with(":s")));
    }

    /// An entry that does not read as a record (a newer writer's, or
    /// damaged) ends a read before it; the next read fails naming its
    /// cursor, and a reader goes on after it.
    #[tokio::test]
    async fn a_damaged_entry_is_named_and_can_be_read_past() {
        let Some(server) =
            redis_server::RedisServer::start("a_damaged_entry_is_named_and_can_be_read_past")
        else {
            return;
        };
        let log = RedisRunEvents::new(&store(&server).await);
        log.write("r", EventKey::new("run", 1, 0), &text("a"))
            .await
            .unwrap();
        let mut connection = server.connection().await;
        let _: String = redis::cmd("XADD")
            .arg(log.stream_key("r"))
            .arg("*")
            .arg("e")
            .arg(r#"{"telepathy":{}}"#)
            .query_async(&mut connection)
            .await
            .unwrap();
        log.write("r", EventKey::new("run", 1, 1), &text("b"))
            .await
            .unwrap();
        let before = log.read("r", None, 10, Duration::ZERO).await.unwrap();
        assert_eq!(texts(&before), ["a"], "the events before it are read");
        let damaged = log
            .read("r", Some(&before.events[0].0), 10, Duration::ZERO)
            .await;
        let Err(RunEventsError::Corrupt {
            cursor: Some(at), ..
        }) = damaged
        else {
            panic!("not named as damaged: {damaged:?}");
        };
        let rest = log.read("r", Some(&at), 10, Duration::ZERO).await.unwrap();
        assert_eq!(texts(&rest), ["b"]);
    }
}
