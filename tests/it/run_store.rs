//! Run stores, one contract: the same checks against the memory store,
//! SQLite (a file in a temporary directory) and Redis (a real
//! `redis-server`, started per test on a free loopback port) — the
//! compare-and-set of appends, records folded on load, snapshots, the
//! waiting runs' count, list and expiry, deletion, the bound on a record,
//! corrupt records and newer heads, runs stored before the journal, and
//! the expiry of finished runs.

#[cfg(feature = "redis")]
use crate::redis_server;

use std::time::Duration;

use toolstack::agent::store::{
    Append, CallState, Checkpoint, Head, Holder, MemoryStore, Record, RunStatus, RunStore,
    StoreError, Version, JOURNAL_FORMAT, MAX_RECORD_BYTES,
};
use toolstack::agent::StopReason;
use toolstack::model::{Message, ToolCall};

/// One append, owned: records and a head, or a snapshot in their place.
struct Change {
    run_id: String,
    expected: Version,
    head: Head,
    head_bytes: Vec<u8>,
    records: Vec<Record>,
    encoded: Vec<Vec<u8>>,
    snapshot: Option<Vec<u8>>,
}

impl Change {
    /// `records` appended to `run_id` at `expected`; its head says
    /// `status`, written at `saved_at_ms` (held by a process while it
    /// runs).
    fn new(
        run_id: &str,
        expected: Version,
        status: RunStatus,
        saved_at_ms: u64,
        records: Vec<Record>,
    ) -> Self {
        let head = Head {
            format: JOURNAL_FORMAT,
            status,
            holder: (status == RunStatus::Running).then(|| Holder {
                process: "p1".into(),
                until_ms: saved_at_ms + 30_000,
            }),
            saved_at_ms,
        };
        Change {
            run_id: run_id.to_owned(),
            expected,
            head_bytes: head.to_bytes(),
            head,
            encoded: records.iter().map(Record::to_bytes).collect(),
            records,
            snapshot: None,
        }
    }

    /// With `state` (the run after these records) as a snapshot in their
    /// place.
    fn snapshot(mut self, state: &Checkpoint) -> Self {
        self.snapshot = Some(state.to_bytes().unwrap());
        self
    }

    /// With a head stored as `bytes`.
    fn head_bytes(mut self, bytes: &[u8]) -> Self {
        self.head_bytes = bytes.to_vec();
        self
    }

    fn append(&self) -> Append<'_> {
        Append {
            run_id: &self.run_id,
            expected: self.expected,
            head: &self.head,
            head_bytes: &self.head_bytes,
            records: &self.encoded,
            snapshot: self.snapshot.as_deref(),
        }
    }

    async fn to<S: RunStore>(&self, store: &S) -> Result<Version, StoreError> {
        store.append(self.append()).await
    }

    /// `state` after this change: its records applied, its head's status,
    /// holder and time.
    fn applied_to(&self, mut state: Checkpoint) -> Checkpoint {
        for record in &self.records {
            state.apply(record.clone());
        }
        state.status = self.head.status;
        state.holder = self.head.holder.clone();
        state.saved_at_ms = self.head.saved_at_ms;
        state
    }
}

fn call() -> ToolCall {
    ToolCall {
        id: "call_0_0".into(),
        name: "sql".into(),
        arguments: r#"{"sql": "DELETE FROM t"}"#.into(),
    }
}

/// A run's first turn: the conversation, the model's answer, a step.
fn first_turn() -> Vec<Record> {
    vec![
        Record::Messages {
            messages: vec![Message::user("delete the old rows")],
        },
        Record::Counts {
            steps: 1,
            tool_calls: 1,
            usage: None,
        },
        Record::Step {
            calls: vec![call()],
        },
    ]
}

fn call_is(state: CallState) -> Vec<Record> {
    vec![Record::Call {
        id: "call_0_0".into(),
        state,
    }]
}

fn said(text: &str) -> Vec<Record> {
    vec![Record::Messages {
        messages: vec![Message::assistant(text)],
    }]
}

fn done() -> RunStatus {
    RunStatus::Done {
        stop: StopReason::Finished,
    }
}

/// A run as stored before the journal: the whole checkpoint, format 1,
/// no head.
const LEGACY: &[u8] = br#"{"format":1,"run_id":"old","status":"running","messages":[{"role":"user","content":"delete the old rows"}],"step":[{"call":{"id":"call_0_0","type":"function","function":{"name":"sql","arguments":"{\"sql\": \"DELETE FROM t\"}"}},"state":"planned"}],"steps":1,"tool_calls":1,"saved_at_ms":1}"#;

