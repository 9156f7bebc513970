//! The runs' tables: made on open, and a file written before the journal
//! upgraded in place. Only the runs' tables: a feature keeping its own in
//! the same file makes them itself, through
//! [`SqliteStore::blocking_with_tables`](super::SqliteStore::blocking_with_tables).

use std::time::Duration;

use rusqlite::{Connection, Transaction, TransactionBehavior};

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

/// Sets `connection` up for the store and makes (or upgrades) the runs'
/// tables.
pub(super) fn prepare(connection: &mut Connection) -> rusqlite::Result<()> {
    connection.pragma_update(None, "journal_mode", "WAL")?;
    // Durable when the process dies (what a run must survive), without
    // a disk flush per append; `sync_every_commit` for power loss.
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.busy_timeout(Duration::from_secs(5))?;
    // Every statement of the runs (and of the features keeping their
    // tables in the file) stays prepared.
    connection.set_prepared_statement_cache_capacity(64);
    // One writer at a time: two processes opening the file together
    // would otherwise both add the missing columns.
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    upgrade(&tx)?;
    tx.execute_batch(INDEXES)?;
    tx.commit()
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
