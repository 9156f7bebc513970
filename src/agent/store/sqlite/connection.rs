//! The store's one connection, shared by its clones, and the way work
//! gets to it: off the async threads, one piece of work at a time — the
//! runs' own, and that of the features keeping their tables in the same
//! file ([`SqliteStore::blocking_with_tables`]).

use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::agent::store::StoreError;

use super::SqliteStore;

/// The connection, and the schemas made on it for the features that keep
/// their own tables in the store's file.
pub(super) struct Connected {
    pub(super) connection: Connection,
    /// The schemas [`SqliteStore::blocking_with_tables`] made on this
    /// connection: each is run once.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // only the chunk log uses it
    made: Vec<&'static str>,
}

impl Connected {
    pub(super) fn new(connection: Connection) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Connected {
            connection,
            made: Vec::new(),
        }))
    }

    /// Makes the tables of `schema` unless this connection has already.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // only the chunk log uses it
    fn make(&mut self, schema: &'static str) -> rusqlite::Result<()> {
        if self.made.contains(&schema) {
            return Ok(());
        }
        let tx = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(schema)?;
        tx.commit()?;
        self.made.push(schema);
        Ok(())
    }
}

/// A SQLite error, as the store reports it: always
/// [`Unavailable`](StoreError::Unavailable) — what a caller retries —,
/// worded by its cause where SQLite says one a reader can act on.
///
/// * Busy or locked: another connection (another process) held the write
///   lock for longer than the store's busy timeout, which SQLite has
///   already waited out; a later try may succeed.
/// * Full: the disk, or the file's `max_page_count`, leaves no room. The
///   transaction that hit it is rolled back whole (an append is one
///   transaction), so what was stored before still loads.
pub(super) fn unavailable(err: rusqlite::Error) -> StoreError {
    let cause = match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "the database is locked by another connection (for longer than the busy timeout): "
        }
        Some(ErrorCode::DiskFull) => "the disk or the database is full: ",
        _ => "",
    };
    StoreError::unavailable_from(format!("SQLite: {cause}{err}"), err)
}

impl SqliteStore {
    /// The connection, held: for a setting changed on it, from a
    /// builder (never across an await).
    pub(super) fn lock(&self) -> MutexGuard<'_, Connected> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` on the connection off the async threads.
    pub(super) fn blocking<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.spawn(move |connected| work(&mut connected.connection))
    }

    /// Runs `work` on the store's connection off the async threads, after
    /// making the tables of `schema` on it: the way in for a feature that
    /// keeps its own tables in the store's file (the AI SDK endpoint's
    /// chunk log), so that the store itself names only the runs' tables.
    ///
    /// `schema` is idempotent SQL (`CREATE TABLE IF NOT EXISTS …`), run in
    /// one transaction the first time this connection sees it — once per
    /// store, whatever the number of clones; again after a failure —, and
    /// an existing file's tables are kept as they are. An error of
    /// `schema` or `work` is the store's
    /// [`Unavailable`](StoreError::Unavailable), worded as the runs' are.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // only the chunk log uses it
    pub(crate) fn blocking_with_tables<T, F>(
        &self,
        schema: &'static str,
        work: F,
    ) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.spawn(move |connected| {
            connected.make(schema).map_err(unavailable)?;
            work(&mut connected.connection).map_err(unavailable)
        })
    }

    /// Runs `work` with the connection held, on the blocking threads.
    fn spawn<T, F>(&self, work: F) -> BoxFuture<'static, Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connected) -> Result<T, StoreError> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut connected = connection.lock().unwrap_or_else(|p| p.into_inner());
                work(&mut connected)
            })
            .await
            .map_err(|err| StoreError::unavailable(format!("the SQLite task failed: {err}")))?
        })
    }
}
