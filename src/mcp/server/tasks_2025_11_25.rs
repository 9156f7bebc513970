//! The task scheme of MCP 2025-11-25, served next to the tasks extension
//! of 2026-07-28 (which rmcp implements).
//!
//! A 2025-11-25 client (the TypeScript SDK 1.x, ext-tasks' v1 protocol)
//! reads the server's `capabilities.tasks` and each tool's
//! `execution.taskSupport`, asks for a task with a `task` member in the
//! `tools/call` params, and gets `{"task": {...}}` back; then `tasks/get`
//! answers the task's fields flat (`ttl`, `pollInterval`), `tasks/result`
//! waits for the end and answers the call's own result, and `tasks/cancel`
//! answers the cancelled task. rmcp's types have none of these shapes, so
//! they are made here, at the edges:
//!
//! * [`lift`] renames, in the raw text of a message, a `tools/call` that
//!   asks for a task to [`TASK_CALL`], so that rmcp hands it, `task` and
//!   all, to `on_custom_request` (the member is dropped by rmcp's
//!   `CallToolRequestParams`). The HTTP service and `serve_io` run it on
//!   every message they read.
//! * [`Tap`], on the session's transport, adds `capabilities.tasks` to the
//!   `initialize` answer of a 2025-11-25 session and `execution` to its
//!   tools, turns its `tasks/get` and `tasks/cancel` into custom requests,
//!   and marks every request with the session it came on ([`Session`]),
//!   so that a task is seen only by the session that made it.
//!
//! The tasks themselves run in the same [`Tasks`](crate::mcp::call) as the
//! extension's, under the same bounds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientRequest, CustomRequest, CustomResult, DetailedTask, ErrorCode,
    GetExtensions, JsonRpcMessage, JsonRpcRequest, JsonRpcResponse, ServerResult, TaskPayload,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::handler::error_outcome;
use super::revision;
use super::McpServer;
use crate::mcp::call::{LegacyTask, TaskEnd, TaskSupport, Tasks, Watcher};
use crate::mcp::input::{Backend, InputState};
use crate::mcp::telemetry::{Operation, OperationEnd, Target};
use tracing::Instrument as _;

/// The method a `tools/call` that asks for a 2025-11-25 task is renamed to
/// before rmcp reads it.
pub(super) const TASK_CALL: &str = "toolstack/tools/call-as-task";

/// The session a request came on: a random name per session, put in the
/// request's extensions by the [`Tap`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Session(pub(super) Arc<str>);

/// How much longer [`lift`] makes a message: the method's new name.
pub(super) const LIFT_GROWTH: usize = TASK_CALL.len() - "tools/call".len();

/// The raw text of a message, changed when it is a `tools/call` that asks
/// for a task (a `task` object in its params) and is not a 2026-07-28
/// request (whose `task` member is ignored, as the tasks extension says):
/// its method renamed to [`TASK_CALL`], every other member kept as it was
/// written, so it grows by at most [`LIFT_GROWTH`] bytes. Any other
/// message, or text that is not JSON, is left as it is (`None`), for rmcp
/// to read or refuse.
pub(super) fn lift(text: &[u8]) -> Option<Vec<u8>> {
    // Most messages never mention a task: no parse for them.
    memchr::memmem::find(text, b"\"task\"")?;
    let message: HashMap<&str, &RawValue> = serde_json::from_slice(text).ok()?;
    if message.get("method")?.get() != "\"tools/call\"" {
        return None;
    }
    let params: HashMap<&str, &RawValue> =
        serde_json::from_str(message.get("params")?.get()).ok()?;
    if !params.get("task")?.get().starts_with('{') {
        return None;
    }
    let asked = params
        .get("_meta")
        .and_then(|meta| serde_json::from_str::<HashMap<&str, &RawValue>>(meta.get()).ok())
        .and_then(|meta| {
            meta.get("io.modelcontextprotocol/protocolVersion")
                .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        });
    if asked.is_some_and(|v| revision::is_stateless(&v)) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + LIFT_GROWTH);
    out.push(b'{');
    for (i, (key, value)) in message.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A key borrowed from the text has no escapes: written back as is.
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        if *key == "method" {
            out.push(b'"');
            out.extend_from_slice(TASK_CALL.as_bytes());
            out.push(b'"');
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    out.push(b'}');
    Some(out)
}

