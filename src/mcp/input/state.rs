//! `InputState`: the call's side of its [`ClientInput`], shared with the
//! server that drives the call — how the call reaches its client
//! (`Backend`), the requests waiting for the next round, the answers that
//! came before the tool asked.
//!
//! [`ClientInput`]: crate::mcp::ClientInput

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::Waker;

use rmcp::model::{ClientCapabilities, InputRequest, InputRequests};
use rmcp::task_manager::TaskContext;
use rmcp::{Peer, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;

use super::kind::Kind;

/// How a call reaches its client.
pub(in crate::mcp) enum Backend {
    /// Requests on the session (revisions up to 2025-11-25).
    Peer(Peer<RoleServer>),
    /// Input-required results and retries (2026-07-28).
    Rounds,
    /// The MCP task the call runs as.
    Task(TaskContext),
}

/// One request waiting for the next round's answers.
pub(super) struct Pending {
    pub(super) kind: Kind,
    pub(super) request: InputRequest,
    pub(super) reply: oneshot::Sender<Value>,
}

/// The call's side of its [`ClientInput`](crate::mcp::ClientInput), shared with the server that
/// drives the call.
pub(in crate::mcp) struct InputState {
    pub(super) inner: Mutex<Inner>,
    /// Requests on the session the client has not answered yet.
    pub(super) asking: std::sync::atomic::AtomicUsize,
    /// The 2025-11-25 task the call runs as: its requests on the session
    /// say so in their `_meta`.
    related_task: std::sync::OnceLock<serde_json::Value>,
}

/// Counts a request on the session while it waits for its answer.
pub(super) struct Asking<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Asking<'a> {
    pub(super) fn start(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Asking(count)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(super) struct Inner {
    pub(super) backend: Backend,
    /// What the client declared, when known.
    pub(super) capabilities: Option<ClientCapabilities>,
    pub(super) next_key: u64,
    /// Requests for the next round, by key.
    pub(super) pending: BTreeMap<String, Pending>,
    /// Whether `pending` holds a request the client has not seen yet.
    pub(super) unsent: bool,
    /// The driver, woken when a request is added.
    pub(super) waker: Option<Waker>,
    /// The capability the tool asked for and the client lacks.
    pub(super) missing: Option<Kind>,
    /// Answers the client sent before the tool asked (a call's first
    /// request may carry them), by key; taken by the request they answer.
    pub(super) early: BTreeMap<String, Value>,
}

/// At most this many answers are kept for requests not asked yet.
const MAX_EARLY_ANSWERS: usize = 64;

impl InputState {
    pub(in crate::mcp) fn new(
        backend: Backend,
        capabilities: Option<ClientCapabilities>,
    ) -> Arc<Self> {
        Arc::new(InputState {
            inner: Mutex::new(Inner {
                backend,
                capabilities,
                next_key: 0,
                pending: BTreeMap::new(),
                unsent: false,
                waker: None,
                missing: None,
                early: BTreeMap::new(),
            }),
            asking: Default::default(),
            related_task: std::sync::OnceLock::new(),
        })
    }

    /// Ties the call's requests on the session to its 2025-11-25 task.
    pub(in crate::mcp) fn set_related_task(&self, task_id: &str) {
        let _ = self
            .related_task
            .set(serde_json::json!({ "taskId": task_id }));
    }

    /// `meta` with the call's task in it, if it runs as a 2025-11-25 task.
    pub(super) fn tie(&self, meta: &mut Option<rmcp::model::RequestMetaObject>) {
        if let Some(task) = self.related_task.get() {
            meta.get_or_insert_default()
                .insert(crate::mcp::RELATED_TASK_META.into(), task.clone());
        }
    }

    /// Whether the tool waits for the client's answer to a request on the
    /// session (a task of 2025-11-25 then shows `input_required`).
    pub(in crate::mcp) fn waits_for_client(&self) -> bool {
        self.asking.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// From now on, requests go to `backend` (a call that becomes a task).
    pub(in crate::mcp) fn set_backend(&self, backend: Backend) {
        self.lock().backend = backend;
    }

    /// Registers the driver's waker; whether a request the client has not
    /// seen yet is waiting.
    pub(in crate::mcp) fn poll_unsent(&self, waker: &Waker) -> bool {
        let mut inner = self.lock();
        match &inner.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => inner.waker = Some(waker.clone()),
        }
        inner.unsent
    }

    /// The requests waiting for answers, marked as sent.
    pub(in crate::mcp) fn take_requests(&self) -> InputRequests {
        let mut inner = self.lock();
        inner.unsent = false;
        // A request whose tool gave up waiting (its future was dropped)
        // needs no answer.
        inner.pending.retain(|_, p| !p.reply.is_closed());
        inner
            .pending
            .iter()
            .map(|(key, p)| (key.clone(), p.request.clone()))
            .collect()
    }

    /// Delivers the answers of a retried call (or of a call's first
    /// request); an answer of the wrong shape is ignored, and its request
    /// stays pending, to be asked again. An answer for a key nobody waits
    /// on yet is kept (at most 64) for the request that asks under it.
    pub(in crate::mcp) fn answer(&self, responses: BTreeMap<String, Value>) {
        let mut inner = self.lock();
        for (key, value) in responses {
            let Some(pending) = inner.pending.get(&key) else {
                if inner.early.len() < MAX_EARLY_ANSWERS || inner.early.contains_key(&key) {
                    inner.early.insert(key, value);
                }
                continue;
            };
            if !pending.kind.accepts(&value) {
                tracing::debug!(key, "an input response of the wrong shape; asking again");
                continue;
            }
            if let Some(pending) = inner.pending.remove(&key) {
                let _ = pending.reply.send(value);
            }
        }
        // What is still pending goes out again in the next result.
        inner.unsent = !inner.pending.is_empty();
    }

    /// The capability the call lacked, if the tool asked for one the
    /// client did not declare.
    pub(in crate::mcp) fn missing_capability(&self) -> Option<ClientCapabilities> {
        self.lock().missing.map(Kind::capability)
    }
}
