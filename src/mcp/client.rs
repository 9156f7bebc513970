//! [`McpClient`] and [`McpTool`]: a remote MCP server's tools as local
//! tool services.

#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorCode, GetTaskParams,
    Implementation, InputRequest, InputRequests, InputResponses, JsonRpcMessage,
    JsonRpcNotification, ListRootsResult, NumberOrString, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, Request, RequestId, ServerNotification, ServerResult, TaskPayload,
    UpdateTaskParams,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RequestContext, RunningService,
    RxJsonRpcMessage, ServiceError, TxJsonRpcMessage,
};
use rmcp::transport::{IntoTransport, Transport};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, ServiceExt};
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

/// The client side of the connection: the user's answers to a server's
/// requests for input, if any.
struct Handler {
    info: ClientConfig,
    answers: Option<Arc<dyn Answer>>,
}

fn no_answers(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("this client answers no {what} requests"),
        None,
    )
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    // Revisions up to 2025-11-25: the server asks with a request.

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.elicit(params, context).await,
            None => Err(no_answers("elicitation")),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.create_message(params, context).await,
            None => Err(no_answers("sampling")),
        }
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        match &self.answers {
            Some(answers) => answers.list_roots(context).await,
            None => Err(no_answers("roots")),
        }
    }
}

/// A user's rmcp [`ClientHandler`], type-erased: what answers a server's
/// requests for input, whichever way they come (a request on the session,
/// an input-required result, a task waiting for input).
trait Answer: Send + Sync + 'static {
    fn elicit(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>>;
    fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>>;
    fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ListRootsResult, ErrorData>>;
}

struct Answers<H>(Arc<H>);

impl<H: ClientHandler> Answer for Answers<H> {
    fn elicit(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.create_elicitation(params, context).await })
    }

    fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.create_message(params, context).await })
    }

    fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> BoxFuture<'static, Result<ListRootsResult, ErrorData>> {
        let handler = self.0.clone();
        Box::pin(async move { handler.list_roots(context).await })
    }
}

/// Answers one request for input as its result's JSON.
async fn answer_one(
    answers: &dyn Answer,
    key: String,
    request: InputRequest,
    peer: Peer<RoleClient>,
) -> Result<(String, serde_json::Value), ToolError> {
    let context = RequestContext::new(NumberOrString::String(key.as_str().into()), peer);
    let value = match request {
        InputRequest::Elicitation(request) => answers
            .elicit(request.params, context)
            .await
            .and_then(|r| to_json(&r)),
        InputRequest::CreateMessage(request) => answers
            .create_message(request.params, context)
            .await
            .and_then(|r| to_json(&r)),
        InputRequest::ListRoots(_) => answers.list_roots(context).await.and_then(|r| to_json(&r)),
        other => Err(ErrorData::invalid_params(
            format!("an input request of an unknown kind: {other:?}"),
            None,
        )),
    };
    value.map(|v| (key, v)).map_err(|err| {
        ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "could not answer the MCP server's request for input: {}",
                err.message
            ),
        )
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ErrorData> {
    serde_json::to_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
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
/// use toolstack::mcp::McpClient;
///
/// let client = McpClient::connect_http("http://127.0.0.1:8000/mcp").await?;
/// let toolbox = client.toolbox().await?; // every remote tool, callable locally
/// # let _ = toolbox; Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClient {
    running: Arc<Running>,
    progress: ProgressRouter,
    answers: Option<Arc<dyn Answer>>,
    max_input_rounds: usize,
}

/// How many input-required rounds one call may take before the client
/// gives up (rmcp's own helper stops at the same number).
pub const DEFAULT_MAX_INPUT_ROUNDS: usize = 10;

/// How many requests for input one round may carry: a server that asks
/// for more gets an error, not that many prompts.
pub const MAX_INPUT_REQUESTS: usize = 64;

/// Options for connecting an [`McpClient`]: who answers the server's
/// requests for input, which lifecycle to use.
///
/// ```no_run
/// # async fn run() -> Result<(), toolstack::ToolError> {
/// use toolstack::mcp::rmcp::model::{ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation};
/// use toolstack::mcp::rmcp::{service::RequestContext, ClientHandler, ErrorData, RoleClient};
/// use toolstack::mcp::McpClient;
///
/// /// Says yes to every question.
/// struct Yes;
///
/// impl ClientHandler for Yes {
///     fn get_info(&self) -> ClientConfig {
///         let caps = ClientCapabilities::builder().enable_elicitation().build();
///         ClientConfig::new(caps, Implementation::new("yes", "1.0"))
///     }
///     async fn create_elicitation(&self, _: ElicitRequestParams, _: RequestContext<RoleClient>)
///         -> Result<ElicitResult, ErrorData> {
///         Ok(ElicitResult::new(ElicitationAction::Accept).with_content(serde_json::json!({"confirm": true})))
///     }
/// }
///
/// let client = McpClient::builder()
///     .handler(Yes)
///     .stateless()
///     .connect_http("http://127.0.0.1:8000/mcp")
///     .await?;
/// # let _ = client; Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpClientBuilder {
    info: ClientConfig,
    answers: Option<Arc<dyn Answer>>,
    stateless: bool,
    max_input_rounds: usize,
}

