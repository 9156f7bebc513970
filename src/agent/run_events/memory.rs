//! [`MemoryRunEvents`]: runs' event logs in this process's memory,
//! readers woken as events arrive.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{
    check_name, encode, Cursor, EventKey, EventRecord, Limits, Page, RunEvents, RunEventsError,
    Written, MAX_READ_EVENTS, MAX_RUN_PARTS,
};

/// Runs' event logs in this process's memory: for tests, and for runs
/// whose writers and readers share one process. A reader waiting is woken
/// as an event arrives (not polled). Clones share the logs.
///
/// A cursor is the count of the run's events up to and with the event.
#[derive(Clone, Debug, Default)]
pub struct MemoryRunEvents {
    shared: Arc<Shared>,
    limits: Limits,
}

#[derive(Debug, Default)]
struct Shared {
    runs: Mutex<HashMap<String, Run>>,
    /// Woken at every event and every end, of any run: a reader looks
    /// again (one notifier, so that a reader of a run not written yet is
    /// woken by its first event too).
    arrived: Notify,
}

#[derive(Debug)]
struct Run {
    events: Vec<EventRecord>,
    written: HashSet<String>,
    attempts: HashMap<String, u32>,
    ended: bool,
    touched: Instant,
}

impl Run {
    fn new() -> Self {
        Run {
            events: Vec::new(),
            written: HashSet::new(),
            attempts: HashMap::new(),
            ended: false,
            touched: Instant::now(),
        }
    }
}

impl MemoryRunEvents {
    /// Empty logs, with the default bounds.
    pub fn new() -> Self {
        MemoryRunEvents::default()
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

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Run>> {
        self.shared.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The run's log, a new one when it has none or it expired (the
    /// expired ones forgotten first). A change sets when it was touched.
    fn run<'m>(&self, runs: &'m mut HashMap<String, Run>, run_id: &str) -> &'m mut Run {
        let ttl = self.limits.ttl;
        let now = Instant::now();
        if runs
            .get(run_id)
            .is_none_or(|run| now.duration_since(run.touched) >= ttl)
        {
            // Only as a run starts: a sweep per write would cost every
            // run's write the whole map.
            runs.retain(|_, run| now.duration_since(run.touched) < ttl);
        }
        runs.entry(run_id.to_owned()).or_insert_with(Run::new)
    }
}

/// Parses a cursor of this log: the count of events before the next.
fn position(cursor: Option<&Cursor>) -> Result<usize, RunEventsError> {
    match cursor {
        None => Ok(0),
        Some(cursor) => cursor
            .as_str()
            .parse()
            .map_err(|_| RunEventsError::BadCursor {
                cursor: cursor.to_string(),
            }),
    }
}

impl MemoryRunEvents {
    fn begin_now(&self, run_id: &str, part: &str) -> Result<u32, RunEventsError> {
        check_name("run id", run_id)?;
        check_name("part", part)?;
        let mut runs = self.lock();
        let run = self.run(&mut runs, run_id);
        if !run.attempts.contains_key(part) && run.attempts.len() as u64 >= MAX_RUN_PARTS {
            return Err(RunEventsError::TooManyParts {
                run_id: run_id.to_owned(),
                limit: MAX_RUN_PARTS,
            });
        }
        let attempt = run.attempts.entry(part.to_owned()).or_insert(0);
        *attempt = attempt.saturating_add(1);
        let attempt = *attempt;
        run.touched = Instant::now();
        Ok(attempt)
    }

    fn write_now(
        &self,
        run_id: &str,
        key: EventKey<'_>,
        record: &EventRecord,
    ) -> Result<Written, RunEventsError> {
        check_name("run id", run_id)?;
        check_name("part", key.part)?;
        encode(run_id, record, self.limits.record_bytes)?;
        let key = key.to_string();
        let mut runs = self.lock();
        let run = self.run(&mut runs, run_id);
        if run.written.contains(&key) {
            return Ok(Written::Duplicate);
        }
        if run.ended {
            return Err(RunEventsError::Ended {
                run_id: run_id.to_owned(),
            });
        }
        if run.events.len() as u64 >= self.limits.events {
            return Err(RunEventsError::TooManyEvents {
                run_id: run_id.to_owned(),
                limit: self.limits.events,
            });
        }
        run.written.insert(key);
        run.events.push(record.clone());
        run.touched = Instant::now();
        Ok(Written::Appended(Cursor::from(
            run.events.len().to_string(),
        )))
    }

    fn end_now(&self, run_id: &str) -> Result<(), RunEventsError> {
        check_name("run id", run_id)?;
        let mut runs = self.lock();
        let run = self.run(&mut runs, run_id);
        run.ended = true;
        run.touched = Instant::now();
        Ok(())
    }
}

impl RunEvents for MemoryRunEvents {
    fn begin<'a>(
        &'a self,
        run_id: &'a str,
        part: &'a str,
    ) -> BoxFuture<'a, Result<u32, RunEventsError>> {
        Box::pin(std::future::ready(self.begin_now(run_id, part)))
    }

    fn write<'a>(
        &'a self,
        run_id: &'a str,
        key: EventKey<'a>,
        record: &'a EventRecord,
    ) -> BoxFuture<'a, Result<Written, RunEventsError>> {
        let written = self.write_now(run_id, key, record);
        if matches!(written, Ok(Written::Appended(_))) {
            self.shared.arrived.notify_waiters();
        }
        Box::pin(std::future::ready(written))
    }

    fn end<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<(), RunEventsError>> {
        let ended = self.end_now(run_id);
        self.shared.arrived.notify_waiters();
        Box::pin(std::future::ready(ended))
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
            let from = position(after)?;
            let max = max.clamp(1, MAX_READ_EVENTS);
            let deadline = Instant::now() + wait;
            loop {
                // Made before looking, so no event slips between the look
                // and the wait (a `Notified` gets every `notify_waiters`
                // from its making on).
                let arrived = self.shared.arrived.notified();
                {
                    let runs = self.lock();
                    // A run not written yet, or forgotten, reads as empty.
                    if let Some(run) = runs
                        .get(run_id)
                        .filter(|run| run.touched.elapsed() < self.limits.ttl)
                    {
                        let events: Vec<(Cursor, EventRecord)> = run
                            .events
                            .iter()
                            .enumerate()
                            .skip(from)
                            .take(max)
                            .map(|(i, record)| (Cursor::from((i + 1).to_string()), record.clone()))
                            .collect();
                        let ended = run.ended && from + events.len() >= run.events.len();
                        if !events.is_empty() || ended {
                            return Ok(Page { events, ended });
                        }
                    }
                }
                if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                    return Ok(Page::default());
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
