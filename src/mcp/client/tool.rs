//! [`McpTool`]: one remote tool as a local tool service — the call, its
//! progress, cancellation and task polling.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    ClientRequest, ElicitRequestParams, ElicitationAction, GetTaskParams,
    ProgressNotificationParam, ProgressToken, Request, RequestId, ServerResult, TaskPayload,
    UpdateTaskParams,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::ErrorData;
use tokio::sync::oneshot;
use tower_service::Service;

use crate::mcp::convert;
use crate::mcp::telemetry::{Operation, Outcome, Target};
use crate::{
    Describe, ErrorKind, Progress, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest,
    ToolStream,
};

use super::progress::{ProgressQueue, ProgressRouter};
use super::{protocol_error, service_error, McpClient, MAX_INPUT_REQUESTS};

/// The JSON-RPC error of a request that needs the user to open a URL
/// first (MCP 2025-11-25, "URL elicitation required").
const URL_ELICITATION_REQUIRED: i32 = -32042;

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
                    operation.end(Outcome::failed(&err));
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

/// A call the server runs as a task: polled with `tasks/get`.
pub(super) struct RemoteTask {
    pub(super) id: String,
    pub(super) interval: Duration,
    pub(super) status: Option<String>,
    pub(super) reports: u32,
}

impl RemoteTask {
    pub(super) fn new(task: &rmcp::model::Task) -> Self {
        let interval = task.poll_interval_ms.unwrap_or(500).clamp(20, 5_000);
        RemoteTask {
            id: task.task_id.clone(),
            interval: Duration::from_millis(interval),
            status: task.status_message.clone(),
            reports: 0,
        }
    }
}

pub(super) fn progress_item(param: ProgressNotificationParam) -> ToolItem {
    let mut progress = Progress::new(param.progress);
    progress.total = param.total;
    progress.message = param.message;
    Ok(ToolOutput::progress(progress))
}

/// How long a task of the 2025-11-25 scheme is asked to be kept: 5 min.
const LEGACY_TASK_TTL_MS: u64 = 300_000;

/// A request rmcp has no type for (the 2025-11-25 task methods), its
/// result as JSON.
async fn legacy_request(
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
fn needs_task(result: &CallToolResult) -> bool {
    result.content.iter().any(|block| match block {
        rmcp::model::ContentBlock::Text(text) => text.text.contains("requires task augmentation"),
        _ => false,
    })
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
                        self.operation.end(Outcome::Rpc {
                            code: data.code.0,
                            message: &data.message,
                        });
                        self.pending.push_back(Err(err));
                    }
                }
                Ok(Err(ServiceError::McpError(data))) => {
                    self.operation.end(Outcome::Rpc {
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
                        Outcome::ToolError
                    } else {
                        Outcome::Ok
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
        self.operation.end(Outcome::failed(&err));
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

    /// A `-32042` error (URL elicitation required, 2025-11-25): each
    /// elicitation in its data put to the client's handler, as a URL
    /// elicitation; all accepted, the call is sent again. Without a
    /// handler, or with one declined, the error names each URL, so that a
    /// person can still open it.
    async fn open_urls(&mut self, data: &ErrorData) -> Result<(), ToolError> {
        let asked: Vec<ElicitRequestParams> = data
            .data
            .as_ref()
            .and_then(|d| d.get("elicitations"))
            .and_then(|e| e.as_array())
            .map(|all| {
                all.iter()
                    .take(MAX_INPUT_REQUESTS + 1)
                    .filter_map(|one| serde_json::from_value(one.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let urls: Vec<String> = asked
            .iter()
            .filter_map(|params| match params {
                ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                    Some(format!("{message} ({url})"))
                }
                _ => None,
            })
            .collect();
        let refused = |why: String| {
            let opened = match urls.is_empty() {
                true => String::new(),
                false => format!("; open: {}", urls.join("; ")),
            };
            ToolError::new(
                ErrorKind::Denied,
                format!("{}: {why}{opened}", data.message),
            )
        };
        if urls.is_empty() || urls.len() != asked.len() {
            return Err(refused(
                "the server named no URL to open (its error's data has no URL elicitation)".into(),
            ));
        }
        if asked.len() > MAX_INPUT_REQUESTS {
            return Err(refused(format!(
                "the server asked for more than {MAX_INPUT_REQUESTS} URLs at once"
            )));
        }
        self.count_round()
            .map_err(|err| refused(err.message().to_owned()))?;
        let client = self.guard.client.clone();
        let Some(answers) = client.answers.clone().filter(|_| client.opens_urls) else {
            return Err(refused(
                "this client has no handler that opens URLs (McpClient::builder().handler(..), declaring URL elicitation); open it, then call again".into(),
            ));
        };
        let peer = client.running.peer().clone();
        for (at, params) in asked.into_iter().enumerate() {
            let context = rmcp::service::RequestContext::new(
                rmcp::model::NumberOrString::Number(at as i64),
                peer.clone(),
            );
            let answer = answers.elicit(params, context).await;
            match answer {
                Ok(result) if result.action == ElicitationAction::Accept => {}
                Ok(result) => {
                    return Err(refused(format!(
                        "the user did not open it ({:?})",
                        result.action
                    )))
                }
                Err(err) => return Err(refused(format!("the handler failed: {}", err.message))),
            }
        }
        let params = self.spec.params()?;
        self.resend(params).await
    }

    /// The call as a task of the 2025-11-25 scheme: `tools/call` with a
    /// `task` field, answered with the task (`{"task": {"taskId", …}}`).
    async fn start_legacy_task(&mut self) -> Result<(), ToolError> {
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
    async fn poll_legacy_task(&mut self) {
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

    fn end_legacy_task(&mut self, items: Vec<ToolItem>, ended: bool) {
        self.legacy = None;
        self.end_task(items, ended);
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

    /// One look at the task: its status as progress, its input requests
    /// answered, its end as the stream's last items.
    pub(super) async fn poll_task(&mut self) {
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
                    self.operation.end(Outcome::ToolError);
                }
                self.end_task(result_from_json(result), true)
            }
            TaskPayload::Failed { error } => {
                let err = match serde_json::from_value::<ErrorData>(error.into()) {
                    Ok(data) => {
                        self.operation.end(Outcome::Rpc {
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
    pub(super) fn end_task(&mut self, items: Vec<ToolItem>, ended: bool) {
        if ended {
            self.guard.task = None;
        }
        // Unless the call's end was told already (a result, a JSON-RPC
        // error), its first error is how it ended.
        match items.iter().find_map(|item| item.as_ref().err()) {
            None => self.operation.end(Outcome::Ok),
            Some(err) => self.operation.end(Outcome::failed(err)),
        }
        self.task = None;
        self.pending.extend(items);
    }
}
