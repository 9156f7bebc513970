//! Approvals asked of the person at the front end, and the runs kept
//! waiting for their answer between two requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::approval::{ApprovalRequest, CallerApprover, Decision};

use super::chunks::Live;
use super::ids::{lock, new_token};
use super::THE_USER;

/// One run's approval requests: the approval id each call got, the
/// answer's channel, and whether the caller's approver has been asked.
#[derive(Default)]
pub(super) struct Approvals {
    pub(super) inner: Mutex<ApprovalsInner>,
}

#[derive(Default)]
pub(super) struct ApprovalsInner {
    pub(super) slots: HashMap<String, Slot>,
    /// The response waiting for the caller's approver to be asked.
    pub(super) waker: Option<Waker>,
}

pub(super) struct Slot {
    pub(super) approval_id: String,
    pub(super) answer: Option<oneshot::Sender<Decision>>,
    pub(super) wait: Option<oneshot::Receiver<Decision>>,
    pub(super) asked: bool,
}

impl Slot {
    pub(super) fn new() -> Self {
        let (answer, wait) = oneshot::channel();
        Slot {
            approval_id: new_token(),
            answer: Some(answer),
            wait: Some(wait),
            asked: false,
        }
    }
}

impl Approvals {
    /// The approver the run's calls ask.
    pub(super) fn caller(self: &Arc<Self>) -> CallerApprover {
        let approvals = Arc::clone(self);
        CallerApprover::new(THE_USER, move |asked: &ApprovalRequest| {
            let wait = approvals.ask(&asked.call_id);
            async move {
                wait.await.unwrap_or_else(|_| {
                    Decision::deny("no answer came: the conversation ended without one")
                })
            }
        })
    }

    /// The approval id of `call_id`'s request.
    pub(super) fn approval_id(&self, call_id: &str) -> String {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .entry(call_id.to_owned())
            .or_insert_with(Slot::new);
        slot.approval_id.clone()
    }

    /// The caller's approver is asked about `call_id`: the answer's
    /// receiver. Asked again (the same id twice), it gets a new request.
    pub(super) fn ask(&self, call_id: &str) -> oneshot::Receiver<Decision> {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .entry(call_id.to_owned())
            .or_insert_with(Slot::new);
        if slot.wait.is_none() {
            *slot = Slot::new();
        }
        slot.asked = true;
        let wait = slot.wait.take().expect("a fresh or untaken slot");
        if let Some(waker) = inner.waker.take() {
            waker.wake();
        }
        wait
    }

    /// Whether the caller's approver was asked about every one of `calls`;
    /// if not, `waker` is woken when it is.
    pub(super) fn all_asked(&self, calls: &[String], waker: &Waker) -> bool {
        let mut inner = lock(&self.inner);
        let all = calls
            .iter()
            .all(|call| inner.slots.get(call).is_some_and(|slot| slot.asked));
        if !all {
            inner.waker = Some(waker.clone());
        }
        all
    }

    pub(super) fn asked(&self, call_id: &str) -> bool {
        lock(&self.inner)
            .slots
            .get(call_id)
            .is_some_and(|slot| slot.asked)
    }

    /// The approval ids of `calls`.
    pub(super) fn ids_of(&self, calls: &[String]) -> Vec<String> {
        let inner = lock(&self.inner);
        calls
            .iter()
            .filter_map(|call| inner.slots.get(call).map(|s| s.approval_id.clone()))
            .collect()
    }

    /// Delivers the decision for `approval_id`.
    pub(super) fn answer(&self, approval_id: &str, decision: Decision) {
        let mut inner = lock(&self.inner);
        let slot = inner
            .slots
            .values_mut()
            .find(|slot| slot.approval_id == approval_id);
        if let Some(answer) = slot.and_then(|slot| slot.answer.take()) {
            let _ = answer.send(decision);
        }
    }

    /// Denies every call still waiting, with `reason`.
    pub(super) fn deny_all(&self, reason: &str) {
        let mut inner = lock(&self.inner);
        for slot in inner.slots.values_mut() {
            if let Some(answer) = slot.answer.take() {
                let _ = answer.send(Decision::deny(reason));
            }
        }
    }
}

/// The runs kept for an approval answer.
#[derive(Default)]
pub(super) struct WaitingRuns {
    pub(super) runs: HashMap<u64, Parked>,
    pub(super) by_approval: HashMap<String, u64>,
    pub(super) next: u64,
}

pub(super) struct Parked {
    pub(super) live: Live,
    pub(super) approval_ids: Vec<String>,
    pub(super) since: Instant,
}

impl WaitingRuns {
    /// Drops the runs kept longer than `timeout` (cancelling their calls).
    pub(super) fn sweep(&mut self, timeout: Duration) {
        let now = Instant::now();
        let expired: Vec<u64> = self
            .runs
            .iter()
            .filter(|(_, parked)| now.duration_since(parked.since) >= timeout)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            drop(self.take(key));
        }
    }

    pub(super) fn take(&mut self, key: u64) -> Option<Parked> {
        let parked = self.runs.remove(&key)?;
        for id in &parked.approval_ids {
            self.by_approval.remove(id);
        }
        Some(parked)
    }
}