/// A session's transport, with the 2025-11-25 task scheme's shapes made at
/// its edge (see the [module docs](self)).
pub(super) struct Tap<T> {
    inner: T,
    support: Arc<HashMap<String, TaskSupport>>,
    /// The server's tasks: a session's are cancelled when it closes.
    tasks: Arc<Tasks>,
    session: Session,
    /// Set once the session has negotiated 2025-11-25, when a tool runs as
    /// a task.
    legacy: bool,
}

impl<T> Tap<T> {
    pub(super) fn new(
        inner: T,
        support: Arc<HashMap<String, TaskSupport>>,
        tasks: Arc<Tasks>,
    ) -> Self {
        Tap {
            inner,
            support,
            tasks,
            session: Session(uuid::Uuid::new_v4().simple().to_string().into()),
            legacy: false,
        }
    }

    fn outgoing(&mut self, message: TxJsonRpcMessage<RoleServer>) -> TxJsonRpcMessage<RoleServer> {
        let JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc,
            id,
            result,
        }) = message
        else {
            return message;
        };
        let result = match result {
            ServerResult::InitializeResult(init)
                if revision::speaks_legacy_tasks(init.protocol_version.as_str())
                    && self.support.values().any(|s| *s != TaskSupport::Forbidden) =>
            {
                self.legacy = true;
                with_capability(serde_json::to_value(&init))
                    .map(|v| ServerResult::CustomResult(CustomResult(v)))
                    .unwrap_or(ServerResult::InitializeResult(init))
            }
            ServerResult::ListToolsResult(list) if self.legacy => {
                with_execution(serde_json::to_value(&list), &self.support)
                    .map(|v| ServerResult::CustomResult(CustomResult(v)))
                    .unwrap_or(ServerResult::ListToolsResult(list))
            }
            result => result,
        };
        JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc,
            id,
            result,
        })
    }

    fn incoming(&self, message: &mut RxJsonRpcMessage<RoleServer>) {
        let JsonRpcMessage::Request(JsonRpcRequest { request, .. }) = message else {
            return;
        };
        if self.legacy {
            // rmcp would answer these in the extension's shapes, and only
            // to a client that declared it.
            let custom = match request {
                ClientRequest::GetTaskRequest(get) => {
                    Some(("tasks/get", serde_json::to_value(&get.params)))
                }
                ClientRequest::CancelTaskRequest(cancel) => {
                    Some(("tasks/cancel", serde_json::to_value(&cancel.params)))
                }
                _ => None,
            };
            if let Some((method, Ok(params))) = custom {
                let mut custom = CustomRequest::new(method, Some(params));
                custom.extensions = std::mem::take(request.extensions_mut());
                *request = ClientRequest::CustomRequest(custom);
            }
        }
        request.extensions_mut().insert(self.session.clone());
    }
}

