//! [`RedisRunEvents`]: runs' event logs in Redis, shared by every process
//! that uses the same Redis and prefix.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}events:{run}` | stream | the run's events in order (field `e`: the record's JSON, `k`: its key), then an entry `end` once it ended |
//! | `{prefix}event-keys:{run}` | set | the keys written (`{attempt}:{n}:{part}`) |
//! | `{prefix}event-parts:{run}` | hash | each part's attempts so far |
//!
//! A write is one Lua script: a key written before is a duplicate; after
//! the end, or past the bound, it is refused; otherwise `XADD` appends
//! the record (Redis gives the entry its id, so writers on any process
//! share one order), the key joins the set, and every key of the run
//! expires the TTL after now. A begin (`HINCRBY`) and an end (one more
//! entry) are scripts too, and set the same expiry. A cursor is an
//! entry's id; a reader polls with `XRANGE` (every 25 ms) while it waits
//! — a blocking `XREAD` would hold the connection it shares with the
//! store.
//!
//! The log uses a [`RedisStore`]'s connection, prefix and timeout (its
//! keys are apart from the runs'): a Redis that does not answer is
//! [`StoreError::Unavailable`](crate::agent::store::StoreError::Unavailable)
//! within the store's timeout. The keys of a run are not hash-tagged:
//! the log is for one Redis (or a primary with replicas), not a Cluster.

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::Script;
use std::sync::Arc;

use crate::agent::store::redis::RedisStore;

use super::{
    check_name, encode, Cursor, EventKey, EventRecord, Limits, Page, RunEvents, RunEventsError,
    Written, MAX_READ_EVENTS, MAX_RUN_PARTS,
};

/// How often a reader waiting for events looks again.
const POLL: Duration = Duration::from_millis(25);

/// KEYS: the stream, the key set, the parts hash. ARGV: the key, the
/// record, the most events, the TTL in ms. Returns `{1, id}` appended,
/// `{0, ''}` a duplicate, `{2, ''}` ended, `{3, ''}` full.
const WRITE: &str = r"
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return {0, ''}
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 and last[1][2][1] == 'end' then
  return {2, ''}
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return {3, ''}
end
local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[2], 'k', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end
return {1, id}
";

/// KEYS: the stream, the key set, the parts hash. ARGV: the part, the
/// most parts, the TTL in ms. Returns the attempt, or -1: too many parts.
const BEGIN: &str = r"
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 0 and redis.call('HLEN', KEYS[3]) >= tonumber(ARGV[2]) then
  return -1
end
local attempt = redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[3])
end
return attempt
";

/// KEYS: the stream, the key set, the parts hash. ARGV: the TTL in ms.
/// Appends the end unless it is there.
const END: &str = r"
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 or last[1][2][1] ~= 'end' then
  redis.call('XADD', KEYS[1], '*', 'end', '1')
end
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return 1
";

/// Runs' event logs in Redis; see the [module docs](super). Clones share
/// the connection.
///
/// ```no_run
/// use toolstack::agent::run_events::RedisRunEvents;
/// use toolstack::agent::store::redis::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), toolstack::agent::store::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?.prefix("myapp:");
/// let events = RedisRunEvents::new(&store);
/// # let _ = events;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisRunEvents {
    store: RedisStore,
    limits: Limits,
    write: Arc<Script>,
    begin: Arc<Script>,
    end: Arc<Script>,
}

impl std::fmt::Debug for RedisRunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRunEvents")
            .field("store", &self.store)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The keys of one run: its stream, its written keys, its parts.
struct Keys {
    stream: String,
    written: String,
    parts: String,
}

impl RedisRunEvents {
    /// Logs in `store`'s Redis, under its prefix, each command bounded by
    /// its timeout; the default bounds.
    pub fn new(store: &RedisStore) -> Self {
        RedisRunEvents {
            store: store.clone(),
            limits: Limits::default(),
            write: Arc::new(Script::new(WRITE)),
            begin: Arc::new(Script::new(BEGIN)),
            end: Arc::new(Script::new(END)),
        }
    }

