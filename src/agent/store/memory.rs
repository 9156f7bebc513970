//! [`MemoryStore`]: runs' journals in this process's memory.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::{ready, BoxFuture};

use super::checkpoint::now_ms;
use super::{
    Append, Journal, RunStatus, RunStore, StoreError, Stored, Version, DEFAULT_FINISHED_TTL,
    MAX_RECORD_BYTES,
};

/// Runs' journals in memory, encoded as every store encodes them (so the
/// bounds and errors are the same): for tests, and for one process that
/// suspends runs for a person's decision and resumes them, without
/// surviving a restart. An append costs the change (its records are
/// kept as they are encoded); a finished run is forgotten after
/// [`finished_ttl`](Self::finished_ttl). Clones share the runs.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    runs: Arc<Mutex<Runs>>,
    limit: usize,
    finished_ttl: Duration,
    /// Keep a finished run's head only, not its journal.
    heads_only: bool,
    /// Forget a running run this long after its lease passed.
    abandoned_ttl: Option<Duration>,
}

#[derive(Debug, Default)]
struct Runs {
    runs: HashMap<String, RunEntry>,
    /// The waiting runs, by when they were written: counted and expired
    /// without looking at the others.
    waiting: BTreeSet<(u64, String)>,
    /// The finished runs, by when they expire, and the running ones that
    /// may be abandoned, by when they would be.
    expiring: BTreeSet<(u64, String)>,
}

/// A stored run.
#[derive(Debug)]
struct RunEntry {
    version: Version,
    head: Arc<[u8]>,
    status: RunStatus,
    saved_at_ms: u64,
    expires_ms: Option<u64>,
    snapshot: Option<Arc<[u8]>>,
    records: Vec<Arc<[u8]>>,
}

impl Runs {
    fn remove(&mut self, run_id: &str) -> Option<RunEntry> {
        let entry = self.runs.remove(run_id)?;
        self.unindex(run_id, &entry);
        Some(entry)
    }

    fn unindex(&mut self, run_id: &str, entry: &RunEntry) {
        if entry.status == RunStatus::Waiting {
            self.waiting.remove(&(entry.saved_at_ms, run_id.to_owned()));
        }
        if let Some(expires) = entry.expires_ms {
            self.expiring.remove(&(expires, run_id.to_owned()));
        }
    }

    fn index(&mut self, run_id: &str, entry: &RunEntry) {
        if entry.status == RunStatus::Waiting {
            self.waiting.insert((entry.saved_at_ms, run_id.to_owned()));
        }
        if let Some(expires) = entry.expires_ms {
            self.expiring.insert((expires, run_id.to_owned()));
        }
    }

