//! [`Replicas`]: the handle on the replicas behind a balanced toolbox.

use std::fmt;
use std::sync::Arc;

use tower::discover::Change;

use super::set::{lock, Inner, ReplicaState};
use crate::ToolError;

/// The replicas behind a balanced toolbox: add and remove them at run
/// time, see which are in.
#[derive(Clone)]
pub struct Replicas {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicas")
            .field("states", &*lock(&self.inner.states))
            .finish_non_exhaustive()
    }
}

impl Replicas {
    /// Adds a replica: connected, its tools compared with the others'.
    pub async fn add(&self, url: impl Into<String>) -> Result<(), ToolError> {
        let url: Arc<str> = Arc::from(url.into());
        let replica = self.inner.connect(&url).await?;
        lock(&self.inner.states).insert(Arc::clone(&url), ReplicaState::In);
        let _ = self.inner.changes.send(Change::Insert(url, replica));
        Ok(())
    }

    /// Removes a replica: calls in flight on it go on; no new one goes to it.
    pub fn remove(&self, url: &str) {
        if lock(&self.inner.states).remove(url).is_some() {
            let _ = self.inner.changes.send(Change::Remove(Arc::from(url)));
        }
    }

    /// Each replica and where it stands.
    pub fn states(&self) -> Vec<(String, ReplicaState)> {
        let mut states: Vec<_> = lock(&self.inner.states)
            .iter()
            .map(|(url, state)| (url.to_string(), *state))
            .collect();
        states.sort();
        states
    }
}
