//! [`McpTool`]: one remote tool as a local tool service — the call, its
//! progress, cancellation and task polling.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    ClientRequest, ProgressNotificationParam, ProgressToken, Request, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use tokio::sync::oneshot;
use tower_service::Service;

use crate::mcp::convert;
use crate::mcp::telemetry::{Operation, OperationEnd, Target};
use crate::{
    Describe, ErrorKind, Progress, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest,
    ToolStream,
};

use super::connection::McpClient;
use super::error::{protocol_error, service_error};
use super::progress::{ProgressQueue, ProgressRouter};

mod task;
mod task_2025_11_25;
mod url;

use self::task::RemoteTask;
use self::task_2025_11_25::needs_task;
use self::url::URL_ELICITATION_REQUIRED;

/// One tool of a remote MCP server as a local tool service.
///
/// A call sends `tools/call`; the server's progress notifications arrive
/// as progress items while it runs, then the result's content (and its
/// structured value) as items, or an error. Dropping the stream before the
/// result sends `notifications/cancelled`.
///
/// Progress waits for the caller in a queue of at most
/// [`PROGRESS_BACKLOG`](crate::tool::PROGRESS_BACKLOG) reports per call; a
/// server that floods it loses its oldest reports first, as a local tool's
/// [`ProgressReporter`](crate::tool::ProgressReporter) does. A JSON-RPC
/// error takes its kind from the error's `data` (`{"kind": "not_found"}`,
/// as [`McpServer`](crate::mcp::McpServer) sends it); for other servers, from
/// its code and message.
#[derive(Clone)]
pub struct McpTool {
    pub(super) info: Arc<ToolInfo>,
    pub(super) client: McpClient,
}

impl Describe for McpTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl fmt::Debug for McpTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.info.name())
            .finish()
    }
}

impl Service<ToolRequest> for McpTool {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<ToolStream, ToolError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let client = self.client.clone();
        let name = self.info.name_shared().clone();
        // Made now, inside the caller's span (a trace layer enters it for
        // `call`), not when the future first runs: the client span, whose
        // context goes on to the server (else the one the request came
        // with).
        let came_with = request.extensions().get::<crate::TraceContext>();
        let mut operation = client.operation("tools/call", Target::Tool(name.clone()), came_with);
        let trace = operation.trace_context().or_else(|| came_with.cloned());
        Box::pin(async move {
            let spec = CallSpec {
                name,
                request,
                trace,
            };
            let sent = match spec.params() {
                Ok(params) => client.send(params).await,
                Err(err) => Err(err),
            };
            let sent = match sent {
                Ok(sent) => sent,
                Err(err) => {
                    operation.end(OperationEnd::failed(&err));
                    return Err(err);
                }
            };
            operation.request_id(&sent.id);
            let progress = client.progress.subscribe(sent.token.clone());
            let call = RemoteCall {
                guard: CancelGuard {
                    client: client.clone(),
                    id: Some(sent.id),
                    task: None,
                    router: client.progress.clone(),
                    token: sent.token,
                },
                progress,
                response: Some(sent.rx),
                pending: VecDeque::new(),
                spec,
                rounds: 0,
                task: None,
                legacy: None,
                operation,
            };
            // Open as every tool opens: at the server's first progress
            // report or its result, so tower's own layers over a remote
            // tool bound the remote work, not only the sending.
            let stream = ToolStream::new(stream::unfold(call, RemoteCall::next));
            crate::tool::open_at_first_item(stream)
                .await
                .map(ToolStream::new)
        })
    }
}

/// What a `tools/call` is made of, kept for a retry with the client's
/// input: the request itself, not a copy of its parsed arguments.
pub(super) struct CallSpec {
    pub(super) name: Arc<str>,
    pub(super) request: ToolRequest,
    pub(super) trace: Option<crate::TraceContext>,
}

impl CallSpec {
    pub(super) fn params(&self) -> Result<CallToolRequestParams, ToolError> {
        let mut params = CallToolRequestParams::new(self.name.to_string());
        if let Some(arguments) = parse_arguments(&self.request)? {
            params = params.with_arguments(arguments);
        }
        // The trace goes on.
        if let Some(trace) = &self.trace {
            use rmcp::model::RequestParamsMeta;
            params.set_traceparent(trace.traceparent());
            if let Some(state) = trace.tracestate() {
                params.set_tracestate(state);
            }
        }
        Ok(params)
    }
}

/// A `tools/call` on its way.
pub(super) struct Sent {
    pub(super) id: RequestId,
    pub(super) token: ProgressToken,
    pub(super) rx: oneshot::Receiver<Response>,
}