impl Default for McpClientBuilder {
    fn default() -> Self {
        McpClientBuilder {
            info: ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("toolstack", env!("CARGO_PKG_VERSION")),
            ),
            answers: None,
            stateless: false,
            max_input_rounds: DEFAULT_MAX_INPUT_ROUNDS,
        }
    }
}

impl McpClientBuilder {
    /// Answers the server's requests for input — elicitation, sampling,
    /// roots — with `handler`, an rmcp [`ClientHandler`], and announces its
    /// capabilities (its `get_info`) as the client's: as requests on the
    /// session (revisions up to 2025-11-25), as the answers of an
    /// input-required result (2026-07-28; the client retries the call
    /// with them), or for a task waiting for input (`tasks/update`). Only
    /// its `get_info`, `create_elicitation`, `create_message` and
    /// `list_roots` are used.
    pub fn handler<H: ClientHandler>(mut self, handler: H) -> Self {
        self.info = handler.get_info();
        self.answers = Some(Arc::new(Answers(Arc::new(handler))));
        self
    }

    /// Speaks revision 2026-07-28 without a session: `server/discover`
    /// instead of `initialize`, and every request carries its revision and
    /// the client's capabilities. The server cannot send requests then;
    /// it asks for input with input-required results, which the client
    /// answers and retries.
    pub fn stateless(mut self) -> Self {
        self.stateless = true;
        self
    }

    /// How many input-required rounds one call may take (default
    /// [`DEFAULT_MAX_INPUT_ROUNDS`]) before it ends with an error.
    pub fn max_input_rounds(mut self, rounds: usize) -> Self {
        self.max_input_rounds = rounds;
        self
    }

    /// Connects over any rmcp client transport (a child process, streamable
    /// HTTP, an in-memory duplex…): the `initialize` handshake, or
    /// `server/discover` when [`stateless`](Self::stateless).
    pub async fn connect<T, E, A>(self, transport: T) -> Result<McpClient, ToolError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let progress = ProgressRouter::default();
        let mut info = self.info;
        // Calls that become tasks still look like streams (see McpTool).
        info.capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(
                rmcp::model::TASKS_EXTENSION_ID.to_string(),
                Default::default(),
            );
        let handler = Handler {
            info,
            answers: self.answers.clone(),
        };
        let tap = ProgressTap {
            inner: transport.into_transport(),
            router: progress.clone(),
        };
        let running = if self.stateless {
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            handler.serve_with_lifecycle(tap, lifecycle).await
        } else {
            handler.serve(tap).await
        };
        let running = running.map_err(|err| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("could not connect to the MCP server: {err}"),
            )
            .with_source(err)
        })?;
        Ok(McpClient {
            running: Arc::new(running),
            progress,
            answers: self.answers,
            max_input_rounds: self.max_input_rounds,
        })
    }

    /// Starts `command` as a child process and talks MCP over its stdio.
    pub async fn connect_stdio(
        self,
        command: tokio::process::Command,
    ) -> Result<McpClient, ToolError> {
        let child = rmcp::transport::TokioChildProcess::new(command).map_err(|err| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("could not start the MCP server process: {err}"),
            )
            .with_source(err)
        })?;
        self.connect(child).await
    }

    /// Connects to a streamable HTTP endpoint such as `http://host/mcp`.
    pub async fn connect_http(self, url: &str) -> Result<McpClient, ToolError> {
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
        self.connect(transport).await
    }
}

