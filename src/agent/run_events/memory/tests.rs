use std::time::Duration;

use super::super::{MAX_NAME_BYTES, MAX_RUN_PARTS};
use super::*;
use crate::agent::AgentEvent;

fn text(text: &str) -> EventRecord {
    EventRecord::from(&AgentEvent::TextDelta(text.into()))
}

/// The texts of a page's events, in order.
fn texts(page: &Page) -> Vec<String> {
    page.events
        .iter()
        .map(|(_, record)| match record.clone().into_event() {
            AgentEvent::TextDelta(text) => text,
            other => panic!("not a text delta: {other:?}"),
        })
        .collect()
}

async fn all(log: &MemoryRunEvents, run: &str) -> Page {
    log.read(run, None, MAX_READ_EVENTS, Duration::ZERO)
        .await
        .unwrap()
}

async fn write(log: &MemoryRunEvents, run: &str, key: EventKey<'_>, what: &str) -> Written {
    log.write(run, key, &text(what)).await.unwrap()
}

#[tokio::test]
async fn every_writer_s_events_read_back_in_one_order() {
    let log = MemoryRunEvents::new();
    let order = [
        ("turn 1", 0, "a"),
        ("call c1", 0, "b"),
        ("turn 1", 1, "c"),
        ("call c1", 1, "d"),
    ];
    for (part, n, what) in order {
        write(&log, "r", EventKey::new(part, 1, n), what).await;
    }
    let page = all(&log, "r").await;
    assert_eq!(texts(&page), ["a", "b", "c", "d"]);
    assert!(!page.ended);
    // Another run's events are its own.
    write(&log, "other", EventKey::new("turn 1", 1, 0), "x").await;
    assert_eq!(texts(&all(&log, "r").await), ["a", "b", "c", "d"]);
    assert_eq!(texts(&all(&log, "other").await), ["x"]);
}

#[tokio::test]
async fn a_key_written_again_is_kept_once() {
    let log = MemoryRunEvents::new();
    let key = EventKey::new("turn 1", 1, 0);
    assert!(matches!(
        write(&log, "r", key, "a").await,
        Written::Appended(_)
    ));
    // A replay writes the same key again, even with another record.
    assert_eq!(write(&log, "r", key, "a").await, Written::Duplicate);
    assert_eq!(write(&log, "r", key, "changed").await, Written::Duplicate);
    // Another attempt, number or part is another event.
    for key in [
        EventKey::new("turn 1", 2, 0),
        EventKey::new("turn 1", 1, 1),
        EventKey::new("turn 2", 1, 0),
        EventKey::new("1:0:turn 1", 1, 0),
    ] {
        assert!(
            matches!(write(&log, "r", key, "b").await, Written::Appended(_)),
            "{key:?}"
        );
    }
    assert_eq!(texts(&all(&log, "r").await), ["a", "b", "b", "b", "b"]);
}

#[tokio::test]
async fn begin_counts_the_attempts_of_each_part() {
    let log = MemoryRunEvents::new();
    assert_eq!(log.begin("r", "turn 1").await.unwrap(), 1);
    assert_eq!(log.begin("r", "turn 1").await.unwrap(), 2);
    assert_eq!(log.begin("r", "call c1").await.unwrap(), 1);
    assert_eq!(log.begin("r", "turn 1").await.unwrap(), 3);
    assert_eq!(log.begin("other", "turn 1").await.unwrap(), 1);
    // Beginning writes no event.
    assert!(all(&log, "r").await.events.is_empty());
}

