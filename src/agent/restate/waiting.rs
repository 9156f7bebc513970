//! How many runs wait for a person at once: the virtual object
//! `AgentWaiting`, one key for every service process of the deployment,
//! so the count is one and its changes are serialized by Restate.
//!
//! A run waits while any of its calls waits: its first waiting call takes
//! a seat for it, if the count is under the limit; its last one gives it
//! back. Each run's calls are state of their own (`run:{id}`), so taking
//! and giving cost the same at 10 waiting runs as at 10,000. A seat is
//! given back when its call is answered or its wait times out (a durable
//! timer), so no sweep is needed.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

/// The name of the object.
pub(super) const WAITING: &str = "AgentWaiting";
/// Its one key.
pub(super) const WAITING_KEY: &str = "runs";

/// The count of runs waiting for a person.
pub(super) struct Waiting;

/// A call of a run waiting for a person, and the most runs that may.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Seat {
    pub(super) run: String,
    pub(super) call: String,
    pub(super) max: u64,
}

const COUNT: &str = "count";

fn run_key(run: &str) -> String {
    format!("run:{run}")
}

#[allow(missing_docs, unreachable_pub)]
mod object {
    use super::*;

    #[restate_sdk::object(name = "AgentWaiting")]
    impl Waiting {
        /// A seat for `seat.run`'s call: true when its run waits already or
        /// the count has room (and then it counts one more).
        #[handler]
        async fn take(&self, ctx: ObjectContext<'_>, seat: Json<Seat>) -> HandlerResult<bool> {
            let Seat { run, call, max } = seat.into_inner();
            let key = run_key(&run);
            let mut calls = ctx
                .get::<Json<Vec<String>>>(&key)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default();
            if calls.is_empty() {
                let count = ctx.get::<u64>(COUNT).await?.unwrap_or(0);
                if count >= max {
                    return Ok(false);
                }
                ctx.set(COUNT, count + 1);
            }
            if !calls.contains(&call) {
                calls.push(call);
            }
            ctx.set(&key, Json(calls));
            Ok(true)
        }

        /// Gives `seat.call`'s place back; the run's seat goes with its
        /// last waiting call.
        #[handler]
        async fn give(&self, ctx: ObjectContext<'_>, seat: Json<Seat>) -> HandlerResult<()> {
            let Seat { run, call, .. } = seat.into_inner();
            let key = run_key(&run);
            let Some(Json(mut calls)) = ctx.get::<Json<Vec<String>>>(&key).await? else {
                return Ok(());
            };
            calls.retain(|waiting| *waiting != call);
            if calls.is_empty() {
                ctx.clear(&key);
                let count = ctx.get::<u64>(COUNT).await?.unwrap_or(0);
                ctx.set(COUNT, count.saturating_sub(1));
            } else {
                ctx.set(&key, Json(calls));
            }
            Ok(())
        }

        /// How many runs wait for a person now.
        #[handler]
        async fn count(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<u64> {
            Ok(ctx.get::<u64>(COUNT).await?.unwrap_or(0))
        }
    }
}
