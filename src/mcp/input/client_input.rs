//! [`ClientInput`]: the tool's side of a request for input — what it asks
//! (a form, a yes or no, a completion, the roots), and how it waits for
//! the answer, whichever mechanism the call's revision has.

use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, InputRequest,
    ListRootsRequest, ListRootsResult,
};
use rmcp::task_manager::{TaskContext, TaskExit};
use rmcp::{Peer, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::oneshot;

use super::kind::Kind;
use super::state::{Asking, Backend, InputState, Pending};
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

impl InputState {
    pub(in crate::mcp) fn handle(self: &Arc<Self>) -> ClientInput {
        ClientInput {
            state: self.clone(),
            key: None,
        }
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