#[tokio::test]
async fn a_read_goes_on_after_its_cursor() {
    let log = MemoryRunEvents::new();
    let mut cursors = Vec::new();
    for (n, what) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let Written::Appended(cursor) =
            write(&log, "r", EventKey::new("run", 1, n as u64), what).await
        else {
            panic!("not appended");
        };
        cursors.push(cursor);
    }
    let page = all(&log, "r").await;
    let read: Vec<Cursor> = page.events.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(read, cursors, "a write's cursor is the one a read gives");

    let first_two = log.read("r", None, 2, Duration::ZERO).await.unwrap();
    assert_eq!(texts(&first_two), ["a", "b"]);
    let (after, _) = first_two.events.last().unwrap();
    // A client hands the cursor back as text.
    let handed_back = Cursor::from(after.to_string());
    let rest = log
        .read("r", Some(&handed_back), 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(texts(&rest), ["c", "d"]);
    let at_end = log
        .read("r", Some(&cursors[3]), 10, Duration::ZERO)
        .await
        .unwrap();
    assert!(at_end.events.is_empty() && !at_end.ended);

    let bad = log
        .read(
            "r",
            Some(&Cursor::from("1700000000000-0")),
            10,
            Duration::ZERO,
        )
        .await;
    assert!(
        matches!(bad, Err(RunEventsError::BadCursor { .. })),
        "{bad:?}"
    );
}

