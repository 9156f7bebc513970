//! A run's rows: the statements that read and write them, and the
//! writes they make up — an append, a run removed, a batch of waiting
//! runs expired — each in the transaction it is given.

use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{RunStatus, Version};

/// The most waiting runs one transaction of
/// [`expire_waiting`](crate::agent::store::RunStore::expire_waiting)
/// forgets: a long backlog is forgotten in several, so that no writer
/// waits for all of it.
pub(super) const EXPIRE_BATCH: i64 = 1000;

/// A run's row and snapshot, if it has not expired at `?2`.
pub(super) const LOAD_RUN: &str = "SELECT r.version, r.head, s.snapshot, r.checkpoint
    FROM toolstack_runs r LEFT JOIN toolstack_run_snapshots s ON s.run_id = r.run_id
    WHERE r.run_id = ?1 AND (r.expires_ms IS NULL OR r.expires_ms > ?2)";
pub(super) const LOAD_RECORDS: &str =
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
pub(super) const WAITING_COUNT: &str = "SELECT n FROM toolstack_run_counts WHERE name = 'waiting'";
pub(super) const WAITING: &str = "SELECT run_id FROM toolstack_runs WHERE status = 'waiting'
    ORDER BY saved_at_ms, run_id LIMIT ?1";
const WAITING_BEFORE: &str = "SELECT run_id FROM toolstack_runs
    WHERE status = 'waiting' AND saved_at_ms < ?1 ORDER BY saved_at_ms, run_id LIMIT ?2";
const SWEEP_RECORDS: &str = "DELETE FROM toolstack_run_records WHERE run_id IN
    (SELECT run_id FROM toolstack_runs WHERE expires_ms <= ?1)";
const SWEEP_SNAPSHOTS: &str = "DELETE FROM toolstack_run_snapshots WHERE run_id IN
    (SELECT run_id FROM toolstack_runs WHERE expires_ms <= ?1)";
const SWEEP_RUNS: &str = "DELETE FROM toolstack_runs WHERE expires_ms <= ?1";

/// SQLite's integers are signed; versions and instants never reach the
/// sign bit, and saturate if they did.
pub(super) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn version_of(stored: i64) -> Version {
    Version(u64::try_from(stored).unwrap_or(0))
}

/// Column `at` as bytes: a blob, or text written by hand; none for NULL.
pub(super) fn bytes_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<Vec<u8>>> {
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

/// A run's row as an append finds it.
pub(super) struct RunRow {
    version: Version,
    pub(super) waiting: bool,
    /// Whether it still holds the checkpoint it was stored as before the
    /// journal.
    checkpoint: bool,
}

/// The run's row, unless it has expired at `now`.
pub(super) fn find(
    tx: &Transaction<'_>,
    run_id: &str,
    now: i64,
) -> rusqlite::Result<Option<RunRow>> {
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
        (!expired).then(|| RunRow {
            version: version_of(version),
            waiting: status == RunStatus::Waiting.as_str(),
            checkpoint: checkpoint.unwrap_or(0) > 0,
        })
    }))
}

/// Forgets the run's row, snapshot and records (whether it had a row).
pub(super) fn remove(tx: &Transaction<'_>, run_id: &str) -> rusqlite::Result<bool> {
    tx.prepare_cached(DELETE_RECORDS)?
        .execute(params![run_id])?;
    tx.prepare_cached(DELETE_SNAPSHOT)?
        .execute(params![run_id])?;
    Ok(tx.prepare_cached(DELETE_RUN)?.execute(params![run_id])? > 0)
}

pub(super) fn count_waiting(tx: &Transaction<'_>, delta: i64) -> rusqlite::Result<()> {
    if delta != 0 {
        tx.prepare_cached(COUNT_WAITING)?.execute(params![delta])?;
    }
    Ok(())
}

/// What an append writes, owned: it is written off the async threads.
pub(super) struct OwnedAppend {
    pub(super) run_id: String,
    pub(super) expected: Version,
    pub(super) version: Version,
    pub(super) status: RunStatus,
    pub(super) head: Vec<u8>,
    pub(super) saved_at_ms: u64,
    pub(super) records: Vec<Vec<u8>>,
    pub(super) snapshot: Option<Vec<u8>>,
}

impl OwnedAppend {
    /// The new version, or the version found when it is not the expected
    /// one.
    pub(super) fn commit(
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

/// Forgets at most [`EXPIRE_BATCH`] of the runs waiting since before
/// `saved_before_ms`, the oldest first; how many.
pub(super) fn expire_batch(tx: &Transaction<'_>, saved_before_ms: u64) -> rusqlite::Result<usize> {
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
