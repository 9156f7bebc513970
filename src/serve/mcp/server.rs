//! [`McpServer`]: a toolbox served over MCP with rmcp.

use std::future::Future;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use futures_util::future::{self, Either};
use futures_util::StreamExt;
use http::Extensions;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};

use super::convert;
use super::log::{ClientLog, LEVEL_UNSET};
use crate::tool::DEFAULT_MAX_ARGUMENT_BYTES;
use crate::{ToolError, ToolOutput, ToolRequest, ToolResult, Toolbox};

/// Serves a [`Toolbox`] over MCP: `tools/list` from the tools'
/// [`ToolInfo`](crate::ToolInfo)s (filtered by the toolbox's resolver),
/// `tools/call` streamed into a `CallToolResult`, progress items as
/// `notifications/progress`, cancellation as dropping the stream. See the
/// [module docs](super).
///
/// A clone serves another session: same tools, its own logging level.
///
/// **Bounds.** rmcp reads a whole JSON-RPC message before the server sees
/// it, under its own limits: 4 MiB for a streamable HTTP body
/// (`StreamableHttpServerConfig::max_request_body_bytes`), 16 MiB for a
/// stdio line. A call's `arguments` longer than
/// [`max_argument_bytes`](Self::max_argument_bytes) (1 MiB by default, as
/// for typed tools and HTTP bodies) as compact JSON are refused with an
/// `invalid_arguments` error result, measured without building the text.
///
/// **Errors.** A protocol error the server sends (an unknown tool,
/// `-32602`) carries the error's kind in its `data`, as
/// `{"kind": "not_found"}`, which [`McpClient`](super::McpClient) reads
/// back. A request the client cancels (`notifications/cancelled`) gets no
/// answer at all, as the MCP specification asks (2025-11-25, cancellation:
/// the receiver SHOULD NOT send a response); the tool's stream is dropped.
pub struct McpServer {
    toolbox: Toolbox,
    // The MCP definitions, converted once.
    tools: Arc<[Tool]>,
    info: Arc<ServerConfig>,
    // The session's `logging/setLevel`; fresh for each HTTP session.
    log_level: Arc<AtomicU8>,
    max_argument_bytes: usize,
}

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
        }
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

    /// The served toolbox.
    pub fn toolbox(&self) -> &Toolbox {
        &self.toolbox
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

    /// The streamable HTTP transport as a tower service (one MCP session per
    /// client, kept in memory), to mount in an axum app with
    /// `Router::new().nest_service("/mcp", server.into_http_service(config))`.
    ///
    /// The HTTP request's extensions (what an auth layer put there) reach
    /// the toolbox's resolver and the tools.
    pub fn into_http_service(
        self,
        config: StreamableHttpServerConfig,
    ) -> StreamableHttpService<McpServer, LocalSessionManager> {
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

    fn run_call(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<impl Future<Output = ToolResult> + Send + 'static, ErrorData> {
        let extensions = Self::caller_extensions(&context);
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
                return Ok(Either::Left(future::ready(ToolResult::from_error(err))));
            }
        };
        request.set_arguments(arguments);
        let log = ClientLog::new(context.peer.clone(), self.log_level.clone());
        request.extensions_mut().insert(log);
        // For tools that ask the client back (sampling, elicitation, roots).
        request.extensions_mut().insert(context.peer.clone());
        let opened = tool.call_shared(request);
        let peer = context.peer;
        let progress_token = context.meta.get_progress_token();
        Ok(Either::Right(async move {
            let stream = match opened.await {
                Ok(stream) => stream,
                Err(err) => return ToolResult::from_error(err),
            };
            collect(stream, &peer, progress_token).await
        }))
    }
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

/// Collects a tool's stream, sending progress items to the client as they
/// come (when it asked for them with a progress token).
async fn collect(
    stream: crate::ToolStream,
    peer: &Peer<RoleServer>,
    progress_token: Option<ProgressToken>,
) -> ToolResult {
    let mut stream = std::pin::pin!(stream);
    let mut result = ToolResult::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ToolOutput::Progress(progress)) => {
                let Some(token) = &progress_token else {
                    continue;
                };
                let mut param = ProgressNotificationParam::new(token.clone(), progress.progress);
                if let Some(total) = progress.total {
                    param = param.with_total(total);
                }
                if let Some(message) = progress.message {
                    param = param.with_message(message);
                }
                if let Err(err) = peer.notify_progress(param).await {
                    tracing::debug!(%err, "progress notification not sent");
                }
            }
            Ok(output) => result.push(output),
            Err(err) => {
                result.push_error(err);
                break;
            }
        }
    }
    result
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
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
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let cancelled = context.ct.clone();
        let run = self.run_call(params, context)?;
        // `notifications/cancelled` (or the session closing) drops the
        // stream, which cancels the tool.
        let cancelled = std::pin::pin!(cancelled.cancelled());
        match future::select(std::pin::pin!(run), cancelled).await {
            Either::Left((result, _)) => Ok(convert::call_result(result).into()),
            // rmcp sends no answer to a request whose `notifications/cancelled`
            // it has seen, nor on a session that is closing (the token's only
            // other cause): this error only ends the handler, and goes
            // nowhere. The specification asks for no response (2025-11-25,
            // cancellation: the receiver SHOULD NOT send one).
            Either::Right(((), _)) => Err(protocol_error(
                ErrorCode::INTERNAL_ERROR,
                &ToolError::cancelled("the call was cancelled by the client"),
            )),
        }
    }

    super::log::set_level_method!();
}

impl Clone for McpServer {
    fn clone(&self) -> Self {
        McpServer {
            toolbox: self.toolbox.clone(),
            tools: self.tools.clone(),
            info: self.info.clone(),
            log_level: Arc::new(AtomicU8::new(LEVEL_UNSET)),
            max_argument_bytes: self.max_argument_bytes,
        }
    }
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("toolbox", &self.toolbox)
            .field("server_info", &self.info.server_info)
            .finish()
    }
}