#[tokio::test]
async fn a_read_returns_at_most_the_bound() {
    let log = MemoryRunEvents::new();
    for n in 0..(MAX_READ_EVENTS as u64 + 5) {
        write(&log, "r", EventKey::new("run", 1, n), "x").await;
    }
    let page = log
        .read("r", None, usize::MAX, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(page.events.len(), MAX_READ_EVENTS);
    let page = log.read("r", None, 0, Duration::ZERO).await.unwrap();
    assert_eq!(page.events.len(), 1, "a read of none reads one");
}

#[tokio::test]
async fn the_end_is_read_after_the_last_event_and_refuses_new_ones() {
    let log = MemoryRunEvents::new();
    write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    write(&log, "r", EventKey::new("run", 1, 1), "b").await;
    log.end("r").await.unwrap();
    log.end("r").await.unwrap();

    let first = log.read("r", None, 1, Duration::ZERO).await.unwrap();
    assert_eq!(texts(&first), ["a"]);
    assert!(!first.ended, "an event follows: not ended yet");
    let second = log
        .read("r", Some(&first.events[0].0), 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(texts(&second), ["b"]);
    assert!(second.ended);
    let after = log
        .read("r", Some(&second.events[0].0), 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(after.events.is_empty() && after.ended);

    // A replay of an event written before is still a duplicate; a new
    // one is refused.
    assert_eq!(
        write(&log, "r", EventKey::new("run", 1, 1), "b").await,
        Written::Duplicate
    );
    let late = log.write("r", EventKey::new("run", 1, 2), &text("c")).await;
    assert!(
        matches!(late, Err(RunEventsError::Ended { .. })),
        "{late:?}"
    );

    // A run ended with no events reads as ended.
    log.end("quiet").await.unwrap();
    let quiet = all(&log, "quiet").await;
    assert!(quiet.events.is_empty() && quiet.ended);
}

#[tokio::test]
async fn writes_past_the_bounds_are_refused_with_what_bound() {
    let log = MemoryRunEvents::new().max_events(2).max_record_bytes(64);
    write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    write(&log, "r", EventKey::new("run", 1, 1), "b").await;
    let full = log.write("r", EventKey::new("run", 1, 2), &text("c")).await;
    assert!(
        matches!(full, Err(RunEventsError::TooManyEvents { limit: 2, .. })),
        "{full:?}"
    );
    // A replay at the bound is still a duplicate, not an error.
    assert_eq!(
        write(&log, "r", EventKey::new("run", 1, 1), "b").await,
        Written::Duplicate
    );

    let big = text(&"x".repeat(64));
    let large = log.write("s", EventKey::new("run", 1, 0), &big).await;
    let Err(RunEventsError::TooLarge {
        record,
        bytes,
        limit,
        ..
    }) = large
    else {
        panic!("not refused as too large: {large:?}");
    };
    assert_eq!((record, limit), ("text_delta", 64));
    assert_eq!(bytes, serde_json::to_string(&big).unwrap().len());
    assert!(all(&log, "s").await.events.is_empty());
    let message = RunEventsError::TooManyEvents {
        run_id: "r".into(),
        limit: 2,
    }
    .to_string();
    assert!(
        message.contains("2 events") && message.contains("not written"),
        "{message}"
    );

    let long = "p".repeat(MAX_NAME_BYTES + 1);
    let named = log.write("r", EventKey::new(&long, 1, 0), &text("a")).await;
    assert!(
        matches!(named, Err(RunEventsError::NameTooLong { what: "part", .. })),
        "{named:?}"
    );
    let named = log.begin(&long, "run").await;
    assert!(
        matches!(
            named,
            Err(RunEventsError::NameTooLong { what: "run id", .. })
        ),
        "{named:?}"
    );
}

#[tokio::test]
async fn begin_refuses_a_part_past_the_bound_but_counts_the_known_ones() {
    let log = MemoryRunEvents::new();
    for part in 0..MAX_RUN_PARTS {
        log.begin("r", &part.to_string()).await.unwrap();
    }
    let more = log.begin("r", "one more").await;
    assert!(
        matches!(more, Err(RunEventsError::TooManyParts { .. })),
        "{more:?}"
    );
    assert_eq!(log.begin("r", "0").await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_reader_is_woken_by_the_next_event() {
    let log = MemoryRunEvents::new();
    write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    let page = all(&log, "r").await;
    let after = page.events[0].0.clone();
    let started = tokio::time::Instant::now();
    let (read, ()) = tokio::join!(
        log.read("r", Some(&after), 10, Duration::from_secs(3600)),
        async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            write(&log, "r", EventKey::new("run", 1, 1), "b").await;
        }
    );
    assert_eq!(texts(&read.unwrap()), ["b"]);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_reader_waiting_for_a_run_not_begun_is_woken_by_its_first_event() {
    let log = MemoryRunEvents::new();
    let started = tokio::time::Instant::now();
    let (read, ()) = tokio::join!(log.read("r", None, 10, Duration::from_secs(3600)), async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    });
    assert_eq!(texts(&read.unwrap()), ["a"]);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_reader_is_woken_by_the_end() {
    let log = MemoryRunEvents::new();
    let (read, ()) = tokio::join!(log.read("r", None, 10, Duration::from_secs(3600)), async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        log.end("r").await.unwrap();
    });
    assert!(read.unwrap().ended);
}

#[tokio::test(start_paused = true)]
async fn a_reader_waits_no_longer_than_it_asks() {
    let log = MemoryRunEvents::new();
    write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    let after = all(&log, "r").await.events[0].0.clone();
    let started = tokio::time::Instant::now();
    let page = log
        .read("r", Some(&after), 10, Duration::from_secs(7))
        .await
        .unwrap();
    assert!(page.events.is_empty() && !page.ended);
    assert_eq!(started.elapsed(), Duration::from_secs(7));
    // Another run's events do not end the wait.
    let (page, ()) = tokio::join!(
        log.read("r", Some(&after), 10, Duration::from_secs(7)),
        async {
            write(&log, "other", EventKey::new("run", 1, 0), "x").await;
        }
    );
    assert!(page.unwrap().events.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_run_is_forgotten_a_ttl_after_its_last_write() {
    let ttl = Duration::from_secs(60);
    let log = MemoryRunEvents::new().ttl(ttl);
    assert_eq!(log.begin("r", "run").await.unwrap(), 1);
    write(&log, "r", EventKey::new("run", 1, 0), "a").await;
    tokio::time::advance(ttl - Duration::from_secs(1)).await;
    // A write keeps it another TTL.
    write(&log, "r", EventKey::new("run", 1, 1), "b").await;
    tokio::time::advance(ttl - Duration::from_secs(1)).await;
    assert_eq!(texts(&all(&log, "r").await), ["a", "b"]);
    tokio::time::advance(Duration::from_secs(1)).await;
    let gone = all(&log, "r").await;
    assert!(gone.events.is_empty() && !gone.ended, "{gone:?}");
    // Its attempts and keys went with it.
    assert_eq!(log.begin("r", "run").await.unwrap(), 1);
    assert!(matches!(
        write(&log, "r", EventKey::new("run", 1, 0), "a").await,
        Written::Appended(_)
    ));
}
