//! [`MemoryStore`]: checkpoints in this process's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::{ready, BoxFuture};

use super::{Checkpoint, RunStatus, RunStore, StoreError, Stored, Version, MAX_CHECKPOINT_BYTES};

/// Checkpoints in memory, encoded as every store encodes them (so the
/// bounds and errors are the same): for tests, and for one process that
/// suspends runs for a person's decision and resumes them, without
/// surviving a restart. Clones share the runs. With the `http` feature it
/// is also a [`ChunkLog`](crate::http::ai_sdk::ChunkLog) (resumable streams
/// in one process).
#[derive(Clone, Debug)]
pub struct MemoryStore {
    runs: Arc<Mutex<HashMap<String, Entry>>>,
    limit: usize,
    /// The chunks of chat responses in progress (resumable streams).
    #[cfg(feature = "http")]
    pub(crate) chunks: Arc<crate::http::ai_sdk::log::MemoryChunks>,
}

/// A stored run: its version, its encoded checkpoint, its status.
type Entry = (Version, Arc<[u8]>, RunStatus);

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store; checkpoints of at most [`MAX_CHECKPOINT_BYTES`].
    pub fn new() -> Self {
        MemoryStore {
            runs: Arc::default(),
            limit: MAX_CHECKPOINT_BYTES,
            #[cfg(feature = "http")]
            chunks: Arc::default(),
        }
    }

    /// Refuses checkpoints larger than `bytes`.
    pub fn max_checkpoint_bytes(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Replaces the stored bytes of `run_id` as they are (a test's way to
    /// corrupt a checkpoint), keeping its version.
    pub fn put_raw(&self, run_id: &str, bytes: &[u8]) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        let version = runs.get(run_id).map_or(Version(1), |(v, ..)| *v);
        runs.insert(
            run_id.to_owned(),
            (version, Arc::from(bytes), RunStatus::Running),
        );
    }

    /// How many runs are stored.
    pub fn len(&self) -> usize {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no run is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RunStore for MemoryStore {
    fn load<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        let found = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .map(|(version, bytes, _)| (*version, Arc::clone(bytes)));
        let loaded = found
            .map(|(version, bytes)| {
                Checkpoint::from_bytes(run_id, &bytes, self.limit).map(|checkpoint| Stored {
                    checkpoint,
                    version,
                })
            })
            .transpose();
        Box::pin(ready(loaded))
    }

    fn save<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        expected: Version,
    ) -> BoxFuture<'a, Result<Version, StoreError>> {
        let saved = checkpoint.to_bytes(self.limit).and_then(|bytes| {
            let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            let found = runs
                .get(&checkpoint.run_id)
                .map_or(Version::NONE, |(v, ..)| *v);
            if found != expected {
                return Err(StoreError::Conflict {
                    run_id: checkpoint.run_id.clone(),
                    expected,
                    found,
                });
            }
            let version = found.next();
            runs.insert(
                checkpoint.run_id.clone(),
                (version, Arc::from(bytes), checkpoint.status),
            );
            Ok(version)
        });
        Box::pin(ready(saved))
    }

    fn waiting(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        let mut ids: Vec<String> = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, (_, _, status))| *status == RunStatus::Waiting)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        Box::pin(ready(Ok(ids)))
    }

    fn delete<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let removed = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id)
            .is_some();
        Box::pin(ready(Ok(removed)))
    }
}
