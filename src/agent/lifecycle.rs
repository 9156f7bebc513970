//! How a run's life ends from outside its loop: the one place that
//! forgets a stored run or expires the runs that waited too long.
//!
//! A run lives in its journal (`journal/`), the one writer of its
//! state: a run begins there (new, a session's next run, or a waiting
//! run taken to be resumed), every change is appended there, and its own
//! loop ends it there — finished, failed or stopped, or suspended to wait
//! for a person. What ends a run without its loop is here, so that no
//! other module deletes runs around the journal:
//!
//! | end | asked by | what happens |
//! |---|---|---|
//! | finished, failed, stopped | the run's loop, through its journal | the store keeps it for its `finished_ttl`, then sweeps it |
//! | [forgotten](forget) | [`Session::delete`](super::Session::delete); the AI SDK endpoint, for an answer to a run that waited past its timeout (its calls never ran) | the store deletes it at once |
//! | [expired waiting](expire_waiting) | the AI SDK endpoint, when the store is full of waiting runs | the store deletes the runs waiting since before the timeout, by its time index |
//! | abandoned | nobody: a running run whose lease passed with no append | [`MemoryStore::abandoned_ttl`](super::store::MemoryStore::abandoned_ttl), when set |
//!
//! A run going on in this process when it is forgotten is not stopped
//! here: its next append finds no run at the version it wrote and fails
//! (as when another process took the run over), and its loop ends it —
//! with [`OnStoreError::Continue`](super::OnStoreError::Continue), it goes
//! on in memory, unsaved. Until its loop ends it keeps its place among
//! the sessions running in this process (`running_sessions.rs`), so a session
//! deleted mid-run is still never run twice at once here.

#[cfg(feature = "http")]
use std::time::Duration;

#[cfg(feature = "http")]
use super::store::checkpoint::now_ms;
use super::store::{RunStore, StoreError};

/// Forgets the run `run_id` in `store`, journal and all, whatever its
/// status; whether the store had it.
pub(crate) async fn forget(store: &dyn RunStore, run_id: &str) -> Result<bool, StoreError> {
    store.delete(run_id).await
}

/// Forgets the runs of `store` that have waited for a person for longer
/// than `timeout` (since their last write), the oldest first; how many.
/// (Only the AI SDK endpoint expires runs that wait.)
#[cfg(feature = "http")]
pub(crate) async fn expire_waiting(
    store: &dyn RunStore,
    timeout: Duration,
) -> Result<usize, StoreError> {
    let timeout = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    store.expire_waiting(now_ms().saturating_sub(timeout)).await
}
