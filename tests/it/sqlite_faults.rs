//! The SQLite store when its file fails it: a write lock held by another
//! connection is waited out up to the busy timeout, and past it is a
//! typed [`StoreError::Unavailable`] saying so (what the agent retries);
//! a full database (`max_page_count`, as a full disk) is one too, rolls
//! back the append that hit it whole, and leaves a file whose every run
//! loads again — in this process and after a reopen.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use toolstack::agent::store::sqlite::SqliteStore;
use toolstack::agent::store::{
    Append, Head, Holder, Record, RunStatus, RunStore, StoreError, Version, JOURNAL_FORMAT,
};
use toolstack::model::Message;

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "toolstack-sqlite-faults-{}-{name}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("runs.db")
}

/// Appends one record to `run_id` at `expected`: a message saying `text`.
async fn append(
    store: &SqliteStore,
    run_id: &str,
    expected: Version,
    text: &str,
) -> Result<Version, StoreError> {
    append_all(store, run_id, expected, &[text]).await
}

/// Appends a record per text to `run_id` at `expected`, in one append.
async fn append_all(
    store: &SqliteStore,
    run_id: &str,
    expected: Version,
    texts: &[&str],
) -> Result<Version, StoreError> {
    let head = Head {
        format: JOURNAL_FORMAT,
        status: RunStatus::Running,
        holder: Some(Holder {
            process: "p1".into(),
            until_ms: u64::MAX / 2,
        }),
        saved_at_ms: 1,
    };
    let records: Vec<Vec<u8>> = texts
        .iter()
        .map(|text| {
            Record::Messages {
                messages: vec![Message::user(*text)],
            }
            .to_bytes()
        })
        .collect();
    store
        .append(Append {
            run_id,
            expected,
            head: &head,
            head_bytes: &head.to_bytes(),
            records: &records,
            snapshot: None,
        })
        .await
}

/// The messages `store` loads for `run_id`, and its version.
async fn loaded(store: &SqliteStore, run_id: &str) -> (Version, Vec<Message>) {
    let stored = store.load(run_id).await.unwrap().unwrap();
    (stored.version, stored.checkpoint.messages.to_vec())
}

/// What `why` of an unavailable store says; panics on any other result.
fn unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Unavailable { why, .. }) => why,
        other => panic!("expected the store to be unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_write_lock_held_past_the_busy_timeout_is_unavailable_and_then_passes() {
    let path = temp_file("locked");
    let store = SqliteStore::open(&path)
        .unwrap()
        .busy_timeout(Duration::from_millis(50))
        .unwrap();
    let v1 = append(&store, "run", Version::NONE, "first").await.unwrap();

    // Another process's connection takes the write lock and keeps it.
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();

    let why = unavailable(append(&store, "run", v1, "second").await);
    assert!(
        why.contains("the database is locked by another connection"),
        "{why}"
    );
    // WAL: a reader does not wait for the writer.
    assert_eq!(loaded(&store, "run").await.0, v1);

    // The lock released, the same append passes, once.
    other.execute_batch("COMMIT").unwrap();
    let v2 = append(&store, "run", v1, "second").await.unwrap();
    let (version, messages) = loaded(&store, "run").await;
    assert_eq!(version, v2);
    assert_eq!(messages, [Message::user("first"), Message::user("second")]);
}

#[tokio::test]
async fn a_write_lock_released_within_the_busy_timeout_is_waited_out() {
    let path = temp_file("waited");
    let store = SqliteStore::open(&path)
        .unwrap()
        .busy_timeout(Duration::from_secs(30))
        .unwrap();
    let v1 = append(&store, "run", Version::NONE, "first").await.unwrap();

    // The lock is held on a thread of its own, for a moment of real time:
    // SQLite's busy handler sleeps on the OS clock, which a paused tokio
    // clock does not move.
    let (locked, is_locked) = std::sync::mpsc::channel();
    let holder = std::thread::spawn({
        let path = path.clone();
        move || {
            let other = Connection::open(&path).unwrap();
            other.execute_batch("BEGIN IMMEDIATE").unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            other.execute_batch("COMMIT").unwrap();
        }
    });
    is_locked.recv().unwrap();

    let started = Instant::now();
    let v2 = append(&store, "run", v1, "second").await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "the append did not wait for the lock: {:?}",
        started.elapsed()
    );
    holder.join().unwrap();
    assert_eq!(loaded(&store, "run").await.0, v2);
}

#[tokio::test]
async fn a_full_database_is_unavailable_and_every_stored_run_loads_after_it() {
    let path = temp_file("full");
    let store = SqliteStore::open(&path).unwrap();
    // Runs stored before the disk fills, with what each acknowledged.
    let mut acknowledged = Vec::new();
    for run in 0..4 {
        let run_id = format!("run-{run}");
        let mut version = Version::NONE;
        let mut messages = Vec::new();
        for turn in 0..3 {
            let text = format!("{run_id} turn {turn}");
            version = append(&store, &run_id, version, &text).await.unwrap();
            messages.push(Message::user(text));
        }
        acknowledged.push((run_id, version, messages));
    }

    // The file may grow no more (a cap below its size is its size).
    let store = store.max_pages(1).unwrap();
    // Each append is a small record, which fits, and a big one of pages
    // of its own: the next append that needs a new page fails after its
    // first record is written, whatever free room the file had.
    let big = "x".repeat(16 * 1024);
    let (run_id, mut version, messages) = acknowledged[0].clone();
    let mut messages = messages;
    let why = loop {
        match append_all(&store, &run_id, version, &["small", &big]).await {
            Ok(next) => {
                version = next;
                messages.push(Message::user("small"));
                messages.push(Message::user(big.clone()));
                assert!(messages.len() < 100, "the capped file never filled up");
            }
            Err(err) => break unavailable::<()>(Err(err)),
        }
    };
    assert!(why.contains("the disk or the database is full"), "{why}");
    acknowledged[0] = (run_id.clone(), version, messages);
    // A new run cannot start either, and leaves nothing behind.
    let new_run = unavailable(append(&store, "new", Version::NONE, &big).await);
    assert!(new_run.contains("full"), "{new_run}");
    assert!(store.load("new").await.unwrap().is_none());

    // The failed append left nothing: every run loads as acknowledged,
    // on this connection and after a reopen of the file.
    for (run_id, version, messages) in &acknowledged {
        assert_eq!(&loaded(&store, run_id).await, &(*version, messages.clone()));
    }
    let reopened = SqliteStore::open(&path).unwrap();
    for (run_id, version, messages) in &acknowledged {
        assert_eq!(
            &loaded(&reopened, run_id).await,
            &(*version, messages.clone())
        );
    }
    let integrity: String = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");

    // Room again: the append that failed passes at the version it
    // expected — none of it had landed, head or records.
    drop(reopened);
    let store = store.max_pages(u32::MAX).unwrap();
    let after = append_all(&store, &run_id, version, &["small", &big])
        .await
        .unwrap();
    assert_eq!(after, version.after(2));
    let mut messages = acknowledged[0].2.clone();
    messages.push(Message::user("small"));
    messages.push(Message::user(big.clone()));
    assert_eq!(loaded(&store, &run_id).await, (after, messages));
    assert_eq!(
        append(&store, "new", Version::NONE, "hello").await.unwrap(),
        Version::NONE.after(1)
    );
}
