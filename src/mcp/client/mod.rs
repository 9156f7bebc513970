//! [`McpClient`] and [`McpTool`]: a remote MCP server's tools as local
//! tool services.

#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

use std::fmt;
use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ErrorCode, Implementation, InputRequests, InputResponses,
    ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};

use crate::mcp::convert;
use crate::mcp::telemetry::{Meters, Operation, OperationEnd, Request, Side, Target, Transport};
use crate::{ErrorKind, ToolError, Toolbox};

mod handler;
mod progress;
mod tap;
mod tool;

use handler::{answer_one, Answer, Answers, Handler};
use progress::ProgressRouter;
use tap::ProgressTap;
pub use tool::McpTool;

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
    telemetry: Arc<Telemetry>,
    /// The handler declares URL elicitation: it can open a URL.
    opens_urls: bool,
}

/// A child's stdout, owning the child: the transport holds it, so the
/// process lives as long as the connection.
struct ChildOut {
    stdout: tokio::process::ChildStdout,
    child: Option<tokio::process::Child>,
}

/// How long a stdio server has to exit once its stdin closed.
const CHILD_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

impl Drop for ChildOut {
    /// The connection is gone (its stdin closes with it): the process is
    /// given [`CHILD_GRACE`] to exit on its own, then killed; at once
    /// when there is no runtime to wait on.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if tokio::time::timeout(CHILD_GRACE, child.wait())
                        .await
                        .is_err()
                    {
                        let _ = child.kill().await;
                    }
                });
            }
            Err(_) => {
                let _ = child.start_kill();
            }
        }
    }
}

impl tokio::io::AsyncRead for ChildOut {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

/// What the client's spans and metrics say of every operation: the
/// transport, the negotiated revision; and the histograms.
struct Telemetry {
    transport: Transport,
    protocol_version: Option<Arc<str>>,
    meters: Meters,
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
        self.connect_over(transport, Transport::default()).await
    }

    /// Connects over `transport`, which the spans and metrics name as
    /// `over`.
    async fn connect_over<T, E, A>(
        self,
        transport: T,
        over: Transport,
    ) -> Result<McpClient, ToolError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let progress = ProgressRouter::default();
        let opens_urls = self.answers.is_some()
            && self
                .info
                .capabilities
                .elicitation
                .as_ref()
                .is_some_and(|elicitation| elicitation.url.is_some());
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
        // The handshake is an operation of its own. Timed, not entered:
        // rmcp spawns the connection's task inside it, which would keep
        // the span open for the connection's life.
        let meters = Meters::new();
        let handshake = Request {
            method: if self.stateless {
                "server/discover"
            } else {
                "initialize"
            },
            target: Target::None,
            protocol_version: None,
            session_id: None,
            request_id: None,
            transport: over.clone(),
            parent: None,
        };
        let mut operation = Operation::start(Side::Client, handshake, &meters);
        let running = if self.stateless {
            let lifecycle = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            handler.serve_with_lifecycle(tap, lifecycle).await
        } else {
            handler.serve(tap).await
        };
        let running = running.map_err(|err| {
            let err = ToolError::new(
                ErrorKind::Unavailable,
                format!("could not connect to the MCP server: {err}"),
            )
            .with_source(err);
            operation.end(OperationEnd::failed(&err));
            err
        })?;
        operation.end(OperationEnd::Ok);
        let telemetry = Telemetry {
            transport: over,
            protocol_version: running
                .peer_info()
                .map(|info| Arc::from(info.protocol_version.as_str())),
            meters,
        };
        Ok(McpClient {
            running: Arc::new(running),
            progress,
            answers: self.answers,
            max_input_rounds: self.max_input_rounds,
            telemetry: Arc::new(telemetry),
            opens_urls,
        })
    }

    /// Starts `command` as a child process and talks MCP over its stdin
    /// and stdout. Its stderr is where the `Command` says (`.stderr(..)`:
    /// a file, `Stdio::null()`, a pipe; the host's stderr if unset). When
    /// the client's last clone is dropped, the process's stdin closes; a
    /// process still running 3 s later is killed.
    pub async fn connect_stdio(
        self,
        mut command: tokio::process::Command,
    ) -> Result<McpClient, ToolError> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let spawned = command.spawn().and_then(|mut child| {
            let missing = || std::io::Error::other("the child's stdio was not piped");
            let stdout = child.stdout.take().ok_or_else(missing)?;
            let stdin = child.stdin.take().ok_or_else(missing)?;
            Ok((
                ChildOut {
                    stdout,
                    child: Some(child),
                },
                stdin,
            ))
        });
        let io = spawned.map_err(|err| {
            ToolError::new(
                ErrorKind::Unavailable,
                format!("could not start the MCP server process: {err}"),
            )
            .with_source(err)
        })?;
        self.connect_over(io, Transport::stdio()).await
    }

    /// Connects to a streamable HTTP endpoint such as `http://host/mcp`.
    ///
    /// A [stateless](Self::stateless) client whose `server/discover` is
    /// refused — a server of revision 2025-11-25 or before answers it
    /// "Server not initialized" — connects again with `initialize`, as
    /// the 2026-07-28 revision's compatibility rules describe (logged at
    /// `info`); if that fails too, the error names both.
    pub async fn connect_http(self, url: &str) -> Result<McpClient, ToolError> {
        let transport = || rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
        if !self.stateless {
            return self.connect_over(transport(), Transport::http(url)).await;
        }
        let legacy = McpClientBuilder {
            stateless: false,
            ..self.clone()
        };
        let discovered = match self.connect_over(transport(), Transport::http(url)).await {
            Ok(client) => return Ok(client),
            Err(err) => err,
        };
        tracing::info!(
            url,
            error = %discovered,
            "the MCP server refused server/discover (a server before revision 2026-07-28); connecting with initialize"
        );
        legacy
            .connect_over(transport(), Transport::http(url))
            .await
            .map_err(|err| {
                ToolError::new(
                    err.kind(),
                    format!(
                        "{} (and server/discover before it: {})",
                        err.message(),
                        discovered.message()
                    ),
                )
                .with_source(err)
            })
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

    /// The span and clock of a request for `method` (on `target`); the
    /// request's own trace context stands in for a parent when no local
    /// span is current.
    fn operation(
        &self,
        method: &'static str,
        target: Target,
        came_with: Option<&crate::TraceContext>,
    ) -> Operation {
        let telemetry = &*self.telemetry;
        let request = Request {
            method,
            target,
            protocol_version: telemetry.protocol_version.clone(),
            // rmcp's HTTP transport keeps the session id to itself.
            session_id: None,
            request_id: None,
            transport: telemetry.transport.clone(),
            parent: came_with,
        };
        Operation::start(Side::Client, request, &telemetry.meters)
    }

    /// The server's tools, each a local tool service.
    pub async fn tools(&self) -> Result<Vec<McpTool>, ToolError> {
        let mut operation = self.operation("tools/list", Target::None, None);
        let tools = match self.running.list_all_tools().await {
            Ok(tools) => {
                operation.end(OperationEnd::Ok);
                tools
            }
            Err(ServiceError::McpError(data)) => {
                operation.end(OperationEnd::Rpc {
                    code: data.code.0,
                    message: &data.message,
                });
                return Err(protocol_error(data));
            }
            Err(err) => {
                let err = service_error(err);
                operation.end(OperationEnd::failed(&err));
                return Err(err);
            }
        };
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