/// What [`LEGACY`] holds.
fn legacy_state() -> Checkpoint {
    let mut state = Checkpoint::new("old");
    for record in first_turn() {
        state.apply(record);
    }
    state.saved_at_ms = 1;
    state
}

/// What the contract writes behind a store's back, as the store would
/// find it.
trait Backdoor {
    /// Replaces the last record of `run_id` with `bytes`.
    async fn corrupt_last_record(&self, run_id: &str, bytes: &[u8]);

    /// Stores run `run_id` as runs were stored before the journal (the
    /// whole `checkpoint`, no head, no records); the version it has.
    async fn put_legacy(&self, run_id: &str, checkpoint: &[u8]) -> Version;

    /// Whether anything of run `run_id` is still stored.
    async fn remains(&self, run_id: &str) -> bool;
}

/// What every store must do. `small` shares `store`'s runs and bounds a
/// record to 64 bytes.
async fn contract<S: RunStore>(store: &S, small: &S, backdoor: &impl Backdoor) {
    assert_eq!(store.max_record_bytes(), MAX_RECORD_BYTES);
    assert_eq!(small.max_record_bytes(), 64);

    // Unknown runs.
    assert!(store.load("nobody").await.unwrap().is_none());
    assert!(!store.delete("nobody").await.unwrap());
    assert_eq!(store.waiting_count().await.unwrap(), 0);
    assert!(store.waiting(10).await.unwrap().is_empty());

    // The first append expects no run; the version counts the records.
    let first = Change::new("r1", Version::NONE, RunStatus::Running, 10, first_turn());
    let v3 = first.to(store).await.unwrap();
    assert_eq!(v3, Version(3));
    let mut state = first.applied_to(Checkpoint::new("r1"));
    let loaded = store.load("r1").await.unwrap().expect("stored");
    assert_eq!(loaded.version, v3);
    assert_eq!(loaded.checkpoint, state);
    assert_eq!((loaded.records, loaded.snapshot_bytes), (3, 0));
    assert_eq!(
        loaded.record_bytes,
        first.encoded.iter().map(Vec::len).sum::<usize>()
    );

    let started = Change::new(
        "r1",
        v3,
        RunStatus::Running,
        11,
        call_is(CallState::Started),
    );
    let v4 = started.to(store).await.unwrap();
    assert_eq!(v4, Version(4));
    state = started.applied_to(state);
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.records), (v4, 4));
    assert_eq!(loaded.checkpoint, state);

    // A writer that read an older version loses, is told what it found,
    // and writes nothing.
    let stale = Change::new("r1", v3, RunStatus::Waiting, 12, said("late"));
    match stale.to(store).await {
        Err(StoreError::Conflict {
            run_id,
            expected,
            found,
        }) => assert_eq!((run_id.as_str(), expected, found), ("r1", v3, v4)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let fresh = Change::new("r1", Version::NONE, RunStatus::Waiting, 12, said("new"));
    assert!(matches!(
        fresh.to(store).await,
        Err(StoreError::Conflict { found, .. }) if found == v4
    ));
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.records), (v4, 4));
    assert_eq!(loaded.checkpoint, state);
    assert_eq!(store.waiting_count().await.unwrap(), 0);

    // Two writers of the same version at once: exactly one wins, and only
    // its record is stored.
    let a = Change::new("r1", v4, RunStatus::Running, 13, said("a"));
    let b = Change::new("r1", v4, RunStatus::Running, 13, said("b"));
    let (won_a, won_b) = futures_util::join!(a.to(store), b.to(store));
    assert_eq!(
        [won_a.is_ok(), won_b.is_ok()]
            .iter()
            .filter(|ok| **ok)
            .count(),
        1,
        "{won_a:?} {won_b:?}"
    );
    let winner = if won_a.is_ok() { &a } else { &b };
    let v5 = won_a.or(won_b).unwrap();
    assert_eq!(v5, Version(5));
    state = winner.applied_to(state);
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.records), (v5, 5));
    assert_eq!(loaded.checkpoint, state);

    // A snapshot replaces the records before it: the same state, none of
    // them read; records after it fold on top.
    let closing = vec![
        Record::Call {
            id: "call_0_0".into(),
            state: CallState::Finished {
                text: "3 rows".into(),
                is_error: false,
                images: Vec::new(),
            },
        },
        Record::StepClosed,
    ];
    let closed = Change::new("r1", v5, RunStatus::Running, 14, closing);
    state = closed.applied_to(state);
    let closed = closed.snapshot(&state);
    let v7 = closed.to(store).await.unwrap();
    assert_eq!(v7, Version(7));
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!(loaded.version, v7);
    assert_eq!(loaded.checkpoint, state);
    assert_eq!((loaded.records, loaded.record_bytes), (0, 0));
    assert_eq!(
        loaded.snapshot_bytes,
        closed.snapshot.as_ref().unwrap().len()
    );
    assert_eq!(loaded.checkpoint.messages.len(), 3);
    let answered = Change::new("r1", v7, RunStatus::Running, 15, said("deleted"));
    let v8 = answered.to(store).await.unwrap();
    assert_eq!(v8, Version(8));
    state = answered.applied_to(state);
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.records), (v8, 1));
    assert_eq!(loaded.checkpoint, state);

    // The waiting runs follow the head's status: counted, and listed
    // oldest first.
    let waits = Change::new("r1", v8, RunStatus::Waiting, 100, Vec::new());
    let v9 = waits.to(store).await.unwrap();
    assert_eq!(v9, Version(9), "an append of no record still moves on");
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.status, RunStatus::Waiting);
    assert_eq!(loaded.checkpoint.holder, None);
    let r2 = Change::new("r2", Version::NONE, RunStatus::Waiting, 50, said("r2"));
    let r2_v1 = r2.to(store).await.unwrap();
    let r3 = Change::new("r3", Version::NONE, RunStatus::Waiting, 200, said("r3"));
    let r3_v1 = r3.to(store).await.unwrap();
    assert_eq!(store.waiting_count().await.unwrap(), 3);
    assert_eq!(store.waiting(10).await.unwrap(), ["r2", "r1", "r3"]);
    assert_eq!(store.waiting(2).await.unwrap(), ["r2", "r1"]);
    assert!(store.waiting(0).await.unwrap().is_empty());
    // A run that runs again leaves them; one that waits anew moves to the
    // end, counted once.
    let r3_runs = Change::new("r3", r3_v1, RunStatus::Running, 1, said("again"));
    let r3_v2 = r3_runs.to(store).await.unwrap();
    let r2_again = Change::new("r2", r2_v1, RunStatus::Waiting, 300, said("still"));
    r2_again.to(store).await.unwrap();
    assert_eq!(store.waiting_count().await.unwrap(), 2);
    assert_eq!(store.waiting(10).await.unwrap(), ["r1", "r2"]);

    // Expiring forgets the runs waiting since strictly before the instant
    // (records and all); not a running run, however old.
    assert_eq!(store.expire_waiting(100).await.unwrap(), 0);
    assert_eq!(store.expire_waiting(101).await.unwrap(), 1);
    assert!(store.load("r1").await.unwrap().is_none());
    assert!(!backdoor.remains("r1").await);
    assert!(store.load("r2").await.unwrap().is_some());
    assert_eq!(store.load("r3").await.unwrap().unwrap().version, r3_v2);
    assert_eq!(store.waiting_count().await.unwrap(), 1);
    assert_eq!(store.waiting(10).await.unwrap(), ["r2"]);
    let reborn = Change::new("r1", Version::NONE, RunStatus::Running, 400, said("anew"));
    assert_eq!(reborn.to(store).await.unwrap(), Version(1));
    let loaded = store.load("r1").await.unwrap().unwrap();
    assert_eq!(loaded.records, 1);
    assert_eq!(loaded.checkpoint, reborn.applied_to(Checkpoint::new("r1")));

    // Deleting forgets the run, its records and its place among the
    // waiting.
    assert!(store.delete("r2").await.unwrap());
    assert!(store.load("r2").await.unwrap().is_none());
    assert!(!backdoor.remains("r2").await);
    assert_eq!(store.waiting_count().await.unwrap(), 0);
    assert!(store.waiting(10).await.unwrap().is_empty());
    assert!(!store.delete("r2").await.unwrap());
    assert!(store.delete("r3").await.unwrap());
    assert_eq!(store.waiting_count().await.unwrap(), 0);
    let reborn = Change::new("r2", Version::NONE, RunStatus::Waiting, 500, said("anew"));
    assert_eq!(reborn.to(store).await.unwrap(), Version(1));
    let loaded = store.load("r2").await.unwrap().unwrap();
    assert_eq!(loaded.records, 1);
    assert_eq!(loaded.checkpoint, reborn.applied_to(Checkpoint::new("r2")));
    assert_eq!(store.waiting_count().await.unwrap(), 1);
    assert!(store.delete("r2").await.unwrap());

    // A record over the bound is refused on load, named by its place.
    let big = Change::new(
        "big",
        Version::NONE,
        RunStatus::Running,
        1,
        said(&"x".repeat(64)),
    );
    big.to(store).await.unwrap();
    assert!(store.load("big").await.unwrap().is_some());
    match small.load("big").await {
        Err(StoreError::TooLarge {
            run_id,
            record,
            bytes,
            limit,
        }) => {
            assert_eq!((run_id.as_str(), record.as_str()), ("big", "record 1"));
            assert_eq!((bytes, limit), (big.encoded[0].len(), 64));
        }
        other => panic!("expected a record too large, got {other:?}"),
    }

    // A corrupt record is a typed error naming the run and the record.
    let bad = Change::new("bad", Version::NONE, RunStatus::Running, 1, first_turn());
    bad.to(store).await.unwrap();
    backdoor
        .corrupt_last_record("bad", br#"{"record": "unheard of"}"#)
        .await;
    match store.load("bad").await {
        Err(err @ StoreError::Corrupt { .. }) => {
            let StoreError::Corrupt { run_id, record, .. } = &err else {
                unreachable!()
            };
            assert_eq!((run_id.as_str(), *record), ("bad", Some(3)));
            assert!(err.to_string().contains("record 3 of run bad"), "{err}");
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }

    // A head written by a newer toolstack names both formats.
    let newer = Change::new("newer", Version::NONE, RunStatus::Running, 1, said("hi"))
        .head_bytes(br#"{"format": 9, "status": "running", "saved_at_ms": 1}"#);
    newer.to(store).await.unwrap();
    match store.load("newer").await {
        Err(StoreError::UnknownFormat {
            run_id,
            found,
            supported,
        }) => assert_eq!(
            (run_id.as_str(), found, supported),
            ("newer", 9, JOURNAL_FORMAT)
        ),
        other => panic!("expected an unknown format, got {other:?}"),
    }

    // A run stored before the journal loads as it was, with its version,
    // and takes appends.
    let version = backdoor.put_legacy("old", LEGACY).await;
    let loaded = store.load("old").await.unwrap().expect("the old run");
    assert_eq!(loaded.version, version);
    assert_eq!(loaded.checkpoint, legacy_state());
    assert_eq!((loaded.records, loaded.snapshot_bytes), (0, LEGACY.len()));
    let resumed = Change::new(
        "old",
        version,
        RunStatus::Running,
        2,
        call_is(CallState::Started),
    );
    let next = resumed.to(store).await.unwrap();
    assert_eq!(next, Version(version.0 + 1));
    let loaded = store.load("old").await.unwrap().unwrap();
    assert_eq!((loaded.version, loaded.records), (next, 1));
    assert_eq!(loaded.checkpoint, resumed.applied_to(legacy_state()));
    let stale = Change::new("old", Version::NONE, RunStatus::Running, 3, said("hi"));
    assert!(matches!(
        stale.to(store).await,
        Err(StoreError::Conflict { found, .. }) if found == next
    ));
}

/// A finished run is forgotten as it ends (the store keeps finished runs
/// for no time) — its records too —; a running run is not; a waiting run
/// that finishes is no longer counted.
async fn finished_runs_expire<S: RunStore>(store: &S) {
    let running = Change::new(
        "running",
        Version::NONE,
        RunStatus::Running,
        1,
        first_turn(),
    );
    running.to(store).await.unwrap();
    let waits = Change::new("done", Version::NONE, RunStatus::Waiting, 1, first_turn());
    let v3 = waits.to(store).await.unwrap();
    assert_eq!(store.waiting_count().await.unwrap(), 1);
    let ends = vec![Record::Status { status: done() }];
    Change::new("done", v3, done(), 2, ends)
        .to(store)
        .await
        .unwrap();
    assert!(store.load("done").await.unwrap().is_none());
    assert_eq!(store.waiting_count().await.unwrap(), 0);
    assert!(store.waiting(10).await.unwrap().is_empty());
    assert_eq!(
        store.load("running").await.unwrap().unwrap().version,
        Version(3)
    );
    // The same id starts from nothing.
    let again = Change::new("done", Version::NONE, RunStatus::Running, 3, said("again"));
    assert_eq!(again.to(store).await.unwrap(), Version(1));
    let loaded = store.load("done").await.unwrap().unwrap();
    assert_eq!(loaded.records, 1);
    assert_eq!(loaded.checkpoint, again.applied_to(Checkpoint::new("done")));
}

struct MemoryBackdoor(MemoryStore);

impl Backdoor for MemoryBackdoor {
    async fn corrupt_last_record(&self, run_id: &str, bytes: &[u8]) {
        assert!(self.0.put_raw_record(run_id, bytes));
    }

    async fn put_legacy(&self, run_id: &str, checkpoint: &[u8]) -> Version {
        self.0.put_raw(run_id, checkpoint);
        Version(1)
    }

    async fn remains(&self, run_id: &str) -> bool {
        self.0.load(run_id).await.unwrap().is_some()
    }
}

#[tokio::test]
async fn the_memory_store_keeps_the_contract() {
    let store = MemoryStore::new();
    let small = store.clone().max_record_bytes(64);
    contract(&store, &small, &MemoryBackdoor(store.clone())).await;
    finished_runs_expire(&MemoryStore::new().finished_ttl(Duration::ZERO)).await;
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::path::{Path, PathBuf};

    use rusqlite::{params, Connection, OptionalExtension};
    use toolstack::agent::store::sqlite::SqliteStore;

    use super::*;

    fn temp_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "toolstack-runs-{}-{name}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("runs.db")
    }

    struct SqliteBackdoor(PathBuf);

    impl Backdoor for SqliteBackdoor {
        async fn corrupt_last_record(&self, run_id: &str, bytes: &[u8]) {
            let changed = Connection::open(&self.0)
                .unwrap()
                .execute(
                    "UPDATE toolstack_run_records SET record = ?1 WHERE run_id = ?2 AND seq =
                       (SELECT MAX(seq) FROM toolstack_run_records WHERE run_id = ?2)",
                    params![bytes, run_id],
                )
                .unwrap();
            assert_eq!(changed, 1);
        }

        async fn put_legacy(&self, run_id: &str, checkpoint: &[u8]) -> Version {
            Connection::open(&self.0)
                .unwrap()
                .execute(
                    "INSERT INTO toolstack_runs (run_id, version, status, checkpoint)
                     VALUES (?1, 3, 'running', ?2)",
                    params![run_id, checkpoint],
                )
                .unwrap();
            Version(3)
        }

        async fn remains(&self, run_id: &str) -> bool {
            [
                "toolstack_runs",
                "toolstack_run_snapshots",
                "toolstack_run_records",
            ]
            .iter()
            .any(|table| rows(&self.0, table, run_id) > 0)
        }
    }

    /// How many rows of `table` hold run `run_id`.
    fn rows(path: &Path, table: &str, run_id: &str) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE run_id = ?1"),
                params![run_id],
                |row| row.get(0),
            )
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sqlite_store_keeps_the_contract() {
        let path = temp_file("contract");
        let store = SqliteStore::open(&path).unwrap();
        let small = SqliteStore::open(&path).unwrap().max_record_bytes(64);
        contract(&store, &small, &SqliteBackdoor(path.clone())).await;
        let expiring = SqliteStore::open(temp_file("expiring"))
            .unwrap()
            .finished_ttl(Duration::ZERO);
        finished_runs_expire(&expiring).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finished_runs_expire_with_their_records_and_running_ones_stay() {
        let path = temp_file("ttl");
        let store = SqliteStore::open(&path).unwrap();
        Change::new(
            "running",
            Version::NONE,
            RunStatus::Running,
            1,
            first_turn(),
        )
        .to(&store)
        .await
        .unwrap();
        let ends = Change::new("done", Version::NONE, done(), 1, first_turn());
        ends.to(&store).await.unwrap();
        let expires = |run_id: &str| -> Option<i64> {
            Connection::open(&path)
                .unwrap()
                .query_row(
                    "SELECT expires_ms FROM toolstack_runs WHERE run_id = ?1",
                    params![run_id],
                    |row| row.get(0),
                )
                .unwrap()
        };
        let day = 24 * 60 * 60 * 1000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let until = expires("done").expect("a finished run expires");
        assert!((now + day - 60_000..=now + day + 60_000).contains(&until));
        assert_eq!(expires("running"), None);
        assert!(store.load("done").await.unwrap().is_some());

        // A day later: it no longer loads, and the next run to end sweeps
        // its row and records.
        Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE toolstack_runs SET expires_ms = 1 WHERE run_id = 'done'",
                [],
            )
            .unwrap();
        assert!(store.load("done").await.unwrap().is_none());
        assert_eq!(rows(&path, "toolstack_run_records", "done"), 3);
        Change::new("other", Version::NONE, done(), 1, said("bye"))
            .to(&store)
            .await
            .unwrap();
        assert_eq!(rows(&path, "toolstack_runs", "done"), 0);
        assert_eq!(rows(&path, "toolstack_run_records", "done"), 0);
        assert_eq!(rows(&path, "toolstack_run_records", "running"), 3);
        assert!(store.load("other").await.unwrap().is_some());
        assert!(store.load("running").await.unwrap().is_some());

        // An expired run not swept yet is absent to everyone: deleting it
        // finds nothing, and a writer starts its id from nothing.
        let expire = |run_id: &str| {
            Connection::open(&path)
                .unwrap()
                .execute(
                    "UPDATE toolstack_runs SET expires_ms = 1 WHERE run_id = ?1",
                    params![run_id],
                )
                .unwrap();
        };
        expire("other");
        assert!(!store.delete("other").await.unwrap());
        assert_eq!(rows(&path, "toolstack_runs", "other"), 0);
        Change::new("later", Version::NONE, done(), 1, first_turn())
            .to(&store)
            .await
            .unwrap();
        expire("later");
        let again = Change::new("later", Version::NONE, RunStatus::Running, 2, said("hi"));
        assert_eq!(again.to(&store).await.unwrap(), Version(1));
        let loaded = store.load("later").await.unwrap().unwrap();
        assert_eq!(loaded.records, 1);
        assert_eq!(
            loaded.checkpoint,
            again.applied_to(Checkpoint::new("later"))
        );
        assert_eq!(rows(&path, "toolstack_run_records", "later"), 1);
    }

    /// Makes a file as the store wrote it before the journal: one whole
    /// checkpoint per row.
    fn checkpoint_era_file(path: &Path) {
        let connection = Connection::open(path).unwrap();
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                CREATE TABLE toolstack_runs (
                    run_id TEXT PRIMARY KEY,
                    version INTEGER NOT NULL,
                    status TEXT NOT NULL,
                    checkpoint BLOB NOT NULL,
                    expires_ms INTEGER
                );
                CREATE INDEX toolstack_runs_status ON toolstack_runs (status);
                CREATE INDEX toolstack_runs_expires ON toolstack_runs (expires_ms);",
            )
            .unwrap();
        let mut insert = connection
            .prepare(
                "INSERT INTO toolstack_runs (run_id, version, status, checkpoint, expires_ms)
                 VALUES (?1, ?2, ?3, ?4, NULL)",
            )
            .unwrap();
        for (run_id, version, status, saved_at_ms) in [
            ("old", 3, RunStatus::Waiting, 1_000),
            ("older", 7, RunStatus::Waiting, 5),
            ("running", 2, RunStatus::Running, 1),
        ] {
            let bytes = era_state(run_id, status, saved_at_ms).to_bytes().unwrap();
            insert
                .execute(params![run_id, version, status.as_str(), bytes])
                .unwrap();
        }
    }

    /// The state of run `run_id` in [`checkpoint_era_file`].
    fn era_state(run_id: &str, status: RunStatus, saved_at_ms: u64) -> Checkpoint {
        let mut state = legacy_state();
        state.run_id = run_id.to_owned();
        state.status = status;
        state.saved_at_ms = saved_at_ms;
        state
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_of_the_checkpoint_era_is_upgraded_in_place() {
        let path = temp_file("upgrade");
        checkpoint_era_file(&path);
        let store = SqliteStore::open(&path).unwrap();

        // Its runs load as they were, the waiting ones counted and listed
        // by when they were written.
        let loaded = store.load("old").await.unwrap().unwrap();
        assert_eq!(loaded.version, Version(3));
        assert_eq!(
            loaded.checkpoint,
            era_state("old", RunStatus::Waiting, 1_000)
        );
        assert_eq!(loaded.records, 0);
        assert_eq!(store.waiting_count().await.unwrap(), 2);
        assert_eq!(store.waiting(10).await.unwrap(), ["older", "old"]);
        let loaded = store.load("running").await.unwrap().unwrap();
        assert_eq!(loaded.version, Version(2));
        assert_eq!(
            loaded.checkpoint,
            era_state("running", RunStatus::Running, 1)
        );

        // They take appends: one that runs again leaves the waiting.
        let resumed = Change::new("old", Version(3), RunStatus::Running, 2_000, said("go"));
        assert_eq!(resumed.to(&store).await.unwrap(), Version(4));
        assert_eq!(store.waiting_count().await.unwrap(), 1);

        // Opened again, the file is not upgraded twice, and the count
        // stays what it is.
        drop(store);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.waiting_count().await.unwrap(), 1);
        let loaded = store.load("old").await.unwrap().unwrap();
        assert_eq!((loaded.version, loaded.records), (Version(4), 1));

        // A waiting run of the checkpoint era expires by when its
        // checkpoint says it was written.
        assert_eq!(store.expire_waiting(5).await.unwrap(), 0);
        assert_eq!(store.expire_waiting(6).await.unwrap(), 1);
        assert!(store.load("older").await.unwrap().is_none());
        assert_eq!(store.waiting_count().await.unwrap(), 0);

        let connection = Connection::open(&path).unwrap();
        let index: Option<String> = connection
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'toolstack_runs_waiting'",
                [],
                |row| row.get(0),
            )
            .optional()
            .unwrap();
        assert!(
            index.is_some_and(|sql| sql.contains("status, saved_at_ms")),
            "the waiting runs are indexed by when they were written"
        );
        // The run appended to carries its checkpoint no more: it is its
        // snapshot now, and the row rewritten at each append stays small.
        let (row, snapshot): (i64, i64) = connection
            .query_row(
                "SELECT length(r.checkpoint), length(s.snapshot) FROM toolstack_runs r
                 JOIN toolstack_run_snapshots s USING (run_id) WHERE run_id = 'old'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(row, 0);
        assert!(snapshot > 0);
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
        let first = Change::new("r", Version::NONE, RunStatus::Waiting, 1, first_turn());
        let v3 = first.to(&a).await.unwrap();
        assert_eq!(b.load("r").await.unwrap().unwrap().version, v3);
        assert_eq!(b.waiting(10).await.unwrap(), ["r"]);
        assert_eq!(b.waiting_count().await.unwrap(), 1);
        for _ in 0..20 {
            let version = a.load("r").await.unwrap().unwrap().version;
            let x = Change::new("r", version, RunStatus::Running, 2, said("x"));
            let y = Change::new("r", version, RunStatus::Running, 2, said("y"));
            let (x, y) = futures_util::join!(x.to(&a), y.to(&b));
            assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
        }
        let loaded = b.load("r").await.unwrap().unwrap();
        assert_eq!((loaded.version, loaded.records), (Version(23), 23));
        assert_eq!(loaded.checkpoint.messages.len(), 21);
        assert_eq!(a.waiting_count().await.unwrap(), 0);
    }
}

