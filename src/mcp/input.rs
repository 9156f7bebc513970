//! [`ClientInput`]: a tool asks the MCP client for input mid-call
//! (elicitation, sampling, roots), over whichever mechanism the call's
//! protocol revision has.
//!
//! * Up to 2025-11-25 the server sends the client a request on the
//!   session (`elicitation/create`, …) and the tool awaits its answer.
//! * From 2026-07-28 a server may not send requests: the call answers with
//!   an *input-required* result listing what it needs, the client retries
//!   the call with the answers, and the server resumes the same tool
//!   stream (kept, waiting, under an unguessable `requestState`).
//! * Inside an MCP task the request goes to the task
//!   (`input_required` in `tasks/get`, answered with `tasks/update`).
//!
//! The tool's code is the same in all three: it awaits
//! [`ClientInput::elicit`] (or [`confirm`](ClientInput::confirm),
//! [`create_message`](ClientInput::create_message),
//! [`list_roots`](ClientInput::list_roots)).
#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::task::Waker;

use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
    InputRequests, ListRootsRequest, ListRootsResult,
};
use rmcp::task_manager::{TaskContext, TaskExit};
use rmcp::{Peer, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::{ErrorKind, ToolError};

/// Asks the MCP client that called the tool for input: the user
/// (elicitation), the client's model (sampling), or its roots.
///
/// The server puts one in the extensions of every call it makes; a tool
/// reads it from its [`ToolContext`](crate::ToolContext):
///
/// ```
/// use toolstack::mcp::ClientInput;
/// use toolstack::{tool, ErrorKind, ToolContext, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Delete { path: String }
///
/// let delete = tool::from_fn_with_context("delete", |args: Delete, ctx: ToolContext| async move {
///     let input = ctx.extensions().get::<ClientInput>()
///         .ok_or_else(|| ToolError::failed("this tool asks the user and needs an MCP client"))?;
///     if !input.confirm(format!("Delete {}?", args.path)).await? {
///         return Err(ToolError::new(ErrorKind::Denied, "the user said no"));
///     }
///     Ok::<_, ToolError>(format!("deleted {}", args.path))
/// });
/// # let _ = delete;
/// ```
///
/// The mechanism follows the call's protocol revision; the tool does not
/// choose it:
///
/// * up to 2025-11-25, a request on the session (`elicitation/create`, …)
///   that the tool awaits;
/// * on 2026-07-28, an *input-required* result listing what the call
///   needs: the client retries the call with the answers and the server
///   resumes the same tool stream, kept waiting under an unguessable
///   `requestState` (requests made together go in one round);
/// * inside an MCP task, the task's `input_required` status, answered
///   with `tasks/update`.
///
/// A client that did not
/// declare the capability a request needs gets none: the method returns
/// an [`Unavailable`](ErrorKind::Unavailable) error, and a call that ends
/// with that error is answered with the protocol's *missing required
/// client capability* error (`-32021`), which names the capability.
#[derive(Clone)]
pub struct ClientInput {
    state: Arc<InputState>,
    key: Option<String>,
}

/// What kind of input a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Elicitation,
    Sampling,
    Roots,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Elicitation => "elicitation",
            Kind::Sampling => "sampling",
            Kind::Roots => "roots",
        }
    }

    fn declared_by(self, caps: &ClientCapabilities) -> bool {
        match self {
            Kind::Elicitation => caps.elicitation.is_some(),
            Kind::Sampling => caps.sampling.is_some(),
            Kind::Roots => caps.roots.is_some(),
        }
    }

    /// The capability, as the `-32021` error's `requiredCapabilities`.
    fn capability(self) -> ClientCapabilities {
        let mut caps = ClientCapabilities::default();
        match self {
            Kind::Elicitation => caps.elicitation = Some(Default::default()),
            Kind::Sampling => caps.sampling = Some(Default::default()),
            Kind::Roots => caps.roots = Some(Default::default()),
        }
        caps
    }

    /// Whether `value` is a well-formed answer to a request of this kind.
    fn accepts(self, value: &Value) -> bool {
        match self {
            Kind::Elicitation => ElicitResult::deserialize_from(value),
            Kind::Sampling => CreateMessageResult::deserialize_from(value),
            Kind::Roots => ListRootsResult::deserialize_from(value),
        }
    }
}