    /// Keeps at most `events` events per run
    /// ([`MAX_RUN_EVENTS`](super::MAX_RUN_EVENTS) by default).
    pub fn max_events(mut self, events: u64) -> Self {
        self.limits.events = events;
        self
    }

    /// Refuses records larger than `bytes` as JSON
    /// ([`MAX_EVENT_BYTES`](super::MAX_EVENT_BYTES) by default).
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.limits.record_bytes = bytes;
        self
    }

    /// Forgets a run's events `ttl` after its last write
    /// ([`EVENTS_TTL`](super::EVENTS_TTL) by default).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.limits.ttl = ttl;
        self
    }

    /// The run's stream of events: what a test or an operator looks at.
    pub fn stream_key(&self, run_id: &str) -> String {
        self.keys(run_id).stream
    }

    fn keys(&self, run_id: &str) -> Keys {
        Keys {
            stream: self.store.prefixed(format_args!("events:{run_id}")),
            written: self.store.prefixed(format_args!("event-keys:{run_id}")),
            parts: self.store.prefixed(format_args!("event-parts:{run_id}")),
        }
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.limits.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// One look: at most `max` entries after `after`.
    async fn look(
        &self,
        run_id: &str,
        key: &str,
        start: &str,
        max: usize,
    ) -> Result<Page, RunEventsError> {
        let mut connection = self.store.connection();
        let entries: Vec<(String, Vec<String>)> = self
            .store
            .bounded(
                redis::cmd("XRANGE")
                    .arg(key)
                    .arg(start)
                    .arg("+")
                    .arg("COUNT")
                    .arg(max)
                    .query_async(&mut connection),
            )
            .await?;
        let mut page = Page::default();
        for (id, fields) in entries {
            let cursor = Cursor::from(id);
            let why = match fields.first().map(String::as_str) {
                Some("e") => match fields.get(1).map(|json| serde_json::from_str(json)) {
                    Some(Ok(record)) => {
                        page.events.push((cursor, record));
                        continue;
                    }
                    Some(Err(err)) => err.to_string(),
                    None => "an entry with no record".to_owned(),
                },
                // The end is the stream's last entry: writes stop there.
                Some("end") => {
                    page.ended = true;
                    continue;
                }
                _ => format!("an entry of fields {fields:?}, neither an event nor the end"),
            };
            // The events before it are read; the next read meets it first.
            if page.events.is_empty() {
                return Err(RunEventsError::Corrupt {
                    run_id: run_id.to_owned(),
                    cursor: Some(cursor),
                    why,
                });
            }
            break;
        }
        Ok(page)
    }
}

/// The first entry id after `cursor` (an entry id `ms-seq`), for `XRANGE`.
fn start_after(cursor: Option<&Cursor>) -> Result<String, RunEventsError> {
    let Some(cursor) = cursor else {
        return Ok("-".to_owned());
    };
    let bad = || RunEventsError::BadCursor {
        cursor: cursor.to_string(),
    };
    let (ms, seq) = cursor.as_str().split_once('-').ok_or_else(bad)?;
    let (ms, seq): (u64, u64) = (
        ms.parse().map_err(|_| bad())?,
        seq.parse().map_err(|_| bad())?,
    );
    Ok(match seq.checked_add(1) {
        Some(seq) => format!("{ms}-{seq}"),
        None => format!("{}-0", ms.checked_add(1).ok_or_else(bad)?),
    })
}

