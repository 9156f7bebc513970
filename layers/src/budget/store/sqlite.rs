//! [`SqliteOutputStore`]: kept outputs in an embedded SQLite file.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension};

use super::{
    now_ms, ttl_ms, Chunk, OutputStore, OutputStoreError, WholeOutput, DEFAULT_MAX_OUTPUT_BYTES,
};

/// An [`OutputStore`] in a SQLite file (rusqlite, bundled): outputs
/// outlive the process, and processes that share the file read each
/// other's.
///
/// ```
/// use std::time::Duration;
/// use toolstack_layers::budget::{BudgetLayer, SqliteOutputStore};
///
/// # fn main() -> Result<(), toolstack_layers::budget::OutputStoreError> {
/// let dir = std::env::temp_dir().join(format!("toolstack-kept-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteOutputStore::open(dir.join("kept.db"), Duration::from_secs(3600))?;
/// let budget = BudgetLayer::new().max_items(50).keep(store.clone());
/// # let _ = budget;
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(()) }
/// ```
///
/// * **One table**, `toolstack_kept_outputs` (made on open): the handle,
///   the kept text as a blob (so a page is a byte range, `substr`, never
///   the whole text), the whole output's length, when it expires.
/// * **Expiring**: a row past its time to live is never read, and every
///   `put` deletes the expired rows (by an index).
/// * **Bounded**: at most [`max_output_bytes`](Self::max_output_bytes) of
///   an output (1 MiB unless set). The work runs off the async threads; a
///   writer waits up to 5 s for another one.
#[derive(Clone)]
pub struct SqliteOutputStore {
    connection: Arc<Mutex<Connection>>,
    ttl: Duration,
    max_output_bytes: usize,
}

fn unavailable(err: rusqlite::Error) -> OutputStoreError {
    OutputStoreError::new(format!("SQLite: {err}")).with_source(err)
}

impl SqliteOutputStore {
    /// Opens (or makes) the store in the file at `path`, each output kept
    /// for `ttl`.
    pub fn open(path: impl AsRef<Path>, ttl: Duration) -> Result<Self, OutputStoreError> {
        Self::with_connection(Connection::open(path).map_err(unavailable)?, ttl)
    }

    /// A store in memory only (for tests).
    pub fn in_memory(ttl: Duration) -> Result<Self, OutputStoreError> {
        Self::with_connection(Connection::open_in_memory().map_err(unavailable)?, ttl)
    }

    fn with_connection(connection: Connection, ttl: Duration) -> Result<Self, OutputStoreError> {
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(unavailable)?;
        // A kept output is a convenience, not a record: no flush per put.
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(unavailable)?;
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(unavailable)?;
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS toolstack_kept_outputs (
                    handle TEXT PRIMARY KEY,
                    text BLOB NOT NULL,
                    output_bytes INTEGER NOT NULL,
                    expires_ms INTEGER NOT NULL
                );
                CREATE INDEX IF NOT EXISTS toolstack_kept_outputs_expires
                    ON toolstack_kept_outputs (expires_ms);",
            )
            .map_err(unavailable)?;
        Ok(SqliteOutputStore {
            connection: Arc::new(Mutex::new(connection)),
            ttl,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        })
    }

    /// Keeps at most `bytes` of one output (default 1 MiB).
    pub fn max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// Runs `work` on the connection off the async threads.
    fn blocking<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, OutputStoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, OutputStoreError> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut connection = connection.lock().unwrap_or_else(|p| p.into_inner());
                work(&mut connection)
            })
            .await
            .map_err(|err| OutputStoreError::new(format!("the SQLite task failed: {err}")))?
        })
    }
}

impl OutputStore for SqliteOutputStore {
    fn put(
        &self,
        handle: &str,
        output: WholeOutput,
    ) -> BoxFuture<'static, Result<(), OutputStoreError>> {
        let handle = handle.to_owned();
        let output_bytes = i64::try_from(output.output_bytes).unwrap_or(i64::MAX);
        let text = output.capped(self.max_output_bytes);
        let ttl = i64::try_from(ttl_ms(self.ttl)).unwrap_or(i64::MAX);
        self.blocking(move |connection| {
            let now = now_ms();
            let tx = connection.transaction().map_err(unavailable)?;
            tx.execute(
                "DELETE FROM toolstack_kept_outputs WHERE expires_ms <= ?1",
                params![now],
            )
            .map_err(unavailable)?;
            tx.execute(
                "INSERT OR REPLACE INTO toolstack_kept_outputs (handle, text, output_bytes, expires_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                params![handle, text, output_bytes, now.saturating_add(ttl)],
            )
            .map_err(unavailable)?;
            tx.commit().map_err(unavailable)
        })
    }

    fn read(
        &self,
        handle: &str,
        offset: usize,
        len: usize,
    ) -> BoxFuture<'static, Result<Option<Chunk>, OutputStoreError>> {
        let handle = handle.to_owned();
        // `substr` counts from 1, in bytes on a blob.
        let from = i64::try_from(offset).unwrap_or(i64::MAX).saturating_add(1);
        let len = i64::try_from(len).unwrap_or(i64::MAX);
        self.blocking(move |connection| {
            let row: Option<(Vec<u8>, i64, i64)> = connection
                .query_row(
                    "SELECT substr(text, ?2, ?3), length(text), output_bytes
                     FROM toolstack_kept_outputs WHERE handle = ?1 AND expires_ms > ?4",
                    params![handle, from, len, now_ms()],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
                .optional()
                .map_err(unavailable)?;
            Ok(row.map(|(bytes, kept, output)| {
                let size = |n: i64| usize::try_from(n).unwrap_or(0);
                Chunk::new(bytes, size(kept), size(output))
            }))
        })
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }
}

impl fmt::Debug for SqliteOutputStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOutputStore")
            .field("ttl", &self.ttl)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish_non_exhaustive()
    }
}