trait DeserializeFrom {
    fn deserialize_from(value: &Value) -> bool;
}

impl<T: DeserializeOwned> DeserializeFrom for T {
    fn deserialize_from(value: &Value) -> bool {
        T::deserialize(value).is_ok()
    }
}

/// How a call reaches its client.
pub(super) enum Backend {
    /// Requests on the session (revisions up to 2025-11-25).
    Peer(Peer<RoleServer>),
    /// Input-required results and retries (2026-07-28).
    Rounds,
    /// The MCP task the call runs as.
    Task(TaskContext),
}

/// One request waiting for the next round's answers.
pub(super) struct Pending {
    kind: Kind,
    request: InputRequest,
    reply: oneshot::Sender<Value>,
}

/// The call's side of its [`ClientInput`], shared with the server that
/// drives the call.
pub(super) struct InputState {
    inner: Mutex<Inner>,
    /// Requests on the session the client has not answered yet.
    asking: std::sync::atomic::AtomicUsize,
    /// The 2025-11-25 task the call runs as: its requests on the session
    /// say so in their `_meta`.
    related_task: std::sync::OnceLock<serde_json::Value>,
}

/// Counts a request on the session while it waits for its answer.
struct Asking<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Asking<'a> {
    fn start(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Asking(count)
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

struct Inner {
    backend: Backend,
    /// What the client declared, when known.
    capabilities: Option<ClientCapabilities>,
    next_key: u64,
    /// Requests for the next round, by key.
    pending: BTreeMap<String, Pending>,
    /// Whether `pending` holds a request the client has not seen yet.
    unsent: bool,
    /// The driver, woken when a request is added.
    waker: Option<Waker>,
    /// The capability the tool asked for and the client lacks.
    missing: Option<Kind>,
    /// Answers the client sent before the tool asked (a call's first
    /// request may carry them), by key; taken by the request they answer.
    early: BTreeMap<String, Value>,
}

/// At most this many answers are kept for requests not asked yet.
const MAX_EARLY_ANSWERS: usize = 64;

impl InputState {
    pub(super) fn new(backend: Backend, capabilities: Option<ClientCapabilities>) -> Arc<Self> {
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
    pub(super) fn set_related_task(&self, task_id: &str) {
        let _ = self
            .related_task
            .set(serde_json::json!({ "taskId": task_id }));
    }

    /// `meta` with the call's task in it, if it runs as a 2025-11-25 task.
    fn tie(&self, meta: &mut Option<rmcp::model::RequestMetaObject>) {
        if let Some(task) = self.related_task.get() {
            meta.get_or_insert_default()
                .insert(crate::mcp::RELATED_TASK_META.into(), task.clone());
        }
    }

    /// Whether the tool waits for the client's answer to a request on the
    /// session (a task of 2025-11-25 then shows `input_required`).
    pub(super) fn waits_for_client(&self) -> bool {
        self.asking.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn handle(self: &Arc<Self>) -> ClientInput {
        ClientInput {
            state: self.clone(),
            key: None,
        }
    }

    /// From now on, requests go to `backend` (a call that becomes a task).
    pub(super) fn set_backend(&self, backend: Backend) {
        self.lock().backend = backend;
    }

    /// Registers the driver's waker; whether a request the client has not
    /// seen yet is waiting.
    pub(super) fn poll_unsent(&self, waker: &Waker) -> bool {
        let mut inner = self.lock();
        match &inner.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => inner.waker = Some(waker.clone()),
        }
        inner.unsent
    }

    /// The requests waiting for answers, marked as sent.
    pub(super) fn take_requests(&self) -> InputRequests {
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
    pub(super) fn answer(&self, responses: BTreeMap<String, Value>) {
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
    pub(super) fn missing_capability(&self) -> Option<ClientCapabilities> {
        self.lock().missing.map(Kind::capability)
    }
}

impl ClientInput {
    /// The same input, whose requests carry `key` as their key in an
    /// input-required result or a task's `inputRequests` (by default the
    /// server numbers them: `elicitation-0`, `sampling-1`, …). A key names
    /// one request in a call: asking twice under one key is an error.
    ///
    /// ```
    /// # async fn run(input: toolstack::mcp::ClientInput) -> Result<(), toolstack::ToolError> {
    /// let ok = input.with_key("confirm").confirm("Drop the table?").await?;
    /// # let _ = ok; Ok(()) }
    /// ```
    pub fn with_key(&self, key: impl Into<String>) -> ClientInput {
        ClientInput {
            state: self.state.clone(),
            key: Some(key.into()),
        }
    }

    /// What the client declared (`sampling`, `elicitation`, `roots`, …),
    /// when the server knows it.
    pub fn capabilities(&self) -> Option<ClientCapabilities> {
        self.state.lock().capabilities.clone()
    }

    fn supports(&self, kind: Kind) -> bool {
        self.state
            .lock()
            .capabilities
            .as_ref()
            .is_none_or(|caps| kind.declared_by(caps))
    }

    /// Whether the client can ask its user (elicitation).
    pub fn supports_elicitation(&self) -> bool {
        self.supports(Kind::Elicitation)
    }

    /// Whether the client can run its model (sampling).
    pub fn supports_sampling(&self) -> bool {
        self.supports(Kind::Sampling)
    }

    /// Whether the client can list its roots.
    pub fn supports_roots(&self) -> bool {
        self.supports(Kind::Roots)
    }

    /// Asks the client's user to fill in a form (or visit a URL):
    /// `elicitation/create`. The answer says whether the user accepted,
    /// declined or cancelled, and carries the form's content.
    pub async fn elicit(&self, params: ElicitRequestParams) -> Result<ElicitResult, ToolError> {
        let peer = match self.begin(Kind::Elicitation)? {
            Some(peer) => peer,
            None => {
                let request = InputRequest::Elicitation(ElicitRequest::new(params));
                return self.ask(Kind::Elicitation, request).await;
            }
        };
        let mut params = params;
        match &mut params {
            ElicitRequestParams::FormElicitationParams { meta, .. }
            | ElicitRequestParams::UrlElicitationParams { meta, .. } => self.state.tie(meta),
            _ => {}
        }
        let _asking = Asking::start(&self.state.asking);
        peer.create_elicitation(params)
            .await
            .map_err(|e| client_failed(Kind::Elicitation, e))
    }

    /// Asks the user a yes/no question: a form with one boolean field,
    /// `confirm`. `true` only when the user accepted and ticked it.
    pub async fn confirm(&self, message: impl Into<String>) -> Result<bool, ToolError> {
        let params = serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": message.into(),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "confirm": { "type": "boolean", "title": "Confirm", "default": false }
                },
                "required": ["confirm"]
            }
        }))
        .map_err(|e| ToolError::failed(format!("could not build the confirmation form: {e}")))?;
        let answer = self.elicit(params).await?;
        Ok(answer.action == ElicitationAction::Accept
            && answer
                .content
                .as_ref()
                .and_then(|c| c.get("confirm"))
                .and_then(Value::as_bool)
                .unwrap_or(false))
    }

    /// Asks the client's model for a completion: `sampling/createMessage`.
    pub async fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, ToolError> {
        let peer = match self.begin(Kind::Sampling)? {
            Some(peer) => peer,
            None => {
                let request = InputRequest::CreateMessage(CreateMessageRequest::new(params));
                return self.ask(Kind::Sampling, request).await;
            }
        };
        let mut params = params;
        self.state.tie(&mut params.meta);
        let _asking = Asking::start(&self.state.asking);
        peer.create_message(params)
            .await
            .map_err(|e| client_failed(Kind::Sampling, e))
    }

    /// Asks the client for its roots (the folders or files it works in):
    /// `roots/list`.
    pub async fn list_roots(&self) -> Result<ListRootsResult, ToolError> {
        let peer = match self.begin(Kind::Roots)? {
            Some(peer) => peer,
            None => {
                let request = InputRequest::ListRoots(ListRootsRequest::default());
                return self.ask(Kind::Roots, request).await;
            }
        };
        let _asking = Asking::start(&self.state.asking);
        peer.list_roots()
            .await
            .map_err(|e| client_failed(Kind::Roots, e))
    }

    /// Checks the capability; the session's peer when requests go there.
    fn begin(&self, kind: Kind) -> Result<Option<Peer<RoleServer>>, ToolError> {
        let mut inner = self.state.lock();
        if let Some(caps) = &inner.capabilities {
            if !kind.declared_by(caps) {
                inner.missing = Some(kind);
                return Err(ToolError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the MCP client did not declare the `{}` capability, which this tool needs",
                        kind.name()
                    ),
                ));
            }
        }
        Ok(match &inner.backend {
            Backend::Peer(peer) => Some(peer.clone()),
            Backend::Rounds | Backend::Task(_) => None,
        })
    }

    /// Asks through an input-required result or the call's task.
    async fn ask<R: DeserializeOwned>(
        &self,
        kind: Kind,
        request: InputRequest,
    ) -> Result<R, ToolError> {
        let (key, waiting) = {
            let mut inner = self.state.lock();
            let key = match &self.key {
                Some(key) => key.clone(),
                None => {
                    inner.next_key += 1;
                    format!("{}-{}", kind.name(), inner.next_key - 1)
                }
            };
            if inner.pending.contains_key(&key) {
                return Err(ToolError::failed(format!(
                    "the tool asked the client twice under one key, `{key}`"
                )));
            }
            // Answered already, in the request that opened the call.
            if let Some(value) = inner.early.remove(&key) {
                if kind.accepts(&value) {
                    drop(inner);
                    return decode(kind, value);
                }
            }
            match &inner.backend {
                Backend::Task(task) => (key, Waiting::Task(task.clone(), Box::new(request))),
                // `begin` answered for the peer.
                Backend::Peer(_) | Backend::Rounds => {
                    let (reply, answer) = oneshot::channel();
                    inner.pending.insert(
                        key.clone(),
                        Pending {
                            kind,
                            request,
                            reply,
                        },
                    );
                    inner.unsent = true;
                    if let Some(waker) = inner.waker.take() {
                        waker.wake();
                    }
                    (key, Waiting::Round(answer))
                }
            }
        };
        let value = match waiting {
            Waiting::Round(answer) => answer.await.map_err(|_| {
                ToolError::cancelled(format!(
                    "the call ended before the client answered its {} request",
                    kind.name()
                ))
            })?,
            Waiting::Task(task, request) => {
                task.request_input(key, *request)
                    .await
                    .map_err(|exit| match exit {
                        TaskExit::Cancelled => {
                            ToolError::cancelled("the task was cancelled while it waited for input")
                        }
                        TaskExit::Error(e) => ToolError::failed(format!(
                            "the task could not ask for {}: {}",
                            kind.name(),
                            e.message
                        )),
                    })?
            }
        };
        decode(kind, value)
    }
}

fn decode<R: DeserializeOwned>(kind: Kind, value: Value) -> Result<R, ToolError> {
    serde_json::from_value(value).map_err(|e| {
        ToolError::new(
            ErrorKind::Failed,
            format!("the client's {} answer is malformed: {e}", kind.name()),
        )
    })
}

enum Waiting {
    Round(oneshot::Receiver<Value>),
    Task(TaskContext, Box<InputRequest>),
}

fn client_failed(kind: Kind, err: rmcp::ServiceError) -> ToolError {
    ToolError::new(
        ErrorKind::Unavailable,
        format!(
            "the MCP client did not answer the {} request: {err}",
            kind.name()
        ),
    )
    .with_source(err)
}

impl std::fmt::Debug for ClientInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.state.lock();
        let backend = match inner.backend {
            Backend::Peer(_) => "session requests",
            Backend::Rounds => "input-required results",
            Backend::Task(_) => "task",
        };
        f.debug_struct("ClientInput")
            .field("backend", &backend)
            .field("pending", &inner.pending.len())
            .finish()
    }
}