impl<T> Drop for Tap<T> {
    fn drop(&mut self) {
        if self.legacy {
            self.tasks.end_session(&self.session.0);
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let item = self.outgoing(item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut message = self.inner.receive().await?;
        self.incoming(&mut message);
        Some(message)
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// An `initialize` result with `capabilities.tasks`: tool calls as tasks,
/// and their cancellation (no `tasks/list`).
fn with_capability(init: serde_json::Result<Value>) -> Option<Value> {
    let mut init = init.ok()?;
    let caps = init.get_mut("capabilities")?.as_object_mut()?;
    caps.insert(
        "tasks".into(),
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
    );
    Some(init)
}

/// A `tools/list` result with each task tool's `execution.taskSupport`.
fn with_execution(
    list: serde_json::Result<Value>,
    support: &HashMap<String, TaskSupport>,
) -> Option<Value> {
    let mut list = list.ok()?;
    for tool in list.get_mut("tools")?.as_array_mut()? {
        let Some(tool) = tool.as_object_mut() else {
            continue;
        };
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        let word = match support.get(name) {
            Some(TaskSupport::Optional) => "optional",
            Some(TaskSupport::Required) => "required",
            _ => continue,
        };
        tool.insert("execution".into(), json!({"taskSupport": word}));
    }
    Some(list)
}

/// A task as 2025-11-25 shows it: its fields flat, `ttl` and
/// `pollInterval` in milliseconds.
pub(super) fn task_json(task: &rmcp::model::Task, status: &str) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("taskId".into(), Value::from(task.task_id.clone()));
    out.insert("status".into(), Value::from(status));
    if let Some(message) = &task.status_message {
        out.insert("statusMessage".into(), Value::from(message.clone()));
    }
    out.insert("createdAt".into(), Value::from(task.created_at.clone()));
    out.insert(
        "lastUpdatedAt".into(),
        Value::from(task.last_updated_at.clone()),
    );
    out.insert("ttl".into(), task.ttl_ms.map_or(Value::Null, Value::from));
    if let Some(interval) = task.poll_interval_ms {
        out.insert("pollInterval".into(), Value::from(interval));
    }
    out
}

/// The status word of a task: an input the tool waits for on the session
/// (an elicitation, not the extension's `tasks/update`) shows as
/// `input_required`.
pub(super) fn status_of(task: &DetailedTask, waits_for_input: bool) -> &'static str {
    match task.payload {
        TaskPayload::Completed { .. } => "completed",
        TaskPayload::Failed { .. } => "failed",
        TaskPayload::Cancelled => "cancelled",
        TaskPayload::InputRequired { .. } => "input_required",
        _ if waits_for_input => "input_required",
        _ => "working",
    }
}

/// How long `tasks/cancel` waits for the task to end before it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

impl<H: ServerHandler + Clone> McpServer<H> {
    /// The session of `context` when it speaks the 2025-11-25 task scheme.
    pub(super) fn legacy_session(context: &RequestContext<RoleServer>) -> Option<Arc<str>> {
        let version = context.protocol_version()?;
        if !revision::speaks_legacy_tasks(version.as_str()) {
            return None;
        }
        context.extensions.get::<Session>().map(|s| s.0.clone())
    }

    /// A request of the 2025-11-25 task scheme, answered; `Err` gives back
    /// a request that is none (for the inner handler).
    pub(super) async fn serve_legacy(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<Result<CustomResult, ErrorData>, (CustomRequest, RequestContext<RoleServer>)> {
        let session = Self::legacy_session(&context);
        let method = request.method.as_str();
        let params = request.params.clone().unwrap_or(Value::Null);
        Ok(match (method, session) {
            (TASK_CALL, session) => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                let mut operation = self.operation("tools/call", Target::tool(name), &context);
                let answer = self
                    .task_call(params.clone(), &context, session, &operation)
                    .instrument(operation.span())
                    .await;
                operation.end(match &answer {
                    Ok(_) => OperationEnd::Ok,
                    Err(err) => error_outcome(err, context.ct.is_cancelled()),
                });
                answer
            }
            ("tasks/get", Some(session)) => {
                self.serve("tasks/get", Target::None, context, |_| async move {
                    let (id, task) = self.find_legacy(&params, &session)?;
                    let detailed = self.tasks.manager.get_task(&id)?;
                    let status = match &*task.end.borrow() {
                        Some(end) => end_status(end),
                        None => status_of(&detailed, task.input.waits_for_client()),
                    };
                    Ok(CustomResult(Value::Object(task_json(&detailed.task, status))))
                })
                .await
            }
            ("tasks/result", Some(session)) => {
                self.serve("tasks/result", Target::None, context, |context| async move {
                    let (id, task) = self.find_legacy(&params, &session)?;
                    let mut end = task.end.clone();
                    let ended = tokio::select! {
                        ended = end.wait_for(Option::is_some) => ended.ok().and_then(|e| e.clone()),
                        () = context.ct.cancelled() => None,
                        () = tokio::time::sleep(self.tasks.ttl) => None,
                    };
                    match ended {
                        Some(TaskEnd::Result(result)) => Ok(CustomResult(result_json(result, &id))),
                        Some(TaskEnd::Failed(error)) => Err(error),
                        Some(TaskEnd::Cancelled) => Err(ErrorData::invalid_request(
                            format!("task {id} was cancelled; it has no result"),
                            None,
                        )),
                        None => Err(ErrorData::internal_error(
                            format!("task {id} did not end within its time to live"),
                            None,
                        )),
                    }
                })
                .await
            }
            ("tasks/cancel", Some(session)) => {
                self.serve("tasks/cancel", Target::None, context, |_| async move {
                    let (id, task) = self.find_legacy(&params, &session)?;
                    let ended = |task: &LegacyTask| -> Result<Option<&'static str>, ErrorData> {
                        if let Some(end) = &*task.end.borrow() {
                            return Ok(Some(end_status(end)));
                        }
                        // Ended at rmcp's hand (past its time to live).
                        let detailed = self.tasks.manager.get_task(&id)?;
                        Ok(detailed.task.status.is_terminal().then(|| status_of(&detailed, false)))
                    };
                    if let Some(status) = ended(&task)? {
                        return Err(ErrorData::invalid_params(
                            format!("cannot cancel task {id}: it is already {status}"),
                            None,
                        ));
                    }
                    self.tasks.manager.cancel_task(&id)?;
                    let mut end = task.end.clone();
                    let _ = tokio::time::timeout(CANCEL_WAIT, end.wait_for(Option::is_some)).await;
                    let status = ended(&task)?.unwrap_or("cancelled");
                    let detailed = self.tasks.manager.get_task(&id)?;
                    Ok(CustomResult(Value::Object(task_json(&detailed.task, status))))
                })
                .await
            }
            _ => return Err((request, context)),
        })
    }

    /// The task of `params.taskId`, when this session made it.
    fn find_legacy(
        &self,
        params: &Value,
        session: &str,
    ) -> Result<(String, LegacyTask), ErrorData> {
        let Some(id) = params.get("taskId").and_then(Value::as_str) else {
            return Err(ErrorData::invalid_params("`taskId` is missing", None));
        };
        match self.tasks.legacy(id, session) {
            Some(task) => Ok((id.to_owned(), task)),
            None => Err(ErrorData::invalid_params(
                format!("task {id} not found: unknown, expired, or another session's"),
                None,
            )),
        }
    }

    /// A `tools/call` that asks for a 2025-11-25 task: `{"task": {...}}`.
    /// A session of another revision has no such tasks: the `task` is
    /// ignored and the call served as any other.
    async fn task_call(
        &self,
        mut params: Value,
        context: &RequestContext<RoleServer>,
        session: Option<Arc<str>>,
        operation: &Operation,
    ) -> Result<CustomResult, ErrorData> {
        // The client's `ttl` is not taken: rmcp would end the tool at it.
        // The server keeps a task its own time to live, and says so.
        if let Some(params) = params.as_object_mut() {
            params.remove("task");
        }
        let params: CallToolRequestParams = serde_json::from_value(params)
            .map_err(|e| ErrorData::invalid_params(format!("tools/call: {e}"), None))?;
        let Some(session) = session else {
            let answer = self.serve_call(params, context, operation).await?;
            let mut answer = ServerResult::from(answer);
            if !context
                .protocol_version()
                .is_some_and(|v| revision::is_stateless(v.as_str()))
            {
                answer.strip_result_type_for_legacy_peer();
                answer.strip_non_object_output_for_legacy_peer();
            }
            let answer = serde_json::to_value(&answer)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            return Ok(CustomResult(answer));
        };
        let name = params.name.to_string();
        let call = match self.open_call(params, context, false, operation)? {
            Ok(call) => call,
            Err(result) => {
                // Refused before the tool ran (arguments too large): a task
                // that has ended with that error.
                let input = InputState::new(Backend::Rounds, None);
                let task = self
                    .tasks
                    .finished_legacy(input, result, session)
                    .ok_or_else(too_many)?;
                return Ok(created(&task, "failed"));
            }
        };
        if self.task_support_of(&name) == TaskSupport::Forbidden {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("tool `{name}` does not run as a task: call it without `task`"),
                None,
            ));
        }
        // A task from the start, even for a tool that would answer at
        // once: its questions and progress are then all tied to it.
        let watcher = Watcher {
            peer: context.peer.clone(),
            progress_token: context.meta.get_progress_token(),
            manager: self.tasks.manager.clone(),
        };
        let task = self
            .tasks
            .spawn_legacy(call, Some(watcher), session)
            .ok_or_else(too_many)?;
        Ok(created(&task, "working"))
    }
}

