//! [`McpServer`]: a toolbox served over MCP with rmcp.

use std::collections::HashMap;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CacheScope, Implementation, ServerConfig, Tool};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServerHandler;

use crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
use crate::mcp::call::{ParkedCalls, TaskSupport, Tasks};
use crate::mcp::convert;
use crate::mcp::log::LEVEL_UNSET;
use crate::mcp::telemetry::Meters;
use crate::Toolbox;

mod dispatch;
mod handler;
mod http;
mod revision;
mod tasks_2025_11_25;

pub use http::{McpHttpResponse, McpHttpService};

use dispatch::with_tasks;

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
/// a tool can run as an MCP task ([`task_support`](Self::task_support)),
/// in the tasks extension or in the task scheme of 2025-11-25.
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
    waiting: Arc<ParkedCalls>,
    tasks: Arc<Tasks>,
    // The MCP operation-duration histograms, shared by every session.
    meters: Meters,
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
        let info = ServerConfig::new(crate::mcp::log::capabilities())
            .with_server_info(Implementation::new("toolstack", env!("CARGO_PKG_VERSION")));
        McpServer {
            toolbox,
            tools,
            info: Arc::new(info),
            log_level: Arc::new(AtomicU8::new(LEVEL_UNSET)),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            list_cache: None,
            task_support: Arc::default(),
            waiting: Arc::new(ParkedCalls::new()),
            tasks: Arc::new(Tasks::new()),
            meters: Meters::new(),
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
            meters: self.meters,
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
    ///
    /// A session of revision 2025-11-25 gets the same in that revision's
    /// task scheme: `capabilities.tasks`, the tool's
    /// `execution.taskSupport`, a `task` in `tools/call`, `tasks/result`
    /// (served by [`serve_stdio`](Self::serve_stdio),
    /// [`serve_io`](Self::serve_io) and
    /// [`into_http_service`](Self::into_http_service)).
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

    fn shared_waiting(&mut self) -> &mut ParkedCalls {
        if Arc::get_mut(&mut self.waiting).is_none() {
            self.waiting = Arc::new(ParkedCalls::new());
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
        self.serve_io(tokio::io::stdin(), tokio::io::stdout()).await
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
    pub fn into_http_service(self, config: StreamableHttpServerConfig) -> McpHttpService<H> {
        let max_body = config.max_request_body_bytes;
        let tasks = self.has_task_tools();
        let sessions = Arc::new(self.task_sessions());
        // The service bounds a body it reads first by `max_body`; rmcp then
        // reads it, perhaps longer by a 2025-11-25 task call's new name.
        let mut config = config;
        if tasks {
            config.max_request_body_bytes = max_body.saturating_add(tasks_2025_11_25::LIFT_GROWTH);
        }
        let inner = StreamableHttpService::new(move || Ok(self.session()), sessions, config);
        McpHttpService::new(inner, max_body, tasks)
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
            meters: self.meters.clone(),
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
