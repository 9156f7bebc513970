//! The chunk log in a [`SqliteStore`]: three tables of its own in the
//! runs' file, made at the log's first use on a store; a reader polls
//! for new chunks (every 25 ms) while it waits.
//!
//! | table | holds |
//! |---|---|
//! | `toolstack_streams` | a row per response: whether it ended, when it was last written |
//! | `toolstack_chunks` | its chunks, by number |
//! | `toolstack_chats` | each chat's response in progress |
//!
//! The store knows nothing of them: the log reaches its connection
//! through [`SqliteStore::blocking_with_tables`], which makes them once
//! per store. They are the tables the store itself made before, so a
//! file written then reads as it did.

use std::time::Duration;

use futures_util::future::BoxFuture;
use rusqlite::{params, OptionalExtension};

use crate::agent::store::checkpoint::now_ms;
use crate::agent::store::sqlite::SqliteStore;
use crate::agent::store::StoreError;

use super::{polled, ChunkLog, Logged, LOG_TTL, MAX_LOGGED_CHUNKS};

/// The log's tables, made at its first use on a store.
const TABLES: &str = "
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

impl ChunkLog for SqliteStore {
    fn open<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (chat, stream) = (chat_id.to_owned(), stream_id.to_owned());
        self.blocking_with_tables(TABLES, move |connection| {
            let now = now_ms() as i64;
            let stale = now - LOG_TTL.as_millis() as i64;
            let tx = connection.transaction()?;
            // Logs untouched past the TTL go first.
            tx.execute(
                "DELETE FROM toolstack_chunks WHERE stream_id IN
                   (SELECT stream_id FROM toolstack_streams WHERE touched_ms < ?1)",
                params![stale],
            )?;
            tx.execute(
                "DELETE FROM toolstack_chats WHERE stream_id IN
                   (SELECT stream_id FROM toolstack_streams WHERE touched_ms < ?1)",
                params![stale],
            )?;
            tx.execute(
                "DELETE FROM toolstack_streams WHERE touched_ms < ?1",
                params![stale],
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO toolstack_streams (stream_id, ended, touched_ms) VALUES (?1, 0, ?2)",
                params![stream, now],
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO toolstack_chats (chat_id, stream_id) VALUES (?1, ?2)",
                params![chat, stream],
            )?;
            tx.commit()
        })
    }

    fn append<'a>(
        &'a self,
        stream_id: &'a str,
        index: usize,
        chunk: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if index >= MAX_LOGGED_CHUNKS {
            return Box::pin(std::future::ready(Ok(())));
        }
        let (stream, chunk) = (stream_id.to_owned(), chunk.to_owned());
        self.blocking_with_tables(TABLES, move |connection| {
            let tx = connection.transaction()?;
            tx.execute(
                "INSERT OR IGNORE INTO toolstack_chunks (stream_id, idx, chunk) VALUES (?1, ?2, ?3)",
                params![stream, index as i64, chunk],
            )?;
            tx.execute(
                "UPDATE toolstack_streams SET touched_ms = ?2 WHERE stream_id = ?1",
                params![stream, now_ms() as i64],
            )?;
            tx.commit()
        })
    }

    fn close<'a>(
        &'a self,
        chat_id: &'a str,
        stream_id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (chat, stream) = (chat_id.to_owned(), stream_id.to_owned());
        self.blocking_with_tables(TABLES, move |connection| {
            let tx = connection.transaction()?;
            tx.execute(
                "UPDATE toolstack_streams SET ended = 1, touched_ms = ?2 WHERE stream_id = ?1",
                params![stream, now_ms() as i64],
            )?;
            tx.execute(
                "DELETE FROM toolstack_chats WHERE chat_id = ?1 AND stream_id = ?2",
                params![chat, stream],
            )?;
            tx.commit()
        })
    }

    fn active<'a>(&'a self, chat_id: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let chat = chat_id.to_owned();
        self.blocking_with_tables(TABLES, move |connection| {
            connection
                .query_row(
                    "SELECT stream_id FROM toolstack_chats WHERE chat_id = ?1",
                    params![chat],
                    |row| row.get(0),
                )
                .optional()
        })
    }

    fn read<'a>(
        &'a self,
        stream_id: &'a str,
        from: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Logged, StoreError>> {
        Box::pin(polled(wait, move || {
            let stream = stream_id.to_owned();
            self.blocking_with_tables(TABLES, move |connection| {
                let ended: Option<bool> = connection
                    .query_row(
                        "SELECT ended FROM toolstack_streams WHERE stream_id = ?1",
                        params![stream],
                        |row| row.get(0),
                    )
                    .optional()?;
                let Some(ended) = ended else {
                    return Ok(Logged {
                        chunks: Vec::new(),
                        ended: true,
                    });
                };
                let mut query = connection.prepare(
                    "SELECT chunk FROM toolstack_chunks WHERE stream_id = ?1 AND idx >= ?2 ORDER BY idx",
                )?;
                let chunks = query
                    .query_map(params![stream, from as i64], |row| row.get(0))?
                    .collect::<Result<Vec<String>, _>>()?;
                Ok(Logged { chunks, ended })
            })
        }))
    }
}
