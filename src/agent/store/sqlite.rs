//! [`SqliteStore`]: checkpoints in an embedded SQLite file.
//!
//! One file, zero setup: the table is made on open, the journal is WAL (a
//! reader never waits for the writer), and a writer waits up to the
//! store's timeout for another one (two processes may share the file). A
//! checkpoint survives the process being killed; one that must survive a
//! power cut too asks for a disk flush per save
//! ([`sync_every_commit`](SqliteStore::sync_every_commit)).
//! The compare-and-set is one `IMMEDIATE` transaction: read the version,
//! write if it is the expected one. A finished run's row expires after
//! [`finished_ttl`](SqliteStore::finished_ttl) (a day by default) and is
//! deleted when another run ends.
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
//! # std::fs::remove_dir_all(&dir).ok();
//! # }
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::checkpoint::now_ms;
use super::{Checkpoint, RunStatus, RunStore, StoreError, Stored, Version, MAX_CHECKPOINT_BYTES};

/// The default time a finished run is kept: a day.
pub const DEFAULT_FINISHED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Checkpoints in a SQLite file; see the [module docs](self). Clones share
/// the connection.
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

impl SqliteStore {
    /// Opens (or makes) the store in the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let connection = Connection::open(path).map_err(unavailable)?;
        Self::with_connection(connection)
    }

    /// A store in memory only (for tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(unavailable)?)
    }

    fn with_connection(connection: Connection) -> Result<Self, StoreError> {
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(unavailable)?;
        // Durable when the process dies (what a run must survive), without
        // a disk flush per checkpoint; `sync_every_commit` for power loss.
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(unavailable)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(unavailable)?;
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS toolstack_runs (
                    run_id TEXT PRIMARY KEY,
                    version INTEGER NOT NULL,
                    status TEXT NOT NULL,
                    checkpoint BLOB NOT NULL,
                    expires_ms INTEGER
                );
                CREATE INDEX IF NOT EXISTS toolstack_runs_status ON toolstack_runs (status);
                CREATE INDEX IF NOT EXISTS toolstack_runs_expires ON toolstack_runs (expires_ms);
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
                );",
            )
            .map_err(unavailable)?;
        Ok(SqliteStore {
            connection: Arc::new(Mutex::new(connection)),
            limit: MAX_CHECKPOINT_BYTES,
            finished_ttl: DEFAULT_FINISHED_TTL,
        })
    }

    /// Refuses checkpoints larger than `bytes`.
    pub fn max_checkpoint_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Keeps a finished run for `ttl` after its last checkpoint.
    pub fn finished_ttl(mut self, ttl: Duration) -> Self {
        self.finished_ttl = ttl;
        self
    }

    /// Flushes the disk at every checkpoint (`PRAGMA synchronous = FULL`):
    /// a checkpoint then survives a power loss or an OS crash too, at the
    /// cost of a flush per save. By default (`NORMAL`, in WAL mode) a
    /// checkpoint survives the process being killed — the restart a run
    /// must survive — and the last ones may be lost to a power cut.
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

impl RunStore for SqliteStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let (id, limit) = (run_id.to_owned(), self.limit);
        self.blocking(move |connection| {
            let row: Option<(i64, Vec<u8>)> = connection
                .query_row(
                    "SELECT version, checkpoint FROM toolstack_runs
                     WHERE run_id = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)",
                    params![id, now_ms() as i64],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(unavailable)?;
            row.map(|(version, bytes)| {
                let checkpoint = Checkpoint::from_bytes(&id, &bytes, limit)?;
                Ok(Stored {
                    checkpoint,
                    version: Version(version.max(0) as u64),
                })
            })
            .transpose()
        })
    }

    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        let bytes = match checkpoint.to_bytes(self.limit) {
            Ok(bytes) => bytes,
            Err(err) => return Box::pin(std::future::ready(Err(err))),
        };
        let id = checkpoint.run_id.clone();
        let status = checkpoint.status;
        let ttl = u64::try_from(self.finished_ttl.as_millis()).unwrap_or(u64::MAX);
        self.blocking(move |connection| {
            let now = now_ms();
            let tx = connection
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(unavailable)?;
            let found: Option<i64> = tx
                .query_row(
                    "SELECT version FROM toolstack_runs
                     WHERE run_id = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)",
                    params![id, now as i64],
                    |row| row.get(0),
                )
                .optional()
                .map_err(unavailable)?;
            let found = Version(found.unwrap_or(0).max(0) as u64);
            if found != expected {
                return Err(StoreError::Conflict {
                    run_id: id,
                    expected,
                    found,
                });
            }
            let version = found.next();
            let expires = matches!(status, RunStatus::Done { .. })
                .then(|| now.saturating_add(ttl).min(i64::MAX as u64) as i64);
            tx.execute(
                "INSERT INTO toolstack_runs (run_id, version, status, checkpoint, expires_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (run_id) DO UPDATE SET version = ?2, status = ?3,
                     checkpoint = ?4, expires_ms = ?5",
                params![id, version.0 as i64, status.as_str(), bytes, expires],
            )
            .map_err(unavailable)?;
            // A run that ends sweeps the ones expired (by the index).
            if expires.is_some() {
                tx.execute(
                    "DELETE FROM toolstack_runs WHERE expires_ms <= ?1",
                    params![now as i64],
                )
                .map_err(unavailable)?;
            }
            tx.commit().map_err(unavailable)?;
            Ok(version)
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.blocking(|connection| {
            let mut query = connection
                .prepare(
                    "SELECT run_id FROM toolstack_runs WHERE status = 'waiting' ORDER BY run_id",
                )
                .map_err(unavailable)?;
            let ids = query
                .query_map([], |row| row.get(0))
                .map_err(unavailable)?
                .collect::<Result<Vec<String>, _>>()
                .map_err(unavailable)?;
            Ok(ids)
        })
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let id = run_id.to_owned();
        self.blocking(move |connection| {
            let removed = connection
                .execute("DELETE FROM toolstack_runs WHERE run_id = ?1", params![id])
                .map_err(unavailable)?;
            Ok(removed > 0)
        })
    }
}