impl McpClient {
    pub(super) async fn send(&self, params: CallToolRequestParams) -> Result<Sent, ToolError> {
        let handle = self
            .running
            .peer()
            .send_cancellable_request(
                ClientRequest::CallToolRequest(Request::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .map_err(service_error)?;
        Ok(Sent {
            id: handle.id,
            token: handle.progress_token,
            rx: handle.rx,
        })
    }
}

pub(super) fn parse_arguments(
    request: &ToolRequest,
) -> Result<Option<rmcp::model::JsonObject>, ToolError> {
    let raw = request.arguments();
    // An empty text sends no `arguments` at all, which MCP reads as none.
    if raw.trim_ascii().is_empty() {
        return Ok(None);
    }
    // A value a layer above parsed (a validation's) is copied, which is
    // cheaper than a parse; else the text is parsed into the map sent, and
    // no value is kept that nothing below would read.
    match crate::arguments::parsed_already(request) {
        Some(serde_json::Value::Object(map)) => Ok(Some(map.clone())),
        Some(other) => Err(crate::arguments::not_an_object(crate::arguments::kind_of(
            other,
        ))),
        None => crate::arguments::parse_object(raw).map(Some),
    }
}

/// Sends `notifications/cancelled` when a call is dropped before its
/// result (or `tasks/cancel` when it runs as a task), and stops routing
/// its progress.
pub(super) struct CancelGuard {
    // The connection itself, not just its peer: the cancellation task keeps
    // it open until the notification is written, even when this call held
    // the last handle.
    pub(super) client: McpClient,
    pub(super) id: Option<RequestId>,
    pub(super) task: Option<String>,
    pub(super) router: ProgressRouter,
    pub(super) token: ProgressToken,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.router.unsubscribe(&self.token);
        let (id, task) = (self.id.take(), self.task.take());
        if id.is_none() && task.is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        runtime.spawn(async move {
            let peer = client.running.peer();
            if let Some(id) = id {
                let param = CancelledNotificationParam::new(
                    Some(id),
                    Some("the caller dropped the response stream".to_owned()),
                );
                if let Err(err) = peer.notify_cancelled(param).await {
                    tracing::debug!(%err, "cancellation not sent");
                }
            }
            if let Some(task) = task {
                if let Err(err) = peer.cancel_task(CancelTaskParams::new(task)).await {
                    tracing::debug!(%err, "task cancellation not sent");
                }
            }
        });
    }
}

pub(super) type Response = Result<ServerResult, ServiceError>;

/// The state of one remote call, unfolded into its item stream.
pub(super) struct RemoteCall {
    pub(super) guard: CancelGuard,
    pub(super) progress: Arc<ProgressQueue>,
    pub(super) response: Option<oneshot::Receiver<Response>>,
    pub(super) pending: VecDeque<ToolItem>,
    // For a retry with the client's input (2026-07-28).
    pub(super) spec: CallSpec,
    pub(super) rounds: usize,
    pub(super) task: Option<RemoteTask>,
    /// A task of the 2025-11-25 scheme (`tasks/get`, then `tasks/result`).
    pub(super) legacy: Option<RemoteTask>,
    // The client span and duration, ended with the call's outcome.
    pub(super) operation: Operation,
}

pub(super) fn progress_item(param: ProgressNotificationParam) -> ToolItem {
    let mut progress = Progress::new(param.progress);
    progress.total = param.total;
    progress.message = param.message;
    Ok(ToolOutput::progress(progress))
}

/// A JSON value as a message quotes it: at most 200 characters.
fn quoted_json(value: &serde_json::Value) -> String {
    value.to_string().chars().take(200).collect()
}

/// A `CallToolResult` the server sent as JSON (a task's result).
pub(super) fn result_from_json(result: rmcp::model::JsonObject) -> Vec<ToolItem> {
    match serde_json::from_value::<CallToolResult>(serde_json::Value::Object(result)) {
        Ok(result) => convert::result_items(result),
        Err(err) => vec![Err(ToolError::failed(format!(
            "the MCP server's task result is malformed: {err}"
        )))],
    }
}

impl RemoteCall {
    pub(super) async fn next(mut self) -> Option<(ToolItem, RemoteCall)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
            }
            if self.task.is_some() {
                self.poll_task().await;
                continue;
            }
            if self.legacy.is_some() {
                self.poll_legacy_task().await;
                continue;
            }
            let response = self.response.as_mut()?;
            let outcome = tokio::select! {
                biased;
                param = self.progress.next() => return Some((progress_item(param), self)),
                outcome = response => outcome,
            };
            self.response = None;
            self.guard.id = None;
            // Progress sent before the result is routed before it.
            while let Some(param) = self.progress.pop() {
                self.pending.push_back(progress_item(param));
            }
            match outcome {
                Err(_) => self.fail(ToolError::new(
                    ErrorKind::Unavailable,
                    "the MCP connection closed before the tool answered",
                )),
                // A tool that runs only as a task, on a server of the
                // 2025-11-25 scheme (the TypeScript SDK 1.x's words): the
                // call made again, task-augmented.
                Ok(Err(ServiceError::McpError(data)))
                    if data.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
                        && data.message.contains("task augmentation")
                        && self.rounds == 0 =>
                {
                    self.rounds += 1;
                    if let Err(err) = self.start_legacy_task().await {
                        self.fail(err);
                    }
                }
                Ok(Err(ServiceError::McpError(data)))
                    if data.code.0 == URL_ELICITATION_REQUIRED =>
                {
                    // The user must open a URL first (an authorization,
                    // a payment): asked through the client's handler, and
                    // the call made again once every one is done.
                    if let Err(err) = self.open_urls(&data).await {
                        self.operation.end(OperationEnd::Rpc {
                            code: data.code.0,
                            message: &data.message,
                        });
                        self.pending.push_back(Err(err));
                    }
                }
                Ok(Err(ServiceError::McpError(data))) => {
                    self.operation.end(OperationEnd::Rpc {
                        code: data.code.0,
                        message: &data.message,
                    });
                    self.pending.push_back(Err(protocol_error(data)));
                }
                Ok(Err(err)) => self.fail(service_error(err)),
                // The TypeScript SDK 1.x says it in an error result.
                Ok(Ok(ServerResult::CallToolResult(result)))
                    if result.is_error == Some(true) && self.rounds == 0 && needs_task(&result) =>
                {
                    self.rounds += 1;
                    if let Err(err) = self.start_legacy_task().await {
                        self.fail(err);
                    }
                }
                Ok(Ok(ServerResult::CallToolResult(result))) => {
                    self.operation.end(if result.is_error == Some(true) {
                        OperationEnd::ToolError
                    } else {
                        OperationEnd::Ok
                    });
                    self.pending.extend(convert::result_items(result))
                }
                Ok(Ok(ServerResult::InputRequiredResult(asked))) => {
                    if let Err(err) = self.retry(asked).await {
                        self.fail(err);
                    }
                }
                Ok(Ok(ServerResult::CreateTaskResult(created))) => {
                    let task = RemoteTask::new(&created.task);
                    self.guard.task = Some(task.id.clone());
                    self.task = Some(task);
                }
                Ok(Ok(other)) => self.fail(ToolError::failed(format!(
                    "the MCP server answered tools/call with an unexpected result: {other:?}"
                ))),
            }
        }
    }

    /// The call ends with `err`, which no response carried.
    fn fail(&mut self, err: ToolError) {
        self.operation.end(OperationEnd::failed(&err));
        self.pending.push_back(Err(err));
    }

    /// Counts a round of input; an error past the client's limit.
    pub(super) fn count_round(&mut self) -> Result<(), ToolError> {
        self.rounds += 1;
        if self.rounds > self.guard.client.max_input_rounds {
            return Err(ToolError::failed(format!(
                "the MCP server asked for input more than {} times in one call",
                self.guard.client.max_input_rounds
            )));
        }
        Ok(())
    }

    /// Answers an input-required result and sends the call again.
    pub(super) async fn retry(
        &mut self,
        asked: rmcp::model::InputRequiredResult,
    ) -> Result<(), ToolError> {
        self.count_round()?;
        let client = self.guard.client.clone();
        let answers = match asked.input_requests {
            Some(requests) => Some(client.answer(requests).await?),
            None => None,
        };
        let mut params = self.spec.params()?;
        params.input_responses = answers;
        params.request_state = asked.request_state;
        self.resend(params).await
    }

    /// Sends the call again with `params`: the new request has its own id
    /// and progress token.
    async fn resend(&mut self, params: CallToolRequestParams) -> Result<(), ToolError> {
        let sent = self.guard.client.send(params).await?;
        self.guard.router.unsubscribe(&self.guard.token);
        self.progress = self.guard.router.subscribe(sent.token.clone());
        self.guard.token = sent.token;
        self.guard.id = Some(sent.id);
        self.response = Some(sent.rx);
        Ok(())
    }
}
