//! [`McpClient`] and [`McpTool`]: a remote MCP server's tools as local
//! tool services.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use futures_util::stream;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientConfig,
    ClientRequest, ErrorCode, Implementation, JsonRpcMessage, JsonRpcNotification,
    ProgressNotificationParam, ProgressToken, Request, RequestId, ServerNotification, ServerResult,
};
use rmcp::service::{
    PeerRequestOptions, RunningService, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage,
};
use rmcp::transport::{IntoTransport, Transport};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::sync::{oneshot, Notify};
use tower_service::Service;

use super::convert;
use crate::{
    Describe, ErrorKind, Progress, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest,
    ToolStream, Toolbox,
};

/// Tokens whose progress arrived before their call subscribed, kept until
/// it does (a fast server can report progress before the request's send
/// has returned here).
const EARLY_TOKENS: usize = 64;

/// Routes `notifications/progress` to the call that owns the token.
///
/// Each call's progress waits in a queue of at most
/// [`PROGRESS_BACKLOG`](crate::tool::PROGRESS_BACKLOG) reports, as a local
/// tool's does: a server that reports faster than the caller reads loses
/// its oldest reports (a newer one supersedes them), never grows the
/// client's memory.
#[derive(Clone, Default)]
struct ProgressRouter {
    inner: Arc<Mutex<Routes>>,
}

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, Arc<ProgressQueue>>,
    early: HashMap<ProgressToken, VecDeque<ProgressNotificationParam>>,
    early_order: VecDeque<ProgressToken>,
}

/// One call's progress reports, oldest first, at most
/// [`PROGRESS_BACKLOG`](crate::tool::PROGRESS_BACKLOG).
#[derive(Default)]
struct ProgressQueue {
    reports: Mutex<VecDeque<ProgressNotificationParam>>,
    arrived: Notify,
}

/// Adds `param`, dropping the oldest report when `queue` is full.
fn push_bounded(queue: &mut VecDeque<ProgressNotificationParam>, param: ProgressNotificationParam) {
    if queue.len() >= crate::tool::PROGRESS_BACKLOG {
        queue.pop_front();
    }
    queue.push_back(param);
}

impl ProgressQueue {
    fn push(&self, param: ProgressNotificationParam) {
        push_bounded(
            &mut self.reports.lock().unwrap_or_else(|e| e.into_inner()),
            param,
        );
        // Stores a permit when nobody waits: a report pushed between a
        // reader's empty `pop` and its `notified().await` still wakes it.
        self.arrived.notify_one();
    }

    fn pop(&self) -> Option<ProgressNotificationParam> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    async fn next(&self) -> ProgressNotificationParam {
        loop {
            if let Some(param) = self.pop() {
                return param;
            }
            self.arrived.notified().await;
        }
    }
}

impl ProgressRouter {
    fn deliver(&self, param: ProgressNotificationParam) {
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = routes.calls.get(&param.progress_token) {
            queue.push(param);
            return;
        }
        let token = param.progress_token.clone();
        if !routes.early.contains_key(&token) {
            if routes.early_order.len() == EARLY_TOKENS {
                if let Some(oldest) = routes.early_order.pop_front() {
                    routes.early.remove(&oldest);
                }
            }
            routes.early_order.push_back(token.clone());
        }
        push_bounded(routes.early.entry(token).or_default(), param);
    }

    fn subscribe(&self, token: ProgressToken) -> Arc<ProgressQueue> {
        let queue = Arc::new(ProgressQueue::default());
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(early) = routes.early.remove(&token) {
            routes.early_order.retain(|t| t != &token);
            for param in early {
                queue.push(param);
            }
        }
        routes.calls.insert(token, queue.clone());
        queue
    }

    fn unsubscribe(&self, token: &ProgressToken) {
        let mut routes = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        routes.calls.remove(token);
    }
}

/// The client side of the connection.
struct Handler {
    info: ClientConfig,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

/// Routes progress notifications as the transport reads them.
///
/// rmcp runs each notification's handler in its own task, so a handler
/// may see a call's last progress after the call's result; reading them
/// here, in transport order, keeps every progress item before the result.
struct ProgressTap<T> {
    inner: T,
    router: ProgressRouter,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProgressTap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        })) = &message
        {
            self.router.deliver(progress.params.clone());
        }
        message
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

