//! Progress routing: `notifications/progress` to the call that owns the
//! token, each call's reports in a bounded queue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::sync::Notify;

/// Tokens whose progress arrived before their call subscribed, kept until
/// it does (a fast server can report progress before the request's send
/// has returned here).
pub(super) const EARLY_TOKENS: usize = 64;

/// Routes `notifications/progress` to the call that owns the token.
///
/// Each call's progress waits in a queue of at most
/// [`PROGRESS_BACKLOG`](crate::tool::PROGRESS_BACKLOG) reports, as a local
/// tool's does: a server that reports faster than the caller reads loses
/// its oldest reports (a newer one supersedes them), never grows the
/// client's memory.
#[derive(Clone, Default)]
pub(super) struct ProgressRouter {
    pub(super) inner: Arc<Mutex<Routes>>,
}

#[derive(Default)]
pub(super) struct Routes {
    pub(super) calls: HashMap<ProgressToken, Arc<ProgressQueue>>,
    pub(super) early: HashMap<ProgressToken, VecDeque<ProgressNotificationParam>>,
    pub(super) early_order: VecDeque<ProgressToken>,
}

/// One call's progress reports, oldest first, at most
/// [`PROGRESS_BACKLOG`](crate::tool::PROGRESS_BACKLOG).
#[derive(Default)]
pub(super) struct ProgressQueue {
    pub(super) reports: Mutex<VecDeque<ProgressNotificationParam>>,
    pub(super) arrived: Notify,
}

/// Adds `param`, dropping the oldest report when `queue` is full.
pub(super) fn push_bounded(
    queue: &mut VecDeque<ProgressNotificationParam>,
    param: ProgressNotificationParam,
) {
    if queue.len() >= crate::tool::PROGRESS_BACKLOG {
        queue.pop_front();
    }
    queue.push_back(param);
}

impl ProgressQueue {
    pub(super) fn push(&self, param: ProgressNotificationParam) {
        push_bounded(
            &mut self.reports.lock().unwrap_or_else(|e| e.into_inner()),
            param,
        );
        // Stores a permit when nobody waits: a report pushed between a
        // reader's empty `pop` and its `notified().await` still wakes it.
        self.arrived.notify_one();
    }

    pub(super) fn pop(&self) -> Option<ProgressNotificationParam> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    pub(super) async fn next(&self) -> ProgressNotificationParam {
        loop {
            if let Some(param) = self.pop() {
                return param;
            }
            self.arrived.notified().await;
        }
    }
}

impl ProgressRouter {
    pub(super) fn deliver(&self, param: ProgressNotificationParam) {
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = routes.calls.get(&param.progress_token) {
            queue.push(param);
            return;
        }
        let token = param.progress_token.clone();
        if !routes.early.contains_key(&token) {
            if routes.early_order.len() == EARLY_TOKENS {
                if let Some(oldest) = routes.early_order.pop_front() {
                    routes.early.remove(&oldest);
                }
            }
            routes.early_order.push_back(token.clone());
        }
        push_bounded(routes.early.entry(token).or_default(), param);
    }

    pub(super) fn subscribe(&self, token: ProgressToken) -> Arc<ProgressQueue> {
        let queue = Arc::new(ProgressQueue::default());
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(early) = routes.early.remove(&token) {
            routes.early_order.retain(|t| t != &token);
            for param in early {
                queue.push(param);
            }
        }
        routes.calls.insert(token, queue.clone());
        queue
    }

    pub(super) fn unsubscribe(&self, token: &ProgressToken) {
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        routes.calls.remove(token);
    }
}
