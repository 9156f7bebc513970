//! [`McpServer`]: a toolbox served over MCP with rmcp.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{self, Either};
use http::Extensions;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
    CompleteRequestParams, CompleteResult, CreateTaskResult, CustomNotification, CustomRequest,
    CustomResult, ErrorCode, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
    GetTaskResult, Implementation, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use super::call::{progress_param, Call, Step, TaskSupport, Tasks, Waiting, Watcher};
use super::convert;
use super::input::{Backend, InputState};
use super::log::{ClientLog, LEVEL_UNSET};
use crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
use crate::{ErrorKind, McpAttributes, ToolError, ToolRequest, ToolResult, Toolbox, TraceContext};

/// Serves a [`Toolbox`] over MCP: `tools/list` from the tools'
/// [`ToolInfo`](crate::ToolInfo)s (filtered by the toolbox's resolver),
/// `tools/call` streamed into a `CallToolResult`, progress items as
/// `notifications/progress`, cancellation as dropping the stream. See the
/// [module docs](super).
///
/// A clone serves another session: same tools, its own logging level.
///
/// **Protocol revisions.** Every revision rmcp knows, 2024-11-05 to
/// 2026-07-28: sessions opened with `initialize`, and the stateless
/// requests of 2026-07-28 (over streamable HTTP, each request carries its
/// revision and the client's capabilities in `_meta`). A tool that asks the
/// client for input ([`ClientInput`](super::ClientInput)) does so with
/// requests on the session, or with 2026-07-28's input-required results;
/// a tool can run as an MCP task ([`task_support`](Self::task_support)).
///
/// **Not only tools.** Resources, prompts and completion are not
/// toolstack's; [`with_handler`](Self::with_handler) serves them from any
/// rmcp [`ServerHandler`], whose capabilities join the server's.
///
/// **Bounds.** rmcp reads a whole JSON-RPC message before the server sees
/// it, under its own limits: 4 MiB for a streamable HTTP body
/// (`StreamableHttpServerConfig::max_request_body_bytes`), 16 MiB for a
/// stdio line. A call's `arguments` longer than
/// [`max_argument_bytes`](Self::max_argument_bytes) (1 MiB by default, as
/// for typed tools and HTTP bodies) as compact JSON are refused with an
/// `invalid_arguments` error result, measured without building the text.
/// At most 1,024 calls wait for a client's input at once, each for at most
/// 10 minutes ([`input_timeout`](Self::input_timeout)), and at most 1,024
/// tasks run at once ([`max_tasks`](Self::max_tasks)); past those, a call
/// ends with an `overloaded` error result.
///
/// **Errors.** A protocol error the server sends (an unknown tool,
/// `-32602`) carries the error's kind in its `data`, as
/// `{"kind": "not_found"}`, which [`McpClient`](super::McpClient) reads
/// back. A request the client cancels (`notifications/cancelled`) gets no
/// answer at all, as the MCP specification asks (2025-11-25, cancellation:
/// the receiver SHOULD NOT send a response); the tool's stream is dropped.
pub struct McpServer<H = ToolsOnly> {
    toolbox: Toolbox,
    // The MCP definitions, converted once.
    tools: Arc<[Tool]>,
    info: Arc<ServerConfig>,
    // The session's `logging/setLevel`; fresh for each HTTP session.
    log_level: Arc<AtomicU8>,
    max_argument_bytes: usize,
    list_cache: Option<(u64, CacheScope)>,
    task_support: Arc<HashMap<String, TaskSupport>>,
    // Shared by every session (and every stateless request).
    waiting: Arc<Waiting>,
    tasks: Arc<Tasks>,
    handler: H,
}

/// The [`ServerHandler`] of a server that serves only tools: every other
/// method is rmcp's default (`-32601`, method not found).
#[derive(Clone, Copy, Debug, Default)]
pub struct ToolsOnly;

impl ServerHandler for ToolsOnly {}

