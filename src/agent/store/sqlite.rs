//! [`SqliteStore`]: runs' journals in an embedded SQLite file.
//!
//! One file, zero setup: the tables are made on open, SQLite's journal is
//! WAL (a reader never waits for the writer), and a writer waits up to the
//! store's timeout for another one (two processes may share the file). A
//! run survives the process being killed; one that must survive a power
//! cut too asks for a disk flush per append
//! ([`sync_every_commit`](SqliteStore::sync_every_commit)).
//!
//! | table | holds |
//! |---|---|
//! | `toolstack_runs` | a row per run: its version, status, head, when it was written and when it expires — small, rewritten at each append |
//! | `toolstack_run_snapshots` | the run's last snapshot, written only when the agent folds one in |
//! | `toolstack_run_records` | the run's records since its snapshot, by sequence number |
//! | `toolstack_run_counts` | how many runs wait for a decision, kept with every change of status |
//!
//! An append is one `IMMEDIATE` transaction: read the version, and if it
//! is the expected one insert the records (or write the snapshot and drop
//! the records it replaces), rewrite the run's row and keep the count of
//! waiting runs — the cost of the change, not of the run: the snapshot
//! is not in the row, since SQLite rewrites a whole row to change one
//! column. A load reads the row, the snapshot and the records in one
//! read transaction. The waiting runs are found and expired by an index
//! on `(status, saved_at_ms)` that holds only them. A finished run
//! expires after [`finished_ttl`](SqliteStore::finished_ttl) (a day by
//! default): it no longer loads, and its row, snapshot and records are
//! deleted when another run ends.
//!
//! A file written before the journal (a whole checkpoint per row, in the
//! `checkpoint` column of `toolstack_runs`) is upgraded on open, in
//! place: its checkpoints load as snapshots, with their versions, and the
//! first append to such a run moves its checkpoint to the snapshots.
//!
//! ```
//! use toolstack::agent::store::sqlite::SqliteStore;
//! use toolstack::agent::store::RunStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = std::env::temp_dir().join(format!("toolstack-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let store = SqliteStore::open(dir.join("runs.db")).unwrap();
//! assert!(store.load("no such run").await.unwrap().is_none());
//! assert_eq!(store.waiting_count().await.unwrap(), 0);
//! # std::fs::remove_dir_all(&dir).ok();
//! # }
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};

use super::checkpoint::now_ms;
use super::{Append, Journal, RunStatus, RunStore, StoreError, Stored, Version, MAX_RECORD_BYTES};

pub use super::DEFAULT_FINISHED_TTL;

/// The most waiting runs one transaction of
/// [`expire_waiting`](RunStore::expire_waiting) forgets: a long backlog
/// is forgotten in several, so that no writer waits for all of it.
const EXPIRE_BATCH: i64 = 1000;