#[cfg(feature = "redis")]
mod redis {
    use ::redis::aio::MultiplexedConnection;
    use toolstack::agent::store::redis::RedisStore;

    use super::*;

    struct RedisBackdoor {
        connection: MultiplexedConnection,
        prefix: &'static str,
    }

    impl Backdoor for RedisBackdoor {
        async fn corrupt_last_record(&self, run_id: &str, bytes: &[u8]) {
            let _: () = ::redis::cmd("LSET")
                .arg(format!("{}records:{run_id}", self.prefix))
                .arg(-1)
                .arg(bytes)
                .query_async(&mut self.connection.clone())
                .await
                .unwrap();
        }

        async fn put_legacy(&self, run_id: &str, checkpoint: &[u8]) -> Version {
            let _: () = ::redis::cmd("HSET")
                .arg(format!("{}run:{run_id}", self.prefix))
                .arg("version")
                .arg(3)
                .arg("checkpoint")
                .arg(checkpoint)
                .query_async(&mut self.connection.clone())
                .await
                .unwrap();
            Version(3)
        }

        async fn remains(&self, run_id: &str) -> bool {
            let hash = format!("{}run:{run_id}", self.prefix);
            let exists: u64 = ::redis::cmd("EXISTS")
                .arg(&hash)
                .arg(format!("{}records:{run_id}", self.prefix))
                .query_async(&mut self.connection.clone())
                .await
                .unwrap();
            exists > 0
        }
    }

