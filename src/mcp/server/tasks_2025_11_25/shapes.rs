//! The shapes of MCP 2025-11-25's task scheme that rmcp's types lack:
//! `capabilities.tasks` in `initialize`, each tool's
//! `execution.taskSupport`, a task with its fields flat, its status word,
//! and its result tied to it.

use std::collections::HashMap;

use rmcp::model::{CustomResult, DetailedTask, ServerResult, TaskPayload};
use serde_json::{json, Map, Value};

use crate::mcp::call::{TaskEnd, TaskSupport};

/// An `initialize` result with `capabilities.tasks`: tool calls as tasks,
/// and their cancellation (no `tasks/list`).
pub(super) fn with_capability(init: serde_json::Result<Value>) -> Option<Value> {
    let mut init = init.ok()?;
    let caps = init.get_mut("capabilities")?.as_object_mut()?;
    caps.insert(
        "tasks".into(),
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
    );
    Some(init)
}

/// A `tools/list` result with each task tool's `execution.taskSupport`.
pub(super) fn with_execution(
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

/// The answer to a `tools/call` that made `task`.
pub(super) fn created(task: &rmcp::model::Task, status: &str) -> CustomResult {
    CustomResult(json!({ "task": Value::Object(task_json(task, status)) }))
}

/// The status a task's end shows: in 2025-11-25, a tool's error fails
/// the task ("For tool calls specifically, this includes cases where the
/// tool call result has `isError` set to true").
pub(super) fn end_status(end: &TaskEnd) -> &'static str {
    match end {
        TaskEnd::Result(result) if result.is_error == Some(true) => "failed",
        TaskEnd::Result(_) => "completed",
        TaskEnd::Failed(_) => "failed",
        TaskEnd::Cancelled => "cancelled",
    }
}

/// A task's result as `tasks/result` answers it: the call's result in the
/// shape of the session's revision, tied to its task in `_meta`.
pub(super) fn result_json(result: rmcp::model::CallToolResult, id: &str) -> Value {
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
