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
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`SqliteStore`]: opening a file, the settings |
//! | `schema.rs` | the runs' tables, made on open, and the upgrade of a file written before the journal |
//! | `connection.rs` | the one connection the clones share, and work sent to it off the async threads — also the way in for a feature keeping its own tables in the file |
//! | `rows.rs` | a run's rows: the statements, and the append, removal and expiry they make up |
//! | `run_store.rs` | [`RunStore`](super::RunStore) for the store |

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;

use super::{StoreError, MAX_RECORD_BYTES};

pub use super::DEFAULT_FINISHED_TTL;

mod connection;
mod rows;
mod run_store;
mod schema;

use self::connection::{unavailable, Connected};

/// Runs' journals in a SQLite file; see the [module docs](self). Clones
/// share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connected>>,
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
        schema::prepare(&mut connection).map_err(unavailable)?;
        Ok(SqliteStore {
            connection: Connected::new(connection),
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
            .connection
            .pragma_update(None, "synchronous", "FULL")
            .map_err(unavailable)?;
        Ok(self)
    }

    /// Caps the file at `pages` pages of this store's connection
    /// (`PRAGMA max_page_count`; a page is 4 KiB unless the file says
    /// otherwise; a cap below the file's size is its size): an append
    /// that would grow it further fails as a full disk does — the
    /// [`Unavailable`](StoreError::Unavailable) error says the database
    /// is full, and nothing of that append is stored. The cap holds for
    /// this store and its clones, not for other connections to the file.
    pub fn max_pages(self, pages: u32) -> Result<Self, StoreError> {
        self.lock()
            .connection
            .pragma_update(None, "max_page_count", pages)
            .map_err(unavailable)?;
        Ok(self)
    }

    /// How long a writer waits for another one (5 s by default): SQLite
    /// retries the lock until then, and an append still locked out after
    /// it fails as [`Unavailable`](StoreError::Unavailable), saying the
    /// database is locked by another connection.
    pub fn busy_timeout(self, timeout: Duration) -> Result<Self, StoreError> {
        self.lock()
            .connection
            .busy_timeout(timeout)
            .map_err(unavailable)?;
        Ok(self)
    }
}