impl RunEvents for RedisRunEvents {
    fn begin<'a>(
        &'a self,
        run_id: &'a str,
        part: &'a str,
    ) -> BoxFuture<'a, Result<u32, RunEventsError>> {
        Box::pin(async move {
            check_name("run id", run_id)?;
            check_name("part", part)?;
            let keys = self.keys(run_id);
            let mut invoke = self.begin.prepare_invoke();
            invoke
                .key(&keys.stream)
                .key(&keys.written)
                .key(&keys.parts)
                .arg(part)
                .arg(MAX_RUN_PARTS)
                .arg(self.ttl_ms());
            let mut connection = self.store.connection();
            let attempt: i64 = self
                .store
                .bounded(invoke.invoke_async(&mut connection))
                .await?;
            match attempt {
                -1 => Err(RunEventsError::TooManyParts {
                    run_id: run_id.to_owned(),
                    limit: MAX_RUN_PARTS,
                }),
                attempt => u32::try_from(attempt).map_err(|_| RunEventsError::Corrupt {
                    run_id: run_id.to_owned(),
                    cursor: None,
                    why: format!("part {part:?} counts {attempt} attempts"),
                }),
            }
        })
    }

    fn write<'a>(
        &'a self,
        run_id: &'a str,
        key: EventKey<'a>,
        record: &'a EventRecord,
    ) -> BoxFuture<'a, Result<Written, RunEventsError>> {
        Box::pin(async move {
            check_name("run id", run_id)?;
            check_name("part", key.part)?;
            let json = encode(run_id, record, self.limits.record_bytes)?;
            let keys = self.keys(run_id);
            let mut invoke = self.write.prepare_invoke();
            invoke
                .key(&keys.stream)
                .key(&keys.written)
                .key(&keys.parts)
                .arg(key.to_string())
                .arg(json)
                .arg(self.limits.events)
                .arg(self.ttl_ms());
            let mut connection = self.store.connection();
            let (outcome, id): (i64, String) = self
                .store
                .bounded(invoke.invoke_async(&mut connection))
                .await?;
            match outcome {
                1 => Ok(Written::Appended(Cursor::from(id))),
                0 => Ok(Written::Duplicate),
                2 => Err(RunEventsError::Ended {
                    run_id: run_id.to_owned(),
                }),
                3 => Err(RunEventsError::TooManyEvents {
                    run_id: run_id.to_owned(),
                    limit: self.limits.events,
                }),
                other => Err(RunEventsError::Corrupt {
                    run_id: run_id.to_owned(),
                    cursor: None,
                    why: format!("the write script answered {other}"),
                }),
            }
        })
    }

    fn end<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), RunEventsError>> {
        Box::pin(async move {
            check_name("run id", run_id)?;
            let keys = self.keys(run_id);
            let mut invoke = self.end.prepare_invoke();
            invoke
                .key(&keys.stream)
                .key(&keys.written)
                .key(&keys.parts)
                .arg(self.ttl_ms());
            let mut connection = self.store.connection();
            let _: i64 = self
                .store
                .bounded(invoke.invoke_async(&mut connection))
                .await?;
            Ok(())
        })
    }

    fn read<'a>(
        &'a self,
        run_id: &'a str,
        after: Option<&'a Cursor>,
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Page, RunEventsError>> {
        Box::pin(async move {
            check_name("run id", run_id)?;
            let start = start_after(after)?;
            let max = max.clamp(1, MAX_READ_EVENTS);
            let key = self.keys(run_id).stream;
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let page = self.look(run_id, &key, &start, max).await?;
                if !page.events.is_empty() || page.ended {
                    return Ok(page);
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(page);
                }
                tokio::time::sleep(POLL.min(deadline - now)).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_from_the_entry_after_it() {
        assert_eq!(start_after(None).unwrap(), "-");
        let after = |text: &str| start_after(Some(&Cursor::from(text)));
        assert_eq!(after("1700000000000-0").unwrap(), "1700000000000-1");
        assert_eq!(after(&format!("5-{}", u64::MAX)).unwrap(), "6-0");
        for bad in [
            "",
            "12",
            "a-1",
            "1-b",
            "-1",
            &format!("{}-{}", u64::MAX, u64::MAX),
        ] {
            assert!(
                matches!(after(bad), Err(RunEventsError::BadCursor { .. })),
                "{bad:?}"
            );
        }
    }
}