impl McpServer {
    /// A server for `toolbox`, announcing itself as `toolstack`.
    pub fn new(toolbox: Toolbox) -> Self {
        let tools = toolbox.infos().map(convert::tool_to_mcp).collect();
        let info = ServerConfig::new(super::log::capabilities())
            .with_server_info(Implementation::new("toolstack", env!("CARGO_PKG_VERSION")));
        McpServer {
            toolbox,
            tools,
            info: Arc::new(info),
            log_level: Arc::new(AtomicU8::new(LEVEL_UNSET)),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            list_cache: None,
            task_support: Arc::default(),
            waiting: Arc::new(Waiting::new()),
            tasks: Arc::new(Tasks::new()),
            handler: ToolsOnly,
        }
    }
}

impl<H: ServerHandler + Clone> McpServer<H> {
    /// Serves every method that is not about tools — resources, prompts,
    /// completion, subscriptions, custom requests — with `handler`, an
    /// rmcp [`ServerHandler`]; its capabilities (from its `get_info`) join
    /// the server's own. Tools (`tools/*`), tasks (`tasks/*`) and logging
    /// stay the server's.
    ///
    /// ```
    /// use toolstack::mcp::rmcp::model::{ListPromptsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig};
    /// use toolstack::mcp::rmcp::{service::RequestContext, ErrorData, RoleServer, ServerHandler};
    /// use toolstack::mcp::McpServer;
    ///
    /// #[derive(Clone)]
    /// struct Prompts;
    ///
    /// impl ServerHandler for Prompts {
    ///     fn get_info(&self) -> ServerConfig {
    ///         ServerConfig::new(ServerCapabilities::builder().enable_prompts().build())
    ///     }
    ///     async fn list_prompts(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>)
    ///         -> Result<ListPromptsResult, ErrorData> {
    ///         Ok(ListPromptsResult::default())
    ///     }
    /// }
    ///
    /// let server = McpServer::new(toolstack::Toolbox::new()).with_handler(Prompts);
    /// # let _ = server;
    /// ```
    pub fn with_handler<H2: ServerHandler + Clone>(self, handler: H2) -> McpServer<H2> {
        McpServer {
            toolbox: self.toolbox,
            tools: self.tools,
            info: self.info,
            log_level: self.log_level,
            max_argument_bytes: self.max_argument_bytes,
            list_cache: self.list_cache,
            task_support: self.task_support,
            waiting: self.waiting,
            tasks: self.tasks,
            handler,
        }
    }

