//! [`McpClientBuilder`]: how an [`McpClient`] connects — who answers the
//! server's requests for input, which lifecycle, which transport — and the
//! handshake, timed as an operation of its own.

use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};

use super::child::ChildOut;
use super::connection::{McpClient, Telemetry};
use super::handler::{Answer, Answers, Handler};
use super::progress::ProgressRouter;
use super::tap::ProgressTap;
use crate::mcp::telemetry::{Meters, Operation, OperationEnd, Request, Side, Target, Transport};
use crate::{ErrorKind, ToolError};

/// How many input-required rounds one call may take before the client
/// gives up (rmcp's own helper stops at the same number).
pub const DEFAULT_MAX_INPUT_ROUNDS: usize = 10;

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
}