/// The tables, as made on open. `toolstack_runs` is the table of the
/// checkpoints stored before the journal: its `checkpoint` column holds
/// the snapshot now, and the columns it lacked are added on open.
const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS toolstack_runs (
        run_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        status TEXT NOT NULL,
        checkpoint BLOB NOT NULL,
        expires_ms INTEGER
    );
    CREATE TABLE IF NOT EXISTS toolstack_run_snapshots (
        run_id TEXT PRIMARY KEY,
        snapshot BLOB NOT NULL
    );
    CREATE TABLE IF NOT EXISTS toolstack_run_records (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS toolstack_run_counts (
        name TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS toolstack_streams (
        stream_id TEXT PRIMARY KEY,
        ended INTEGER NOT NULL,
        touched_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS toolstack_chunks (
        stream_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        chunk TEXT NOT NULL,
        PRIMARY KEY (stream_id, idx)
    );
    CREATE TABLE IF NOT EXISTS toolstack_chats (
        chat_id TEXT PRIMARY KEY,
        stream_id TEXT NOT NULL
    );";

/// The indexes, made once the columns they cover exist: the waiting runs,
/// in the order they are listed and expired in, and the finished runs, by
/// when they expire. Each holds only the rows it is for, so that the
/// appends of a running run — nearly all of them — change neither. They
/// replace the indexes on every row made before the journal.
const INDEXES: &str = "
    DROP INDEX IF EXISTS toolstack_runs_status;
    DROP INDEX IF EXISTS toolstack_runs_expires;
    CREATE INDEX IF NOT EXISTS toolstack_runs_waiting
        ON toolstack_runs (status, saved_at_ms, run_id) WHERE status = 'waiting';
    CREATE INDEX IF NOT EXISTS toolstack_runs_expiring
        ON toolstack_runs (expires_ms) WHERE expires_ms IS NOT NULL;
    INSERT OR IGNORE INTO toolstack_run_counts (name, n)
        SELECT 'waiting', COUNT(*) FROM toolstack_runs WHERE status = 'waiting';";

/// A run's row and snapshot, if it has not expired at `?2`.
const LOAD_RUN: &str = "SELECT r.version, r.head, s.snapshot, r.checkpoint
    FROM toolstack_runs r LEFT JOIN toolstack_run_snapshots s ON s.run_id = r.run_id
    WHERE r.run_id = ?1 AND (r.expires_ms IS NULL OR r.expires_ms > ?2)";
const LOAD_RECORDS: &str =
    "SELECT record FROM toolstack_run_records WHERE run_id = ?1 ORDER BY seq";
/// A run's row as an append finds it: the size of the checkpoint it was
/// stored as before the journal is read from the row's header, not the
/// checkpoint.
const FIND_RUN: &str = "SELECT version, status, expires_ms, length(checkpoint)
    FROM toolstack_runs WHERE run_id = ?1";
const INSERT_RECORD: &str =
    "INSERT INTO toolstack_run_records (run_id, seq, record) VALUES (?1, ?2, ?3)";
/// Writes a run's row: small, whatever the run's size (a checkpoint
/// stored before the journal has moved to the snapshots by then).
const UPSERT_RUN: &str = "INSERT INTO toolstack_runs
        (run_id, version, status, checkpoint, head, saved_at_ms, expires_ms)
    VALUES (?1, ?2, ?3, x'', ?4, ?5, ?6)
    ON CONFLICT (run_id) DO UPDATE SET version = ?2, status = ?3,
        checkpoint = x'', head = ?4, saved_at_ms = ?5, expires_ms = ?6";
const PUT_SNAPSHOT: &str =
    "INSERT OR REPLACE INTO toolstack_run_snapshots (run_id, snapshot) VALUES (?1, ?2)";
/// Makes the checkpoint a run was stored as before the journal its
/// snapshot.
const MOVE_CHECKPOINT: &str = "INSERT OR REPLACE INTO toolstack_run_snapshots (run_id, snapshot)
    SELECT run_id, checkpoint FROM toolstack_runs WHERE run_id = ?1";
const DELETE_RUN: &str = "DELETE FROM toolstack_runs WHERE run_id = ?1";
const DELETE_SNAPSHOT: &str = "DELETE FROM toolstack_run_snapshots WHERE run_id = ?1";
const DELETE_RECORDS: &str = "DELETE FROM toolstack_run_records WHERE run_id = ?1";
const COUNT_WAITING: &str = "UPDATE toolstack_run_counts SET n = n + ?1 WHERE name = 'waiting'";
const WAITING_COUNT: &str = "SELECT n FROM toolstack_run_counts WHERE name = 'waiting'";
const WAITING: &str = "SELECT run_id FROM toolstack_runs WHERE status = 'waiting'
    ORDER BY saved_at_ms, run_id LIMIT ?1";
const WAITING_BEFORE: &str = "SELECT run_id FROM toolstack_runs
    WHERE status = 'waiting' AND saved_at_ms < ?1 ORDER BY saved_at_ms, run_id LIMIT ?2";
const SWEEP_RECORDS: &str = "DELETE FROM toolstack_run_records WHERE run_id IN
    (SELECT run_id FROM toolstack_runs WHERE expires_ms <= ?1)";
const SWEEP_SNAPSHOTS: &str = "DELETE FROM toolstack_run_snapshots WHERE run_id IN
    (SELECT run_id FROM toolstack_runs WHERE expires_ms <= ?1)";
const SWEEP_RUNS: &str = "DELETE FROM toolstack_runs WHERE expires_ms <= ?1";

/// Runs' journals in a SQLite file; see the [module docs](self). Clones
/// share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
    limit: usize,
    finished_ttl: Duration,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("limit", &self.limit)
            .field("finished_ttl", &self.finished_ttl)
            .finish_non_exhaustive()
    }
}

pub(crate) fn unavailable(err: rusqlite::Error) -> StoreError {
    StoreError::unavailable_from(format!("SQLite: {err}"), err)
}

/// SQLite's integers are signed; versions and instants never reach the
/// sign bit, and saturate if they did.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn version_of(stored: i64) -> Version {
    Version(u64::try_from(stored).unwrap_or(0))
}

