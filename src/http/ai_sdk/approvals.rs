//! Approvals asked of the person at the front end. Their answers come in
//! a later request, which resumes the run from the store: an approval id
//! is the run's id and the call's, `{run_id}:{call_id}` — the run id's
//! 128 random bits are what entitle a request to resume the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;

use tokio::sync::oneshot;

use crate::approval::{ApprovalKeys, ApprovalRequest, CallerApprover, Decision};

use super::THE_USER;

/// One response's approval requests: which calls the person was asked
/// about, and the response waiting for that.
#[derive(Default)]
pub(super) struct Approvals {
    /// The run's id, once its stream exists.
    pub(super) run_id: OnceLock<String>,
    calls: Mutex<AskedCalls>,
    /// The keys that sign each request, if the endpoint signs.
    keys: Option<Arc<ApprovalKeys>>,
}

/// The calls of one response put to the person, those refused before
/// they could be, and the response waiting for them all to be asked.
#[derive(Default)]
struct AskedCalls {
    /// The calls asked about in this response, and where a decision made
    /// here (a denial, when the endpoint cannot keep the run) goes.
    asked: HashMap<String, Option<oneshot::Sender<Decision>>>,
    /// The response waiting for the caller's approver to be asked.
    waker: Option<Waker>,
    /// Calls denied here before the caller's approver was asked about
    /// them, with why.
    refused: HashMap<String, String>,
}

impl Approvals {
    /// A response's approvals, signed with `keys` if given.
    pub(super) fn new(keys: Option<Arc<ApprovalKeys>>) -> Self {
        Approvals {
            keys,
            ..Approvals::default()
        }
    }

    /// The asked calls, locked (a poisoned lock taken as it is).
    fn calls(&self) -> MutexGuard<'_, AskedCalls> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The signature of the request for `call_id` (shown as `part_id`) of
    /// `tool` with `arguments`, if the endpoint signs.
    pub(super) fn sign(
        &self,
        call_id: &str,
        part_id: &str,
        tool: &str,
        arguments: &str,
    ) -> Option<String> {
        let keys = self.keys.as_ref()?;
        Some(keys.sign(&self.approval_id(call_id), part_id, tool, arguments))
    }

    /// The approver the run's calls ask: it notes the call and waits —
    /// the response ends and the run is suspended in the store, where the
    /// answer finds it — unless the endpoint cannot keep the run and
    /// denies the call here ([`refuse`](Self::refuse)).
    pub(super) fn caller(self: &Arc<Self>) -> CallerApprover {
        let approvals = Arc::clone(self);
        CallerApprover::new(THE_USER, move |asked: &ApprovalRequest| {
            let wait = approvals.ask(&asked.call_id);
            async move {
                match wait.await {
                    Ok(decision) => decision,
                    // The run was suspended (dropped) before an answer.
                    Err(_) => std::future::pending().await,
                }
            }
        })
    }

    /// The approval id of `call_id`'s request.
    pub(super) fn approval_id(&self, call_id: &str) -> String {
        let run_id = self.run_id.get().map_or("", String::as_str);
        format!("{run_id}:{call_id}")
    }

    /// The caller's approver is asked about `call_id`: where a decision
    /// made here arrives.
    fn ask(&self, call_id: &str) -> oneshot::Receiver<Decision> {
        let (answer, wait) = oneshot::channel();
        let mut calls = self.calls();
        let answer = match calls.refused.remove(call_id) {
            Some(why) => {
                let _ = answer.send(Decision::deny(why));
                None
            }
            None => Some(answer),
        };
        calls.asked.insert(call_id.to_owned(), answer);
        if let Some(waker) = calls.waker.take() {
            waker.wake();
        }
        wait
    }

    /// Whether the caller's approver was asked about every one of `calls`
    /// and waits for the person; if not, `waker` is woken when it is.
    pub(super) fn all_asked(&self, calls: &[String], waker: &Waker) -> bool {
        let mut asked = self.calls();
        // A call decided here (denied for want of room) does not wait.
        let all = calls
            .iter()
            .all(|call| matches!(asked.asked.get(call), Some(Some(_))));
        if !all {
            asked.waker = Some(waker.clone());
        }
        all
    }

    /// Whether the caller's approver — the person — was asked about
    /// `call_id`.
    pub(super) fn was_asked(&self, call_id: &str) -> bool {
        self.calls().asked.contains_key(call_id)
    }

    /// Denies `call_id` with `reason`, whether its approver was asked
    /// already or is about to be.
    pub(super) fn refuse(&self, call_id: &str, reason: &str) {
        let mut calls = self.calls();
        match calls.asked.get_mut(call_id) {
            Some(answer) => {
                if let Some(answer) = answer.take() {
                    let _ = answer.send(Decision::deny(reason));
                }
            }
            None => {
                calls.refused.insert(call_id.to_owned(), reason.to_owned());
            }
        }
    }
}

/// The run and the call an approval id names, if it is one.
pub(super) fn parse_approval_id(approval_id: &str) -> Option<(&str, &str)> {
    let (run_id, call_id) = approval_id.split_once(':')?;
    let hex = run_id.len() == 32 && run_id.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !call_id.is_empty()).then_some((run_id, call_id))
}

/// The run and the call an approval id names: a run's 128 random bits
/// and the call's id — or, for a conversation kept on the server, the
/// chat's id (`chat`; its run is the chat's session) and the call's.
pub(super) fn split_approval_id<'a>(
    approval_id: &'a str,
    chat: Option<&str>,
) -> Option<(&'a str, &'a str)> {
    match chat {
        None => parse_approval_id(approval_id),
        Some(chat) => {
            let call_id = approval_id.strip_prefix(chat)?.strip_prefix(':')?;
            (!call_id.is_empty()).then(|| (&approval_id[..chat.len()], call_id))
        }
    }
}