impl McpClient {
    /// Options for connecting: a handler for the server's requests for
    /// input, the stateless lifecycle.
    pub fn builder() -> McpClientBuilder {
        McpClientBuilder::default()
    }

    /// Connects over any rmcp client transport (a child process, streamable
    /// HTTP, an in-memory duplex…) and completes the `initialize` handshake.
    pub async fn connect<T, E, A>(transport: T) -> Result<Self, ToolError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        Self::builder().connect(transport).await
    }

    /// Starts `command` as a child process and talks MCP over its stdio.
    pub async fn connect_stdio(command: tokio::process::Command) -> Result<Self, ToolError> {
        Self::builder().connect_stdio(command).await
    }

    /// Connects to a streamable HTTP endpoint such as `http://host/mcp`.
    pub async fn connect_http(url: &str) -> Result<Self, ToolError> {
        Self::builder().connect_http(url).await
    }

    /// Answers the server's requests for input, as their results' JSON.
    async fn answer(&self, requests: InputRequests) -> Result<InputResponses, ToolError> {
        let Some(answers) = &self.answers else {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                "the MCP server asked for input (elicitation, sampling or roots), and this client \
                 has no handler to answer it: connect with McpClient::builder().handler(..)",
            ));
        };
        if requests.len() > MAX_INPUT_REQUESTS {
            return Err(ToolError::failed(format!(
                "the MCP server asked for {} inputs at once; this client answers at most {MAX_INPUT_REQUESTS}",
                requests.len()
            )));
        }
        let peer = self.running.peer().clone();
        let answered = futures_util::future::try_join_all(
            requests
                .into_iter()
                .map(|(key, request)| answer_one(answers.as_ref(), key, request, peer.clone())),
        )
        .await?;
        Ok(answered.into_iter().collect())
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
    if data.code == ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY {
        let required = data
            .data
            .as_ref()
            .and_then(|d| d.get("requiredCapabilities"))
            .map(|caps| caps.to_string())
            .unwrap_or_else(|| "(not named)".to_owned());
        return ToolError::new(
            ErrorKind::Unavailable,
            format!(
                "the MCP server needs a client capability this client did not declare: {required}"
            ),
        );
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
        // Read now, inside the caller's span (a trace layer enters it for
        // `call`), not when the future first runs.
        let trace = trace_context(&request);
        Box::pin(async move {
            let spec = CallSpec {
                name,
                request,
                trace,
            };
            let sent = client.send(spec.params()?).await?;
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
            };
            Ok(ToolStream::new(stream::unfold(call, RemoteCall::next)))
        })
    }
}

/// What a `tools/call` is made of, kept for a retry with the client's
/// input: the request itself, not a copy of its parsed arguments.
struct CallSpec {
    name: Arc<str>,
    request: ToolRequest,
    trace: Option<crate::TraceContext>,
}

