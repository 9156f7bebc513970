//! [`RunStore`] for [`SqliteStore`]: each operation one piece of work on
//! the connection, in its own transaction.

use futures_util::future::BoxFuture;
use rusqlite::{params, OptionalExtension, TransactionBehavior};

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::{Append, Journal, RunStore, StoreError, Stored, Version};

use super::connection::unavailable;
use super::rows::{
    bytes_at, count_waiting, expire_batch, find, int, remove, version_of, OwnedAppend,
    EXPIRE_BATCH, LOAD_RECORDS, LOAD_RUN, WAITING, WAITING_COUNT,
};
use super::SqliteStore;

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
        let write = OwnedAppend {
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