fn too_many() -> ErrorData {
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        "too many tasks are running; try again later",
        Some(json!({"kind": "overloaded"})),
    )
}

/// The answer to a `tools/call` that made `task`.
fn created(task: &rmcp::model::Task, status: &str) -> CustomResult {
    CustomResult(json!({ "task": Value::Object(task_json(task, status)) }))
}

/// The status a task's end shows: in 2025-11-25, a tool's error fails
/// the task ("For tool calls specifically, this includes cases where the
/// tool call result has `isError` set to true").
fn end_status(end: &TaskEnd) -> &'static str {
    match end {
        TaskEnd::Result(result) if result.is_error == Some(true) => "failed",
        TaskEnd::Result(_) => "completed",
        TaskEnd::Failed(_) => "failed",
        TaskEnd::Cancelled => "cancelled",
    }
}

/// A task's result as `tasks/result` answers it: the call's result in the
/// shape of the session's revision, tied to its task in `_meta`.
fn result_json(result: rmcp::model::CallToolResult, id: &str) -> Value {
    let mut result = ServerResult::CallToolResult(result);
    result.strip_result_type_for_legacy_peer();
    result.strip_non_object_output_for_legacy_peer();
    let mut value = serde_json::to_value(&result).unwrap_or_else(|_| json!({}));
    if let Some(object) = value.as_object_mut() {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                crate::mcp::RELATED_TASK_META.into(),
                json!({ "taskId": id }),
            );
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tools_call_that_asks_for_a_task_is_renamed() {
        let asks = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"task":{"ttl":1000}}}"#;
        let lifted: Value = serde_json::from_slice(&lift(asks).unwrap()).unwrap();
        assert_eq!(lifted["method"], TASK_CALL);
        assert_eq!(lifted["params"]["task"]["ttl"], 1000);
        // An argument named `task` is not a task.
        let argument =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"task":{}}}}"#;
        assert!(lift(argument).is_none());
        let other =
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","task":{}}}"#;
        assert!(lift(other).is_none());
        assert!(lift(b"not json \"task\"").is_none());
        assert!(lift(br#"{"method":"tools/call","params":{"task":1}}"#).is_none());
        // A 2026-07-28 request's `task` is ignored: not renamed.
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(lift(modern).is_none());
    }

    #[test]
    fn a_lifted_message_keeps_its_members_as_written_and_grows_by_the_name() {
        let asks = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"f":1e2,"s":"\u00e9"},"task":{}}}"#;
        let lifted = lift(asks).unwrap();
        assert_eq!(lifted.len(), asks.len() + LIFT_GROWTH);
        let text = String::from_utf8(lifted).unwrap();
        // Numbers and escapes as the client wrote them.
        assert!(text.contains(r#"{"f":1e2,"s":"\u00e9"}"#), "{text}");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["id"], 7);
        assert_eq!(value["method"], TASK_CALL);
    }
}
