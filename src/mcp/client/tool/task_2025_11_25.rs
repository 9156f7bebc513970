//! A call run as a task of revision 2025-11-25's scheme: made
//! task-augmented, polled, its result fetched.

use std::time::Duration;

use rmcp::model::{CallToolResult, ClientRequest, ServerResult};
use rmcp::service::ServiceError;

use crate::{Progress, ToolError, ToolItem, ToolOutput};

use crate::mcp::client::connection::McpClient;
use crate::mcp::client::error::{protocol_error, service_error};

use super::task::RemoteTask;
use super::{quoted_json, result_from_json, RemoteCall};

/// How long a task of the 2025-11-25 scheme is asked to be kept: 5 min.
pub(crate) const LEGACY_TASK_TTL_MS: u64 = 300_000;

/// A request rmcp has no type for (the 2025-11-25 task methods), its
/// result as JSON.
pub(crate) async fn legacy_request(
    client: &McpClient,
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, ToolError> {
    let request =
        ClientRequest::CustomRequest(rmcp::model::CustomRequest::new(method, Some(params)));
    match client.running.peer().send_request(request).await {
        Ok(ServerResult::CustomResult(rmcp::model::CustomResult(value))) => Ok(value),
        Ok(other) => serde_json::to_value(&other).map_err(|err| {
            ToolError::failed(format!("the MCP server's answer to {method}: {err}"))
        }),
        Err(ServiceError::McpError(data)) => Err(protocol_error(data)),
        Err(err) => Err(service_error(err)),
    }
}

/// Whether an error result says the tool runs only as a task (the
/// TypeScript SDK 1.x: "Tool x requires task augmentation (taskSupport:
/// 'required')").
pub(crate) fn needs_task(result: &CallToolResult) -> bool {
    result.content.iter().any(|block| match block {
        rmcp::model::ContentBlock::Text(text) => text.text.contains("requires task augmentation"),
        _ => false,
    })
}

impl RemoteCall {
    /// The call as a task of the 2025-11-25 scheme: `tools/call` with a
    /// `task` field, answered with the task (`{"task": {"taskId", …}}`).
    pub(crate) async fn start_legacy_task(&mut self) -> Result<(), ToolError> {
        let client = self.guard.client.clone();
        let mut params = serde_json::to_value(self.spec.params()?)
            .map_err(|err| ToolError::failed(format!("the call could not be encoded: {err}")))?;
        params["task"] = serde_json::json!({ "ttl": LEGACY_TASK_TTL_MS });
        let created = legacy_request(&client, "tools/call", params).await?;
        let task = created.get("task").unwrap_or(&created);
        let Some(id) = task.get("taskId").and_then(|id| id.as_str()) else {
            return Err(ToolError::failed(format!(
                "the MCP server answered a task-augmented tools/call without a task: {}",
                quoted_json(&created)
            )));
        };
        let interval = task
            .get("pollInterval")
            .and_then(|ms| ms.as_u64())
            .unwrap_or(500)
            .clamp(20, 5_000);
        self.guard.task = Some(id.to_owned());
        self.legacy = Some(RemoteTask {
            id: id.to_owned(),
            interval: Duration::from_millis(interval),
            status: None,
            reports: 0,
        });
        Ok(())
    }

    /// One look at a 2025-11-25 task: its status message as progress;
    /// once it is no longer `working`, `tasks/result` — which waits for
    /// its end, the server's requests for input (elicitation) answered by
    /// the client's handler on the way — and its result as the stream's
    /// last items.
    pub(crate) async fn poll_legacy_task(&mut self) {
        let Some(task) = &mut self.legacy else { return };
        tokio::time::sleep(task.interval).await;
        let client = self.guard.client.clone();
        let id = serde_json::json!({ "taskId": task.id });
        let got = match legacy_request(&client, "tasks/get", id.clone()).await {
            Ok(got) => got,
            Err(err) => return self.end_legacy_task(vec![Err(err)], false),
        };
        let message = got
            .get("statusMessage")
            .and_then(|m| m.as_str())
            .map(str::to_owned);
        if message.is_some() && message != task.status {
            task.status = message.clone();
            task.reports += 1;
            let progress =
                Progress::new(f64::from(task.reports)).message(message.unwrap_or_default());
            self.pending.push_back(Ok(ToolOutput::progress(progress)));
        }
        if got.get("status").and_then(|s| s.as_str()) == Some("working") {
            return;
        }
        let items = match legacy_request(&client, "tasks/result", id).await {
            Ok(result) => match serde_json::from_value::<rmcp::model::JsonObject>(result) {
                Ok(result) => result_from_json(result),
                Err(err) => vec![Err(ToolError::failed(format!(
                    "the MCP server's task result is malformed: {err}"
                )))],
            },
            Err(err) => vec![Err(err)],
        };
        self.end_legacy_task(items, true);
    }

    pub(crate) fn end_legacy_task(&mut self, items: Vec<ToolItem>, ended: bool) {
        self.legacy = None;
        self.end_task(items, ended);
    }
}