type Running = RunningService<RoleClient, Handler>;

/// A connection to an MCP server, whose tools become local tool services.
///
/// ```no_run
/// # async fn run() -> Result<(), toolstack::ToolError> {
/// use toolstack::serve::mcp::McpClient;
///
/// let client = McpClient::connect_http("http://127.0.0.1:8000/mcp").await?;
/// let toolbox = client.toolbox().await?; // every remote tool, callable locally
/// # let _ = toolbox; Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClient {
    running: Arc<Running>,
    progress: ProgressRouter,
}

fn client_info() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("toolstack", env!("CARGO_PKG_VERSION")),
    )
}

impl McpClient {
    /// Connects over any rmcp client transport (a child process, streamable
    /// HTTP, an in-memory duplex…) and completes the `initialize` handshake.
    pub async fn connect<T, E, A>(transport: T) -> Result<Self, ToolError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let progress = ProgressRouter::default();
        let handler = Handler {
            info: client_info(),
        };
        let tap = ProgressTap {
            inner: transport.into_transport(),
            router: progress.clone(),
        };
        let running = handler.serve(tap).await.map_err(|err| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("could not connect to the MCP server: {err}"),
            )
            .with_source(err)
        })?;
        Ok(McpClient {
            running: Arc::new(running),
            progress,
        })
    }

    /// Starts `command` as a child process and talks MCP over its stdio.
    pub async fn connect_stdio(command: tokio::process::Command) -> Result<Self, ToolError> {
        let child = rmcp::transport::TokioChildProcess::new(command).map_err(|err| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("could not start the MCP server process: {err}"),
            )
            .with_source(err)
        })?;
        Self::connect(child).await
    }

    /// Connects to a streamable HTTP endpoint such as `http://host/mcp`.
    pub async fn connect_http(url: &str) -> Result<Self, ToolError> {
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
        Self::connect(transport).await
    }

    /// The server's tools, each a local tool service.
    pub async fn tools(&self) -> Result<Vec<McpTool>, ToolError> {
        let tools = self.running.list_all_tools().await.map_err(service_error)?;
        Ok(tools
            .iter()
            .map(|tool| McpTool {
                info: Arc::new(convert::tool_from_mcp(tool)),
                client: self.clone(),
            })
            .collect())
    }

    /// The server's tools in a [`Toolbox`] (add a resolver to it to decide
    /// per caller which remote tools are visible).
    pub async fn toolbox(&self) -> Result<Toolbox, ToolError> {
        let mut toolbox = Toolbox::new();
        for tool in self.tools().await? {
            if let Err(dup) = toolbox.try_insert(crate::BoxTool::new(tool)) {
                tracing::warn!(tool = dup.name(), "the MCP server listed a tool twice");
            }
        }
        Ok(toolbox)
    }

    /// The underlying rmcp peer, for requests beyond tools.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.running.peer()
    }
}

impl fmt::Debug for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClient")
            .field(
                "server",
                &self
                    .running
                    .peer_info()
                    .and_then(|i| i.server_info.as_ref().map(|s| s.name.clone())),
            )
            .finish()
    }
}

/// Classifies an rmcp error.
fn service_error(err: ServiceError) -> ToolError {
    match err {
        ServiceError::McpError(data) => protocol_error(data),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::new(
            ErrorKind::Unavailable,
            format!("the MCP connection is closed: {err}"),
        )
        .with_source(err),
        ServiceError::Timeout { .. } => {
            ToolError::timeout(crate::TimeoutPhase::Open, err.to_string()).with_source(err)
        }
        ServiceError::Cancelled { .. } => ToolError::cancelled(err.to_string()).with_source(err),
        other => ToolError::failed(other.to_string()).with_source(other),
    }
}

