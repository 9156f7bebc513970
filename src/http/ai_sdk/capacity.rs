//! How many runs may wait for a person at once: the store counted, and
//! the runs that waited too long expired (by the agent's
//! [`lifecycle`](crate::agent::lifecycle)) when it is full.

use std::time::Duration;

use crate::agent::lifecycle;
use crate::agent::store::RunStore;

/// Whether `store` has room for one more waiting run, counted in
/// constant time; when it is full, the runs waited past `timeout` are
/// forgotten (by the store's time index) and it is counted again.
pub(super) async fn room(
    store: &dyn RunStore,
    max_waiting_runs: usize,
    timeout: Duration,
) -> Result<bool, crate::agent::store::StoreError> {
    if store.waiting_count().await? < max_waiting_runs {
        return Ok(true);
    }
    lifecycle::expire_waiting(store, timeout).await?;
    Ok(store.waiting_count().await? < max_waiting_runs)
}