    /// The milliseconds `key` has to live (-1: no expiry, -2: no key).
    async fn pttl(connection: &MultiplexedConnection, key: &str) -> i64 {
        ::redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut connection.clone())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_redis_store_keeps_the_contract() {
        let Some(server) = redis_server::RedisServer::start("the_redis_store_keeps_the_contract")
        else {
            return;
        };
        let store = RedisStore::new(server.patient_manager().await)
            .prefix("test:")
            .timeout(redis_server::PATIENT_TIMEOUT);
        let small = store.clone().max_record_bytes(64);
        let backdoor = RedisBackdoor {
            connection: server.connection().await,
            prefix: "test:",
        };
        contract(&store, &small, &backdoor).await;
        finished_runs_expire(&store.clone().prefix("gone:").finished_ttl(Duration::ZERO)).await;
        // Two stores over separate connections share the runs.
        let other = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .prefix("test:");
        assert!(other.load("r1").await.unwrap().is_some());
        // A run is its hash and its records; nothing else is left of the
        // ones forgotten (none waits now: the waiting set is gone too).
        let keys = server.keys().await;
        let runs = ["bad", "big", "newer", "old", "r1"];
        let mut expected: Vec<String> = runs
            .iter()
            .flat_map(|id| [format!("test:run:{id}"), format!("test:records:{id}")])
            .collect();
        expected.sort();
        let test_keys: Vec<String> = keys
            .into_iter()
            .filter(|k| k.starts_with("test:"))
            .collect();
        assert_eq!(test_keys, expected);
    }