/// A JSON-RPC error from the server as a [`ToolError`]: of the kind in its
/// `data` (`{"kind": "not_found"}`, as [`McpServer`](super::McpServer)
/// sends it), else guessed from the code and, for servers that send no
/// kind, the message.
fn protocol_error(data: rmcp::ErrorData) -> ToolError {
    if let Some(serde_json::Value::Object(fields)) = &data.data {
        if fields.get("kind").is_some_and(serde_json::Value::is_string) {
            let mut sent = fields.clone();
            sent.insert("error".to_owned(), data.message.as_ref().into());
            if let Some(err) = ToolError::from_model_json(&serde_json::Value::Object(sent)) {
                return err;
            }
        }
    }
    let kind =
        if data.code == ErrorCode::METHOD_NOT_FOUND || data.message.starts_with("unknown tool") {
            ErrorKind::NotFound
        } else if data.code == ErrorCode::INVALID_PARAMS {
            ErrorKind::InvalidArguments
        } else {
            ErrorKind::Failed
        };
    ToolError::new(kind, data.message.to_string())
}

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
/// as [`McpServer`](super::McpServer) sends it); for other servers, from
/// its code and message.
#[derive(Clone)]
pub struct McpTool {
    info: Arc<ToolInfo>,
    client: McpClient,
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
        Box::pin(async move {
            let arguments = parse_arguments(request.arguments())?;
            let mut params = CallToolRequestParams::new(name.to_string());
            if let Some(arguments) = arguments {
                params = params.with_arguments(arguments);
            }
            let handle = client
                .running
                .peer()
                .send_cancellable_request(
                    ClientRequest::CallToolRequest(Request::new(params)),
                    PeerRequestOptions::no_options(),
                )
                .await
                .map_err(service_error)?;
            let progress = client.progress.subscribe(handle.progress_token.clone());
            let call = RemoteCall {
                guard: CancelGuard {
                    client: client.clone(),
                    id: Some(handle.id.clone()),
                    router: client.progress.clone(),
                    token: handle.progress_token.clone(),
                },
                progress,
                response: Some(handle.rx),
                pending: VecDeque::new(),
            };
            Ok(ToolStream::new(stream::unfold(call, RemoteCall::next)))
        })
    }
}

fn parse_arguments(raw: &str) -> Result<Option<rmcp::model::JsonObject>, ToolError> {
    // An empty text sends no `arguments` at all, which MCP reads as none.
    if raw.trim_ascii().is_empty() {
        return Ok(None);
    }
    crate::arguments::parse_object(raw).map(Some)
}

/// Sends `notifications/cancelled` when a call is dropped before its
/// result, and stops routing its progress.
struct CancelGuard {
    // The connection itself, not just its peer: the cancellation task keeps
    // it open until the notification is written, even when this call held
    // the last handle.
    client: McpClient,
    id: Option<RequestId>,
    router: ProgressRouter,
    token: ProgressToken,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.router.unsubscribe(&self.token);
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        runtime.spawn(async move {
            let peer = client.running.peer();
            let param = CancelledNotificationParam::new(
                Some(id),
                Some("the caller dropped the response stream".to_owned()),
            );
            if let Err(err) = peer.notify_cancelled(param).await {
                tracing::debug!(%err, "cancellation not sent");
            }
        });
    }
}

type Response = Result<ServerResult, ServiceError>;

/// The state of one remote call, unfolded into its item stream.
struct RemoteCall {
    guard: CancelGuard,
    progress: Arc<ProgressQueue>,
    response: Option<oneshot::Receiver<Response>>,
    pending: VecDeque<ToolItem>,
}

fn progress_item(param: ProgressNotificationParam) -> ToolItem {
    let mut progress = Progress::new(param.progress);
    progress.total = param.total;
    progress.message = param.message;
    Ok(ToolOutput::progress(progress))
}

impl RemoteCall {
    async fn next(mut self) -> Option<(ToolItem, RemoteCall)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
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
            let items = match outcome {
                Err(_) => vec![Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the MCP connection closed before the tool answered",
                ))],
                Ok(Err(err)) => vec![Err(service_error(err))],
                Ok(Ok(ServerResult::CallToolResult(result))) => convert::result_items(result),
                Ok(Ok(other)) => vec![Err(ToolError::failed(format!(
                    "the MCP server answered tools/call with an unexpected result: {other:?}"
                )))],
            };
            self.pending.extend(items);
        }
    }
}