    /// The handler of the methods that are not about tools.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Refuses a call whose `arguments`, as compact JSON, are longer than
    /// `bytes`, with an `invalid_arguments` error result and without
    /// calling the tool (default [`DEFAULT_MAX_ARGUMENT_BYTES`]).
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// Sets the name and version announced in `initialize`.
    pub fn with_server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.info).server_info = Implementation::new(name, version);
        self
    }

    /// Sets the instructions announced in `initialize`.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.info).instructions = Some(instructions.into());
        self
    }

    /// Lets clients cache `tools/list` for `ttl`, for themselves only
    /// ([`CacheScope::Private`]: the list depends on the caller when the
    /// toolbox has a resolver) or for anyone ([`CacheScope::Public`]).
    /// Without it the list carries `ttlMs: 0`, `cacheScope: "private"`
    /// (revision 2026-07-28's caching hints).
    pub fn tools_list_cache(mut self, ttl: Duration, scope: CacheScope) -> Self {
        self.list_cache = Some((ttl.as_millis() as u64, scope));
        self
    }

    /// Lets the calls of tool `name` run as MCP tasks (the tasks
    /// extension), for clients that support it: the call answers with a
    /// task at once, the client polls `tasks/get` for its status (the
    /// tool's progress messages) and its result, `tasks/cancel` drops the
    /// tool's stream, and the tool's [`ClientInput`](super::ClientInput)
    /// requests go through the task. Declaring one task tool declares the
    /// extension.
    pub fn task_support(mut self, name: impl Into<String>, support: TaskSupport) -> Self {
        Arc::make_mut(&mut self.task_support).insert(name.into(), support);
        let any = self
            .task_support
            .values()
            .any(|s| *s != TaskSupport::Forbidden);
        let caps = &mut Arc::make_mut(&mut self.info).capabilities;
        let declared = caps.supports_tasks();
        if any && !declared {
            caps.extensions = with_tasks(caps.extensions.take());
        }
        self
    }

    /// How long a call that asked for input (an input-required result)
    /// waits for the client to retry it before it is dropped (default 10
    /// minutes).
    pub fn input_timeout(mut self, timeout: Duration) -> Self {
        self.shared_waiting().ttl = timeout;
        self
    }

    /// How many calls may wait for their client's input at once (default
    /// 1,024).
    pub fn max_waiting_calls(mut self, max: usize) -> Self {
        self.shared_waiting().max = max;
        self
    }

    /// How many tasks may run at once (default 1,024), and how long a
    /// task's state is kept (default 5 minutes from its start, and as long
    /// again once it has ended).
    pub fn max_tasks(mut self, max: usize, ttl: Duration) -> Self {
        let tasks = self.shared_tasks();
        tasks.max_running = max;
        tasks.ttl = ttl;
        self
    }

    /// How often a client should poll a task (`pollIntervalMs`, default
    /// 500 ms).
    pub fn task_poll_interval(mut self, interval: Duration) -> Self {
        self.shared_tasks().poll_interval = interval;
        self
    }

    fn shared_waiting(&mut self) -> &mut Waiting {
        if Arc::get_mut(&mut self.waiting).is_none() {
            self.waiting = Arc::new(Waiting::new());
        }
        Arc::get_mut(&mut self.waiting).expect("just made unique")
    }

    fn shared_tasks(&mut self) -> &mut Tasks {
        if Arc::get_mut(&mut self.tasks).is_none() {
            self.tasks = Arc::new(Tasks::new());
        }
        Arc::get_mut(&mut self.tasks).expect("just made unique")
    }

    /// The served toolbox.
    pub fn toolbox(&self) -> &Toolbox {
        &self.toolbox
    }

    /// Calls waiting for their client's input (2026-07-28 rounds).
    pub fn waiting_calls(&self) -> usize {
        self.waiting.len()
    }

    /// A copy for a new session: same tools, its own logging level.
    fn session(&self) -> Self {
        self.clone()
    }

    /// Serves one client over stdin/stdout until it disconnects.
    pub async fn serve_stdio(self) -> Result<(), rmcp::RmcpError> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(rmcp::RmcpError::from)?;
        running.waiting().await.map_err(rmcp::RmcpError::from)?;
        Ok(())
    }

    /// The streamable HTTP transport as a tower service, to mount in an
    /// axum app with
    /// `Router::new().nest_service("/mcp", server.into_http_service(config))`.
    ///
    /// A client that opens with `initialize` gets a session, kept in
    /// memory; a 2026-07-28 request (its revision and capabilities in its
    /// `_meta`) is served statelessly, on a fresh copy of the server that
    /// shares its tools, waiting calls and tasks. The HTTP request's
    /// extensions (what an auth layer put there) reach the toolbox's
    /// resolver and the tools.
    pub fn into_http_service(
        self,
        config: StreamableHttpServerConfig,
    ) -> StreamableHttpService<McpServer<H>, LocalSessionManager> {
        StreamableHttpService::new(
            move || Ok(self.session()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// The caller's extensions: those of the HTTP request that carried the
    /// message (streamable HTTP), or none (stdio).
    fn caller_extensions(context: &RequestContext<RoleServer>) -> Extensions {
        context
            .extensions
            .get::<http::request::Parts>()
            .map(|parts| parts.extensions.clone())
            .unwrap_or_default()
    }

    fn task_support_of(&self, tool: &str) -> TaskSupport {
        self.task_support.get(tool).copied().unwrap_or_default()
    }

    /// Opens a call: the tool's future, with the client's log and input
    /// in its extensions; or the result at once (arguments too large).
    fn open_call(
        &self,
        params: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        rounds: bool,
    ) -> Result<Result<Call, ToolResult>, ErrorData> {
        let extensions = Self::caller_extensions(context);
        // The name alone decides whether the tool exists: the argument text
        // is built only for a tool that does.
        let mut request =
            ToolRequest::new(params.name.into_owned(), "").with_id(context.id.to_string());
        *request.extensions_mut() = extensions;
        let Some(tool) = self.toolbox.get_for(request.name(), request.extensions()) else {
            // An unknown tool is a protocol error (MCP spec, tools/call).
            let err = self.toolbox.unknown_tool(&request);
            return Err(protocol_error(ErrorCode::INVALID_PARAMS, &err));
        };
        let arguments = match params.arguments {
            None => Ok("{}".to_owned()),
            Some(map) => bounded_json(&map, self.max_argument_bytes),
        };
        let arguments = match arguments {
            Ok(arguments) => arguments,
            Err(len) => {
                let err = crate::arguments::too_large(len, request.name(), self.max_argument_bytes);
                return Ok(Err(ToolResult::from_error(err)));
            }
        };
        request.set_arguments(arguments);
        let (log, input) = if rounds {
            (
                ClientLog::request(context.peer.clone(), context.meta.log_level()),
                InputState::new(Backend::Rounds, context.client_capabilities()),
            )
        } else {
            (
                ClientLog::session(context.peer.clone(), self.log_level.clone()),
                InputState::new(
                    Backend::Peer(context.peer.clone()),
                    context
                        .peer
                        .peer_info()
                        .map(|info| info.capabilities.clone()),
                ),
            )
        };
        request.extensions_mut().insert(log);
        request.extensions_mut().insert(input.handle());
        // The caller's trace, continued by the call's span (trace layer),
        // and the MCP attributes that span records.
        if let Some(parent) = context.meta.get_traceparent() {
            if let Some(trace) = TraceContext::parse(parent, context.meta.get_tracestate()) {
                request.extensions_mut().insert(trace);
            }
        }
        request.extensions_mut().insert(McpAttributes {
            method: Cow::Borrowed("tools/call"),
            protocol_version: context.protocol_version().map(|v| {
                // A known revision is a constant: no copy per call.
                match ProtocolVersion::KNOWN_VERSIONS.iter().find(|k| **k == v) {
                    Some(known) => Cow::Borrowed(known.as_str()),
                    None => Cow::Owned(v.as_str().to_owned()),
                }
            }),
        });
        // For tools that talk to the session's client directly.
        request.extensions_mut().insert(context.peer.clone());
        let tool_name = request.name().to_owned();
        Ok(Ok(Call::new(tool_name, tool.call_shared(request), input)))
    }

    /// The answer for a call that ended with `result`.
    fn complete(
        call_input: &InputState,
        result: ToolResult,
    ) -> Result<CallToolResponse, ErrorData> {
        if result.is_error {
            if let Some(required) = call_input.missing_capability() {
                // The tool needed what the client did not declare.
                return Err(ErrorData::missing_required_client_capability(required));
            }
        }
        Ok(convert::call_result(result).into())
    }

    /// Keeps `call` for the client's next round and asks for its input.
    fn park(&self, call: Call) -> CallToolResponse {
        let requests = call.input.take_requests();
        match self.waiting.park(call) {
            Some(state) => InputRequiredResult::new(Some(requests), Some(state)).into(),
            None => convert::call_result(ToolResult::from_error(ToolError::new(
                ErrorKind::Overloaded,
                "too many calls are waiting for their client's input; try again later",
            )))
            .into(),
        }
    }

    fn too_many_tasks() -> CallToolResponse {
        convert::call_result(ToolResult::from_error(ToolError::new(
            ErrorKind::Overloaded,
            "too many tasks are running; try again later",
        )))
        .into()
    }

    /// Drives `call` to its answer for this request: its result, an
    /// input-required result, or a task.
    async fn drive(
        &self,
        mut call: Call,
        context: &RequestContext<RoleServer>,
        as_task: Option<TaskSupport>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = &context.peer;
        let progress_token = context.meta.get_progress_token();
        let progress = |progress: crate::Progress| {
            let token = progress_token.clone();
            async move {
                let Some(token) = token else { return };
                if let Err(err) = peer.notify_progress(progress_param(token, progress)).await {
                    tracing::debug!(%err, "progress notification not sent");
                }
            }
        };
        if let Some(support) = as_task {
            // One look at the call: finished, asking for input, or at work
            // (a task from here on).
            loop {
                match call.look().await {
                    Some(Step::Progress(p)) => progress(p).await,
                    Some(Step::Done(result)) => {
                        if support == TaskSupport::Optional {
                            return Self::complete(&call.input, result);
                        }
                        return Ok(match self.tasks.finished(result) {
                            Some(task) => CreateTaskResult::new(task).into(),
                            None => Self::too_many_tasks(),
                        });
                    }
                    Some(Step::NeedsInput) => return Ok(self.park(call)),
                    None => {
                        // A session hears of the task as it runs; a
                        // stateless request's stream ends with its answer.
                        let watcher = (!is_stateless_revision(context)).then(|| Watcher {
                            peer: peer.clone(),
                            progress_token: progress_token.clone(),
                            manager: self.tasks.manager.clone(),
                        });
                        return Ok(match self.tasks.spawn(call, watcher) {
                            Some(task) => CreateTaskResult::new(task).into(),
                            None => Self::too_many_tasks(),
                        });
                    }
                }
            }
        }
        let cancelled = context.ct.clone();
        let mut cancelled = std::pin::pin!(cancelled.cancelled());
        loop {
            let step = match future::select(std::pin::pin!(call.step()), cancelled.as_mut()).await {
                Either::Left((step, _)) => step,
                // rmcp sends no answer to a request whose
                // `notifications/cancelled` it has seen, nor on a session
                // that is closing (the token's only other cause): this error
                // only ends the handler, and goes nowhere. The specification
                // asks for no response (2025-11-25, cancellation: the
                // receiver SHOULD NOT send one). Dropping the call drops the
                // stream, which cancels the tool.
                Either::Right(((), _)) => {
                    return Err(protocol_error(
                        ErrorCode::INTERNAL_ERROR,
                        &ToolError::cancelled("the call was cancelled by the client"),
                    ))
                }
            };
            match step {
                Step::Progress(p) => progress(p).await,
                Step::Done(result) => return Self::complete(&call.input, result),
                Step::NeedsInput => return Ok(self.park(call)),
            }
        }
    }
}

/// Whether the request is of revision 2026-07-28 or later: no requests
/// from the server, input through input-required results.
fn is_stateless_revision(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

fn with_tasks(
    extensions: Option<rmcp::model::ExtensionCapabilities>,
) -> Option<rmcp::model::ExtensionCapabilities> {
    let mut extensions = extensions.unwrap_or_default();
    extensions.insert(
        rmcp::model::TASKS_EXTENSION_ID.to_string(),
        Default::default(),
    );
    Some(extensions)
}

/// A protocol error for `err`, its kind in `data` (`{"kind": "not_found"}`,
/// with a timeout's phase or a rate limit's `retry_after_ms`) so that a
/// client need not read the English message.
fn protocol_error(code: ErrorCode, err: &ToolError) -> ErrorData {
    let mut data = err.to_model_json();
    if let Some(map) = data.as_object_mut() {
        map.remove("error");
    }
    ErrorData::new(code, err.message().to_owned(), Some(data))
}

/// `map` as compact JSON text, or, when that is longer than `limit` bytes,
/// its length, found without keeping more than `limit` bytes of it.
fn bounded_json(map: &rmcp::model::JsonObject, limit: usize) -> Result<String, usize> {
    struct Bounded {
        bytes: Vec<u8>,
        len: usize,
        limit: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            if self.len <= self.limit {
                self.bytes.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded {
        bytes: Vec::new(),
        len: 0,
        limit,
    };
    // A map of JSON values always serializes, and the writer never fails.
    let _ = serde_json::to_writer(&mut out, map);
    if out.len > limit {
        return Err(out.len);
    }
    // serde_json writes UTF-8.
    Ok(String::from_utf8(out.bytes).unwrap_or_default())
}

impl<H: ServerHandler + Clone> ServerHandler for McpServer<H> {
    fn get_info(&self) -> ServerConfig {
        let mut info = (*self.info).clone();
        let theirs = self.handler.get_info();
        let caps = &mut info.capabilities;
        caps.prompts = theirs.capabilities.prompts;
        caps.resources = theirs.capabilities.resources;
        caps.completions = theirs.capabilities.completions;
        if caps.experimental.is_none() {
            caps.experimental = theirs.capabilities.experimental;
        }
        if let Some(extensions) = theirs.capabilities.extensions {
            caps.extensions
                .get_or_insert_with(Default::default)
                .extend(extensions);
        }
        if info.instructions.is_none() {
            info.instructions = theirs.instructions;
        }
        info
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // What rmcp checks the `Mcp-Param-*` headers of a call against.
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let extensions = Self::caller_extensions(&context);
        let tools = self
            .toolbox
            .infos()
            .zip(self.tools.iter())
            .filter(|(info, _)| self.toolbox.get_for(info.name(), &extensions).is_some())
            .map(|(_, tool)| tool.clone())
            .collect();
        let mut list = ListToolsResult::with_all_items(tools);
        if let Some((ttl_ms, scope)) = self.list_cache {
            list = list.with_ttl_ms(ttl_ms).with_cache_scope(scope);
        }
        Ok(list)
    }

    async fn call_tool(
        &self,
        mut params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let rounds = is_stateless_revision(&context);
        let client_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let call = match params.request_state.take() {
            // A retry with the client's input: the call kept for it.
            Some(state) if rounds => {
                let call = self.waiting.resume(&state, &params.name).ok_or_else(|| {
                    ErrorData::invalid_params(
                        "the requestState is unknown, altered, expired or already used; \
                         call the tool again without it",
                        None,
                    )
                })?;
                call.input
                    .answer(params.input_responses.take().unwrap_or_default());
                call
            }
            _ => {
                let support = self.task_support_of(&params.name);
                if support == TaskSupport::Required && !client_tasks {
                    let required = ClientCapabilities::builder().enable_tasks().build();
                    return Err(ErrorData::missing_required_client_capability(required));
                }
                let early = params.input_responses.take();
                match self.open_call(params, &context, rounds)? {
                    Ok(call) => {
                        if let Some(answers) = early.filter(|_| rounds) {
                            call.input.answer(answers);
                        }
                        call
                    }
                    Err(result) => return Ok(convert::call_result(result).into()),
                }
            }
        };
        let as_task = match self.task_support_of(call.tool()) {
            TaskSupport::Forbidden => None,
            support => client_tasks.then_some(support),
        };
        self.drive(call, &context, as_task).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(
            self.tasks.manager.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .manager
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.manager.cancel_task(&request.task_id)
    }

    super::log::set_level_method!();

    // Everything that is not about tools: the user's handler.

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.handler.complete(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.handler.get_prompt(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.handler.list_prompts(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.handler.list_resources(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.handler.list_resource_templates(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.handler.read_resource(request, context).await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        self.handler.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.handler.listen(context).await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handler.subscribe(request, context).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handler.unsubscribe(request, context).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.handler.on_custom_request(request, context).await
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.handler.on_roots_list_changed(context).await
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        self.handler
            .on_custom_notification(notification, context)
            .await
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.handler.supported_protocol_versions()
    }
}

impl<H: Clone> Clone for McpServer<H> {
    fn clone(&self) -> Self {
        McpServer {
            toolbox: self.toolbox.clone(),
            tools: self.tools.clone(),
            info: self.info.clone(),
            log_level: Arc::new(AtomicU8::new(LEVEL_UNSET)),
            max_argument_bytes: self.max_argument_bytes,
            list_cache: self.list_cache,
            task_support: self.task_support.clone(),
            waiting: self.waiting.clone(),
            tasks: self.tasks.clone(),
            handler: self.handler.clone(),
        }
    }
}

impl<H> std::fmt::Debug for McpServer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("toolbox", &self.toolbox)
            .field("server_info", &self.info.server_info)
            .finish()
    }
}
