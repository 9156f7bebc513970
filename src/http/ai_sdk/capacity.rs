//! How many runs may wait for a person at once: the store counted, and
//! the runs that waited too long expired (by the agent's
//! [`lifecycle`](crate::agent::lifecycle)) when it is full — each call
//! riding out a short outage of the store as the agent's runs do
//! ([`RideOut`]).

use std::time::Duration;

use crate::agent::lifecycle;
use crate::agent::store::{RunStore, StoreError};
use crate::agent::RideOut;

/// Whether `store` has room for one more waiting run, counted in
/// constant time; when it is full, the runs waited past `timeout` are
/// forgotten (by the store's time index) and it is counted again.
pub(super) async fn room(
    store: &dyn RunStore,
    max_waiting_runs: usize,
    timeout: Duration,
    ride_out: RideOut,
) -> Result<bool, StoreError> {
    let count = || {
        ride_out.call("counting the runs waiting for approval", "", None, || {
            store.waiting_count()
        })
    };
    if count().await? < max_waiting_runs {
        return Ok(true);
    }
    ride_out
        .call("expiring the runs waiting for approval", "", None, || {
            lifecycle::expire_waiting(store, timeout)
        })
        .await?;
    Ok(count().await? < max_waiting_runs)
}
