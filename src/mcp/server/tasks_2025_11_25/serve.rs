//! The requests of the 2025-11-25 task scheme, answered by the
//! [`McpServer`]: a `tools/call` that asks for a task, `tasks/get`,
//! `tasks/result` and `tasks/cancel`, each seen only by the session that
//! made the task.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CustomRequest, CustomResult, ErrorCode, ServerResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tracing::Instrument as _;

use super::lift::TASK_CALL;
use super::shapes::{created, end_status, result_json, status_of, task_json};
use super::tap::Session;
use crate::mcp::call::{LegacyTask, TaskEnd, TaskSupport, Watcher};
use crate::mcp::input::{Backend, InputState};
use crate::mcp::server::handler::error_outcome;
use crate::mcp::server::revision;
use crate::mcp::server::McpServer;
use crate::mcp::telemetry::{Operation, OperationEnd, Target};

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
    pub(in crate::mcp::server) async fn serve_legacy(
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