/// Column `at` as bytes: a blob, or text written by hand; none for NULL.
fn bytes_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    match row.get_ref(at)? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(bytes) | ValueRef::Text(bytes) => Ok(Some(bytes.to_vec())),
        other => Err(rusqlite::Error::InvalidColumnType(
            at,
            "a blob".to_owned(),
            other.data_type(),
        )),
    }
}

impl SqliteStore {
    /// Opens (or makes) the store in the file at `path`, upgrading a file
    /// written before the journal.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let connection = Connection::open(path).map_err(unavailable)?;
        Self::with_connection(connection)
    }

    /// A store in memory only (for tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(unavailable)?)
    }

    fn with_connection(mut connection: Connection) -> Result<Self, StoreError> {
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(unavailable)?;
        // Durable when the process dies (what a run must survive), without
        // a disk flush per append; `sync_every_commit` for power loss.
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(unavailable)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(unavailable)?;
        // Every statement of the runs and the chunk log stays prepared.
        connection.set_prepared_statement_cache_capacity(64);
        // One writer at a time: two processes opening the file together
        // would otherwise both add the missing columns.
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(unavailable)?;
        tx.execute_batch(SCHEMA).map_err(unavailable)?;
        upgrade(&tx).map_err(unavailable)?;
        tx.execute_batch(INDEXES).map_err(unavailable)?;
        tx.commit().map_err(unavailable)?;
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            limit: MAX_RECORD_BYTES,
            finished_ttl: DEFAULT_FINISHED_TTL,
        })
    }

    /// Refuses records larger than `bytes` ([`MAX_RECORD_BYTES`] by
    /// default).
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Keeps a finished run for `ttl` after its last append (zero: it is
    /// forgotten as it ends).
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = ttl;
        self
    }

    /// Flushes the disk at every append (`PRAGMA synchronous = FULL`):
    /// a record then survives a power loss or an OS crash too, at the
    /// cost of a flush per append. By default (`NORMAL`, in WAL mode) a
    /// record survives the process being killed — the restart a run must
    /// survive — and the last ones may be lost to a power cut.
    pub fn sync_every_commit(self) -> Result<Self, StoreError> {
        self.lock()
            .pragma_update(None, "synchronous", "FULL")
            .map_err(unavailable)?;
        Ok(self)
    }

    /// How long a writer waits for another one (5 s by default).
    pub fn busy_timeout(self, timeout: Duration) -> Result<Self, StoreError> {
        self.lock().busy_timeout(timeout).map_err(unavailable)?;
        Ok(self)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` on the connection off the async threads.
    pub(crate) fn blocking<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut connection = connection.lock().unwrap_or_else(|p| p.into_inner());
                work(&mut connection)
            })
            .await
            .map_err(|err| StoreError::unavailable(format!("the SQLite task failed: {err}")))?
        })
    }
}

/// Adds the columns a file written before the journal lacks. Its rows
/// have no head, and learn when they were written from their checkpoint
/// (0 when it does not say), so that waiting ones expire.
fn upgrade(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    let columns = tx
        .prepare("SELECT name FROM pragma_table_info('toolstack_runs')")?
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if !columns.iter().any(|name| name == "head") {
        tx.execute_batch("ALTER TABLE toolstack_runs ADD COLUMN head BLOB")?;
    }
    if !columns.iter().any(|name| name == "saved_at_ms") {
        tx.execute_batch(
            "ALTER TABLE toolstack_runs ADD COLUMN saved_at_ms INTEGER;
             UPDATE toolstack_runs SET saved_at_ms = COALESCE(
                 CASE WHEN json_valid(CAST(checkpoint AS TEXT))
                     THEN json_extract(CAST(checkpoint AS TEXT), '$.saved_at_ms') END,
                 0);",
        )?;
    }
    Ok(())
}

/// A run's row as an append finds it.
struct Found {
    version: Version,
    waiting: bool,
    /// Whether it still holds the checkpoint it was stored as before the
    /// journal.
    checkpoint: bool,
}

/// The run's row, unless it has expired at `now`.
fn find(tx: &Transaction<'_>, run_id: &str, now: i64) -> rusqlite::Result<Option<Found>> {
    let row = tx
        .prepare_cached(FIND_RUN)?
        .query_row(params![run_id], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, Option<i64>>(3)?,
            ))
        })
        .optional()?;
    Ok(row.and_then(|(version, status, expires, checkpoint)| {
        let expired = expires.is_some_and(|expires| expires <= now);
        (!expired).then(|| Found {
            version: version_of(version),
            waiting: status == RunStatus::Waiting.as_str(),
            checkpoint: checkpoint.unwrap_or(0) > 0,
        })
    }))
}

/// Forgets the run's row, snapshot and records (whether it had a row).
fn remove(tx: &Transaction<'_>, run_id: &str) -> rusqlite::Result<bool> {
    tx.prepare_cached(DELETE_RECORDS)?
        .execute(params![run_id])?;
    tx.prepare_cached(DELETE_SNAPSHOT)?
        .execute(params![run_id])?;
    Ok(tx.prepare_cached(DELETE_RUN)?.execute(params![run_id])? > 0)
}

fn count_waiting(tx: &Transaction<'_>, delta: i64) -> rusqlite::Result<()> {
    if delta != 0 {
        tx.prepare_cached(COUNT_WAITING)?.execute(params![delta])?;
    }
    Ok(())
}

/// What an append writes, owned: it is written off the async threads.
struct Write {
    run_id: String,
    expected: Version,
    version: Version,
    status: RunStatus,
    head: Vec<u8>,
    saved_at_ms: u64,
    records: Vec<Vec<u8>>,
    snapshot: Option<Vec<u8>>,
}

impl Write {
    /// The new version, or the version found when it is not the expected
    /// one.
    fn commit(
        self,
        connection: &mut Connection,
        ttl: Duration,
    ) -> rusqlite::Result<Result<Version, Version>> {
        let now = now_ms();
        let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(found) = find(&tx, &self.run_id, int(now))? else {
            if self.expected != Version::NONE {
                return Ok(Err(Version::NONE));
            }
            // A new run starts from nothing: an expired one may have left
            // its row, snapshot and records.
            remove(&tx, &self.run_id)?;
            return self.write(tx, now, ttl, false);
        };
        if found.version != self.expected {
            return Ok(Err(found.version));
        }
        if self.snapshot.is_some() {
            tx.prepare_cached(DELETE_RECORDS)?
                .execute(params![self.run_id])?;
        } else if found.checkpoint {
            // Once, rather than rewrite it with the row at every append.
            tx.prepare_cached(MOVE_CHECKPOINT)?
                .execute(params![self.run_id])?;
        }
        self.write(tx, now, ttl, found.waiting)
    }

    /// Writes the append in `tx`, which found the run at the expected
    /// version, and commits.
    fn write(
        self,
        tx: Transaction<'_>,
        now: u64,
        ttl: Duration,
        was_waiting: bool,
    ) -> rusqlite::Result<Result<Version, Version>> {
        match &self.snapshot {
            Some(snapshot) => {
                tx.prepare_cached(PUT_SNAPSHOT)?
                    .execute(params![self.run_id, snapshot])?;
            }
            None => {
                let mut insert = tx.prepare_cached(INSERT_RECORD)?;
                for (seq, record) in (self.expected.0 + 1..).zip(&self.records) {
                    insert.execute(params![self.run_id, int(seq), record])?;
                }
            }
        }
        let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let expires =
            matches!(self.status, RunStatus::Done { .. }).then(|| int(now.saturating_add(ttl)));
        tx.prepare_cached(UPSERT_RUN)?.execute(params![
            self.run_id,
            int(self.version.0),
            self.status.as_str(),
            self.head,
            int(self.saved_at_ms),
            expires,
        ])?;
        let waiting = self.status == RunStatus::Waiting;
        count_waiting(&tx, i64::from(waiting) - i64::from(was_waiting))?;
        // A run that ends sweeps the expired ones (by the index); they are
        // finished, so none of them is counted as waiting.
        if expires.is_some() {
            for sweep in [SWEEP_RECORDS, SWEEP_SNAPSHOTS, SWEEP_RUNS] {
                tx.prepare_cached(sweep)?.execute(params![int(now)])?;
            }
        }
        tx.commit()?;
        Ok(Ok(self.version))
    }
}

impl RunStore for SqliteStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let (id, limit) = (run_id.to_owned(), self.limit);
        self.blocking(move |connection| {
            // One read transaction: the row and the records of one moment,
            // whatever another process appends meanwhile.
            let tx = connection.transaction().map_err(unavailable)?;
            let row = tx
                .prepare_cached(LOAD_RUN)
                .and_then(|mut query| {
                    query
                        .query_row(params![id, int(now_ms())], |row| {
                            let snapshot = match bytes_at(row, 2)? {
                                Some(snapshot) => Some(snapshot),
                                // Stored before the journal and not
                                // appended to since: its checkpoint.
                                None => bytes_at(row, 3)?.filter(|bytes| !bytes.is_empty()),
                            };
                            Ok((row.get::<_, i64>(0)?, bytes_at(row, 1)?, snapshot))
                        })
                        .optional()
                })
                .map_err(unavailable)?;
            let Some((version, head, snapshot)) = row else {
                return Ok(None);
            };
            let records = tx
                .prepare_cached(LOAD_RECORDS)
                .and_then(|mut query| {
                    query
                        .query_map(params![id], |row| Ok(bytes_at(row, 0)?.unwrap_or_default()))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(unavailable)?;
            tx.commit().map_err(unavailable)?;
            Journal {
                run_id: &id,
                version: version_of(version),
                head: head.as_deref(),
                snapshot: snapshot.as_deref(),
                records: records.iter().map(Vec::as_slice).collect(),
            }
            .fold(limit)
            .map(Some)
        })
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        let write = Write {
            run_id: append.run_id.to_owned(),
            expected: append.expected,
            version: append.version(),
            status: append.head.status,
            head: append.head_bytes.to_vec(),
            saved_at_ms: append.head.saved_at_ms,
            records: match append.snapshot {
                Some(_) => Vec::new(),
                None => append.records.to_vec(),
            },
            snapshot: append.snapshot.map(<[u8]>::to_vec),
        };
        let ttl = self.finished_ttl;
        let written =
            self.blocking(move |connection| write.commit(connection, ttl).map_err(unavailable));
        Box::pin(async move { written.await?.map_err(|found| append.conflict(found)) })
    }

    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        self.blocking(|connection| {
            let count = connection
                .prepare_cached(WAITING_COUNT)
                .and_then(|mut query| query.query_row([], |row| row.get::<_, i64>(0)))
                .optional()
                .map_err(unavailable)?;
            Ok(count.map_or(0, |n| usize::try_from(n).unwrap_or(0)))
        })
    }

    fn expire_waiting(&self, saved_before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(async move {
            let mut expired = 0;
            loop {
                // One batch a transaction, each its own turn on the
                // connection: the appends of running runs go in between.
                let batch = self
                    .blocking(move |connection| {
                        let tx = connection
                            .transaction_with_behavior(TransactionBehavior::Immediate)
                            .map_err(unavailable)?;
                        let batch = expire_batch(&tx, saved_before_ms).map_err(unavailable)?;
                        tx.commit().map_err(unavailable)?;
                        Ok(batch)
                    })
                    .await?;
                expired += batch;
                if (batch as i64) < EXPIRE_BATCH {
                    return Ok(expired);
                }
            }
        })
    }

    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.blocking(move |connection| {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            connection
                .prepare_cached(WAITING)
                .and_then(|mut query| {
                    query
                        .query_map(params![limit], |row| row.get(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()
                })
                .map_err(unavailable)
        })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let id = run_id.to_owned();
        self.blocking(move |connection| {
            let deleted = (|| {
                let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let found = find(&tx, &id, int(now_ms()))?;
                // An expired run is gone already, but its row may remain.
                remove(&tx, &id)?;
                count_waiting(&tx, -i64::from(found.as_ref().is_some_and(|f| f.waiting)))?;
                tx.commit()?;
                Ok(found.is_some())
            })();
            deleted.map_err(unavailable)
        })
    }

    fn max_record_bytes(&self) -> usize {
        self.limit
    }
}

/// Forgets at most [`EXPIRE_BATCH`] of the runs waiting since before
/// `saved_before_ms`, the oldest first; how many.
fn expire_batch(tx: &Transaction<'_>, saved_before_ms: u64) -> rusqlite::Result<usize> {
    let ids = tx
        .prepare_cached(WAITING_BEFORE)?
        .query_map(params![int(saved_before_ms), EXPIRE_BATCH], |row| {
            row.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for id in &ids {
        remove(tx, id)?;
    }
    count_waiting(tx, -(ids.len() as i64))?;
    Ok(ids.len())
}
