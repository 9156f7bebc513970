//! A call run as a task of the 2026-07-28 tasks extension: polled until
//! it ends, its status as progress.

use std::time::Duration;

use rmcp::model::{GetTaskParams, TaskPayload, UpdateTaskParams};
use rmcp::ErrorData;

use crate::mcp::telemetry::OperationEnd;
use crate::{Progress, ToolError, ToolItem, ToolOutput};

use crate::mcp::client::error::{protocol_error, service_error};

use super::{result_from_json, RemoteCall};

/// A call the server runs as a task: polled with `tasks/get`.
pub(crate) struct RemoteTask {
    pub(crate) id: String,
    pub(crate) interval: Duration,
    pub(crate) status: Option<String>,
    pub(crate) reports: u32,
}

impl RemoteTask {
    pub(crate) fn new(task: &rmcp::model::Task) -> Self {
        let interval = task.poll_interval_ms.unwrap_or(500).clamp(20, 5_000);
        RemoteTask {
            id: task.task_id.clone(),
            interval: Duration::from_millis(interval),
            status: task.status_message.clone(),
            reports: 0,
        }
    }
}

impl RemoteCall {
    /// One look at the task: its status as progress, its input requests
    /// answered, its end as the stream's last items.
    pub(crate) async fn poll_task(&mut self) {
        let Some(task) = &mut self.task else { return };
        tokio::time::sleep(task.interval).await;
        let client = self.guard.client.clone();
        let got = client
            .running
            .peer()
            .get_task(GetTaskParams::new(task.id.clone()))
            .await;
        let detailed = match got {
            Ok(got) => got.task,
            Err(err) => return self.end_task(vec![Err(service_error(err))], false),
        };
        if detailed.task.status_message != task.status {
            task.status = detailed.task.status_message.clone();
            if let Some(message) = &task.status {
                task.reports += 1;
                let progress = Progress::new(f64::from(task.reports)).message(message.clone());
                self.pending.push_back(Ok(ToolOutput::progress(progress)));
            }
        }
        match detailed.payload {
            TaskPayload::Completed { result } => {
                if result.get("isError") == Some(&serde_json::Value::Bool(true)) {
                    self.operation.end(OperationEnd::ToolError);
                }
                self.end_task(result_from_json(result), true)
            }
            TaskPayload::Failed { error } => {
                let err = match serde_json::from_value::<ErrorData>(error.into()) {
                    Ok(data) => {
                        self.operation.end(OperationEnd::Rpc {
                            code: data.code.0,
                            message: &data.message,
                        });
                        protocol_error(data)
                    }
                    Err(e) => ToolError::failed(format!("the task failed: {e}")),
                };
                self.end_task(vec![Err(err)], true)
            }
            TaskPayload::Cancelled => self.end_task(
                vec![Err(ToolError::cancelled(
                    "the MCP server cancelled the task",
                ))],
                true,
            ),
            TaskPayload::InputRequired { input_requests } => {
                let id = task.id.clone();
                let answered = match self.count_round() {
                    Ok(()) => client.answer(input_requests).await,
                    Err(err) => Err(err),
                };
                let sent = match answered {
                    Ok(responses) => client
                        .running
                        .peer()
                        .update_task(UpdateTaskParams::new(id, responses))
                        .await
                        .map_err(service_error),
                    Err(err) => Err(err),
                };
                if let Err(err) = sent {
                    self.end_task(vec![Err(err)], false);
                }
            }
            _ => {}
        }
    }

    /// The task is over: `ended` when the server says so; otherwise the
    /// client gave up on it (an error here), and dropping the stream
    /// cancels it.
    pub(crate) fn end_task(&mut self, items: Vec<ToolItem>, ended: bool) {
        if ended {
            self.guard.task = None;
        }
        // Unless the call's end was told already (a result, a JSON-RPC
        // error), its first error is how it ended.
        match items.iter().find_map(|item| item.as_ref().err()) {
            None => self.operation.end(OperationEnd::Ok),
            Some(err) => self.operation.end(OperationEnd::failed(err)),
        }
        self.task = None;
        self.pending.extend(items);
    }
}