    fn sweep(&mut self, now: u64) {
        while let Some((expires, run_id)) = self.expiring.first().cloned() {
            if expires > now {
                break;
            }
            self.remove(&run_id);
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store; records of at most [`MAX_RECORD_BYTES`]; finished
    /// runs kept a day.
    pub fn new() -> Self {
        MemoryStore {
            runs: Arc::default(),
            limit: MAX_RECORD_BYTES,
            finished_ttl: DEFAULT_FINISHED_TTL,
            heads_only: false,
            abandoned_ttl: None,
        }
    }

    /// Refuses records larger than `bytes`.
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

    /// Keeps of a finished run only its head — that it ended, and how —
    /// not its journal: enough to refuse an answer sent again, at the
    /// cost of a few bytes a run (the AI SDK endpoint's own store).
    pub fn finished_heads_only(mut self) -> Self {
        self.heads_only = true;
        self
    }

    /// Forgets a running run that has not been written for `ttl` past
    /// its lease: a run whose process dropped it (a client gone, with no
    /// one to end it). Off by default.
    pub fn abandoned_ttl(mut self, ttl: Duration) -> Self {
        self.abandoned_ttl = Some(ttl);
        self
    }

    /// Replaces the stored form of `run_id` with `snapshot` alone — a
    /// whole checkpoint, as runs were stored before the journal, or bytes
    /// that do not parse (a test's way to corrupt a run) —, keeping its
    /// version.
    pub fn put_raw(&self, run_id: &str, snapshot: &[u8]) {
        let mut runs = lock(&self.runs);
        let version = runs
            .remove(run_id)
            .map_or(Version(1), |entry| entry.version);
        runs.runs.insert(
            run_id.to_owned(),
            RunEntry {
                version,
                head: Arc::from(&b""[..]),
                status: RunStatus::Running,
                saved_at_ms: 0,
                expires_ms: None,
                snapshot: Some(Arc::from(snapshot)),
                records: Vec::new(),
            },
        );
    }

    /// Replaces the last record of `run_id` with `bytes` (a test's way to
    /// corrupt a record); whether it had one.
    pub fn put_raw_record(&self, run_id: &str, bytes: &[u8]) -> bool {
        let mut runs = lock(&self.runs);
        match runs
            .runs
            .get_mut(run_id)
            .and_then(|entry| entry.records.last_mut())
        {
            Some(record) => {
                *record = Arc::from(bytes);
                true
            }
            None => false,
        }
    }

    /// Moves the last write of `run_id` back by `by`, as if it were that
    /// much older — when it was written, and when it expires (a test's way
    /// to let a run expire without waiting); whether there was such a run.
    pub fn backdate(&self, run_id: &str, by: Duration) -> bool {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut runs = lock(&self.runs);
        let Some(mut entry) = runs.remove(run_id) else {
            return false;
        };
        entry.saved_at_ms = entry.saved_at_ms.saturating_sub(by);
        entry.expires_ms = entry.expires_ms.map(|at| at.saturating_sub(by));
        if let Ok(mut head) = super::Head::from_bytes(run_id, &entry.head) {
            head.saved_at_ms = entry.saved_at_ms;
            entry.head = Arc::from(head.to_bytes());
        }
        runs.index(run_id, &entry);
        runs.runs.insert(run_id.to_owned(), entry);
        true
    }

    /// How many runs are stored.
    pub fn len(&self) -> usize {
        lock(&self.runs).runs.len()
    }

    /// Whether no run is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock(runs: &Mutex<Runs>) -> std::sync::MutexGuard<'_, Runs> {
    runs.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunStore for MemoryStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        // The run's bytes are shared out of the lock and decoded after it;
        // a finished run past its time is gone, swept or not.
        let now = now_ms();
        let found = lock(&self.runs)
            .runs
            .get(run_id)
            .filter(|entry| entry.expires_ms.is_none_or(|expires| expires > now))
            .map(|entry| {
                (
                    entry.version,
                    Arc::clone(&entry.head),
                    entry.snapshot.clone(),
                    entry.records.clone(),
                )
            });
        let loaded = found
            .map(|(version, head, snapshot, records)| {
                Journal {
                    run_id,
                    version,
                    head: Some(&head),
                    snapshot: snapshot.as_deref(),
                    records: records.iter().map(|record| &**record).collect(),
                }
                .fold(self.limit)
            })
            .transpose();
        Box::pin(ready(loaded))
    }

    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Version, StoreError>> {
        let now = now_ms();
        let mut runs = lock(&self.runs);
        let found = runs
            .runs
            .get(append.run_id)
            .map_or(Version::NONE, |entry| entry.version);
        if found != append.expected {
            return Box::pin(ready(Err(append.conflict(found))));
        }
        let version = append.version();
        let previous = runs.remove(append.run_id);
        let (mut snapshot, mut records) = previous
            .map(|entry| (entry.snapshot, entry.records))
            .unwrap_or_default();
        let status = append.head.status;
        let done = matches!(status, RunStatus::Done { .. });
        match append.snapshot {
            _ if done && self.heads_only => {
                snapshot = None;
                records = Vec::new();
            }
            Some(bytes) => {
                snapshot = Some(Arc::from(bytes));
                records.clear();
            }
            None => records.extend(append.records.iter().map(|r| Arc::from(&r[..]))),
        }
        let saved_at_ms = append.head.saved_at_ms;
        let millis = |ttl: Duration| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let expires_ms = match (&append.head.holder, self.abandoned_ttl) {
            _ if done => Some(now.saturating_add(millis(self.finished_ttl))),
            (Some(holder), Some(ttl)) if status == RunStatus::Running => {
                Some(holder.until_ms.saturating_add(millis(ttl)))
            }
            _ => None,
        };
        let entry = RunEntry {
            version,
            head: Arc::from(append.head_bytes),
            status,
            saved_at_ms,
            expires_ms,
            snapshot,
            records,
        };
        runs.index(append.run_id, &entry);
        runs.runs.insert(append.run_id.to_owned(), entry);
        runs.sweep(now);
        Box::pin(ready(Ok(version)))
    }

    fn waiting_count(&self) -> BoxFuture<'_, Result<usize, StoreError>> {
        Box::pin(ready(Ok(lock(&self.runs).waiting.len())))
    }

    fn expire_waiting(&self, saved_before_ms: u64) -> BoxFuture<'_, Result<usize, StoreError>> {
        let mut runs = lock(&self.runs);
        let mut expired = 0;
        while let Some((saved, run_id)) = runs.waiting.first().cloned() {
            if saved >= saved_before_ms {
                break;
            }
            runs.remove(&run_id);
            expired += 1;
        }
        Box::pin(ready(Ok(expired)))
    }

    fn waiting(&self, limit: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        let ids = lock(&self.runs)
            .waiting
            .iter()
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect();
        Box::pin(ready(Ok(ids)))
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(ready(Ok(lock(&self.runs).remove(run_id).is_some())))
    }

    fn max_record_bytes(&self) -> usize {
        self.limit
    }
}