    #[tokio::test]
    async fn finished_runs_expire_with_their_records_and_running_ones_stay() {
        let Some(server) = redis_server::RedisServer::start(
            "finished_runs_expire_with_their_records_and_running_ones_stay",
        ) else {
            return;
        };
        let store = RedisStore::new(server.patient_manager().await)
            .prefix("ttl:")
            .timeout(redis_server::PATIENT_TIMEOUT);
        let connection = server.connection().await;
        let ends = Change::new("done", Version::NONE, done(), 1, first_turn());
        let v3 = ends.to(&store).await.unwrap();
        let day = 24 * 60 * 60 * 1000;
        for key in ["ttl:run:done", "ttl:records:done"] {
            let ttl = pttl(&connection, key).await;
            assert!((day - 60_000..=day).contains(&ttl), "{key}: {ttl}");
        }
        // Running again, it no longer expires; a snapshot's fresh list
        // neither.
        let again = Change::new("done", v3, RunStatus::Running, 2, said("more"));
        let v4 = again.to(&store).await.unwrap();
        let state = again.applied_to(ends.applied_to(Checkpoint::new("done")));
        for key in ["ttl:run:done", "ttl:records:done"] {
            assert_eq!(pttl(&connection, key).await, -1, "{key}");
        }
        let snapshot = Change::new("done", v4, done(), 3, Vec::new());
        let snapshot = snapshot.snapshot(&state);
        let v5 = snapshot.to(&store).await.unwrap();
        assert_eq!(pttl(&connection, "ttl:records:done").await, -2);
        assert!(pttl(&connection, "ttl:run:done").await > 0);
        let more = Change::new("done", v5, RunStatus::Running, 4, said("after"));
        more.to(&store).await.unwrap();
        for key in ["ttl:run:done", "ttl:records:done"] {
            assert_eq!(pttl(&connection, key).await, -1, "{key}");
        }

        // A run ended with a short TTL is gone, hash and records, once it
        // passes; a running one stays.
        let short = store.clone().finished_ttl(Duration::from_millis(50));
        let ends = Change::new("short", Version::NONE, done(), 1, first_turn());
        ends.to(&short).await.unwrap();
        let running = Change::new(
            "running",
            Version::NONE,
            RunStatus::Running,
            1,
            first_turn(),
        );
        running.to(&short).await.unwrap();
        redis_server::eventually(redis_server::PATIENCE, "the finished run expires", || {
            let connection = connection.clone();
            async move {
                pttl(&connection, "ttl:run:short").await == -2
                    && pttl(&connection, "ttl:records:short").await == -2
            }
        })
        .await;
        assert!(short.load("short").await.unwrap().is_none());
        assert!(short.load("running").await.unwrap().is_some());

        // Records that outlived their run (the two keys expire apart) are
        // not the next run's of that id.
        let _: () = ::redis::cmd("RPUSH")
            .arg("ttl:records:ghost")
            .arg(Record::StepClosed.to_bytes())
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let first = Change::new("ghost", Version::NONE, RunStatus::Running, 1, said("hi"));
        assert_eq!(first.to(&store).await.unwrap(), Version(1));
        let loaded = store.load("ghost").await.unwrap().unwrap();
        assert_eq!(loaded.records, 1);
        assert_eq!(
            loaded.checkpoint,
            first.applied_to(Checkpoint::new("ghost"))
        );
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
        let err = Change::new("r", Version::NONE, RunStatus::Running, 1, first_turn())
            .to(&store)
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