impl CallSpec {
    fn params(&self) -> Result<CallToolRequestParams, ToolError> {
        let mut params = CallToolRequestParams::new(self.name.to_string());
        if let Some(arguments) = parse_arguments(self.request.arguments())? {
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
struct Sent {
    id: RequestId,
    token: ProgressToken,
    rx: oneshot::Receiver<Response>,
}

impl McpClient {
    async fn send(&self, params: CallToolRequestParams) -> Result<Sent, ToolError> {
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

/// The trace context to send: (with the `opentelemetry` feature) the
/// current span's, else the one the request came with.
fn trace_context(request: &ToolRequest) -> Option<crate::TraceContext> {
    #[cfg(feature = "opentelemetry")]
    if let Some(current) = crate::TraceContext::current() {
        return Some(current);
    }
    request.extensions().get::<crate::TraceContext>().cloned()
}

fn parse_arguments(raw: &str) -> Result<Option<rmcp::model::JsonObject>, ToolError> {
    // An empty text sends no `arguments` at all, which MCP reads as none.
    if raw.trim_ascii().is_empty() {
        return Ok(None);
    }
    crate::arguments::parse_object(raw).map(Some)
}

/// Sends `notifications/cancelled` when a call is dropped before its
/// result (or `tasks/cancel` when it runs as a task), and stops routing
/// its progress.
struct CancelGuard {
    // The connection itself, not just its peer: the cancellation task keeps
    // it open until the notification is written, even when this call held
    // the last handle.
    client: McpClient,
    id: Option<RequestId>,
    task: Option<String>,
    router: ProgressRouter,
    token: ProgressToken,
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

type Response = Result<ServerResult, ServiceError>;

/// The state of one remote call, unfolded into its item stream.
struct RemoteCall {
    guard: CancelGuard,
    progress: Arc<ProgressQueue>,
    response: Option<oneshot::Receiver<Response>>,
    pending: VecDeque<ToolItem>,
    // For a retry with the client's input (2026-07-28).
    spec: CallSpec,
    rounds: usize,
    task: Option<RemoteTask>,
}

/// A call the server runs as a task: polled with `tasks/get`.
struct RemoteTask {
    id: String,
    interval: Duration,
    status: Option<String>,
    reports: u32,
}

impl RemoteTask {
    fn new(task: &rmcp::model::Task) -> Self {
        let interval = task.poll_interval_ms.unwrap_or(500).clamp(20, 5_000);
        RemoteTask {
            id: task.task_id.clone(),
            interval: Duration::from_millis(interval),
            status: task.status_message.clone(),
            reports: 0,
        }
    }
}

fn progress_item(param: ProgressNotificationParam) -> ToolItem {
    let mut progress = Progress::new(param.progress);
    progress.total = param.total;
    progress.message = param.message;
    Ok(ToolOutput::progress(progress))
}

/// A `CallToolResult` the server sent as JSON (a task's result).
fn result_from_json(result: rmcp::model::JsonObject) -> Vec<ToolItem> {
    match serde_json::from_value::<CallToolResult>(serde_json::Value::Object(result)) {
        Ok(result) => convert::result_items(result),
        Err(err) => vec![Err(ToolError::failed(format!(
            "the MCP server's task result is malformed: {err}"
        )))],
    }
}

impl RemoteCall {
    async fn next(mut self) -> Option<(ToolItem, RemoteCall)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
            }
            if self.task.is_some() {
                self.poll_task().await;
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
                Err(_) => self.pending.push_back(Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the MCP connection closed before the tool answered",
                ))),
                Ok(Err(err)) => self.pending.push_back(Err(service_error(err))),
                Ok(Ok(ServerResult::CallToolResult(result))) => {
                    self.pending.extend(convert::result_items(result))
                }
                Ok(Ok(ServerResult::InputRequiredResult(asked))) => {
                    if let Err(err) = self.retry(asked).await {
                        self.pending.push_back(Err(err));
                    }
                }
                Ok(Ok(ServerResult::CreateTaskResult(created))) => {
                    let task = RemoteTask::new(&created.task);
                    self.guard.task = Some(task.id.clone());
                    self.task = Some(task);
                }
                Ok(Ok(other)) => self.pending.push_back(Err(ToolError::failed(format!(
                    "the MCP server answered tools/call with an unexpected result: {other:?}"
                )))),
            }
        }
    }

    /// Counts a round of input; an error past the client's limit.
    fn count_round(&mut self) -> Result<(), ToolError> {
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
    async fn retry(&mut self, asked: rmcp::model::InputRequiredResult) -> Result<(), ToolError> {
        self.count_round()?;
        let client = self.guard.client.clone();
        let answers = match asked.input_requests {
            Some(requests) => Some(client.answer(requests).await?),
            None => None,
        };
        let mut params = self.spec.params()?;
        params.input_responses = answers;
        params.request_state = asked.request_state;
        let sent = client.send(params).await?;
        // The new request has its own id and progress token.
        self.guard.router.unsubscribe(&self.guard.token);
        self.progress = self.guard.router.subscribe(sent.token.clone());
        self.guard.token = sent.token;
        self.guard.id = Some(sent.id);
        self.response = Some(sent.rx);
        Ok(())
    }

    /// One look at the task: its status as progress, its input requests
    /// answered, its end as the stream's last items.
    async fn poll_task(&mut self) {
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
            TaskPayload::Completed { result } => self.end_task(result_from_json(result), true),
            TaskPayload::Failed { error } => {
                let err = serde_json::from_value::<ErrorData>(serde_json::Value::Object(error))
                    .map(protocol_error)
                    .unwrap_or_else(|e| ToolError::failed(format!("the task failed: {e}")));
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
    fn end_task(&mut self, items: Vec<ToolItem>, ended: bool) {
        if ended {
            self.guard.task = None;
        }
        self.task = None;
        self.pending.extend(items);
    }
}
