//! The server's transports: streamable HTTP ([`McpHttpService`]) and any
//! byte stream ([`McpServer::serve_io`]), each with the 2025-11-25 task
//! scheme's edges (see `tasks_2025_11_25`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::Stream;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use rmcp::transport::streamable_http_server::{
    RestoreOutcome, SessionId, SessionManager, StreamableHttpService,
};
use rmcp::ServerHandler;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

use super::tasks_2025_11_25::{lift, Tap, LIFT_GROWTH};
use super::McpServer;
use crate::mcp::call::{TaskSupport, Tasks};

/// The response of [`McpHttpService`]: rmcp's.
pub type McpHttpResponse = http::Response<BoxBody<Bytes, Infallible>>;

/// rmcp's in-memory sessions, each session's transport behind the
/// 2025-11-25 task scheme's [`Tap`].
pub(super) struct TaskSessions {
    inner: LocalSessionManager,
    support: Arc<HashMap<String, TaskSupport>>,
    tasks: Arc<Tasks>,
}

impl SessionManager for TaskSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = Tap<<LocalSessionManager as SessionManager>::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        Ok((
            id,
            Tap::new(transport, self.support.clone(), self.tasks.clone()),
        ))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.inner.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    fn close_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(Tap::new(
                transport,
                self.support.clone(),
                self.tasks.clone(),
            )),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// An [`McpServer`] over streamable HTTP, a tower service to mount in an
/// axum app (made by [`McpServer::into_http_service`]): rmcp's
/// `StreamableHttpService`, whose sessions also speak the task scheme of
/// revision 2025-11-25.
pub struct McpHttpService<H> {
    inner: StreamableHttpService<McpServer<H>, TaskSessions>,
    /// rmcp's bound on a request body.
    max_body: usize,
    /// Whether any tool runs as a task: only then is a body read here.
    tasks: bool,
}

impl<H> McpHttpService<H> {
    pub(super) fn new(
        inner: StreamableHttpService<McpServer<H>, TaskSessions>,
        max_body: usize,
        tasks: bool,
    ) -> Self {
        McpHttpService {
            inner,
            max_body,
            tasks,
        }
    }
}

impl<H> Clone for McpHttpService<H> {
    fn clone(&self) -> Self {
        McpHttpService {
            inner: self.inner.clone(),
            max_body: self.max_body,
            tasks: self.tasks,
        }
    }
}

impl<H> std::fmt::Debug for McpHttpService<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

impl<H, B> tower_service::Service<http::Request<B>> for McpHttpService<H>
where
    H: ServerHandler + Clone + Send + Sync + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Display,
{
    type Response = McpHttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<McpHttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // A 2026-07-28 request's `task` is ignored, as the tasks
        // extension says: nothing to look for.
        let modern = request
            .headers()
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(super::revision::is_stateless);
        if !self.tasks || modern || request.method() != http::Method::POST {
            return self.inner.call(request);
        }
        // A POST carries one message: read here (under rmcp's bound), so
        // that a `tools/call` asking for a 2025-11-25 task can be renamed
        // before rmcp reads it and drops its `task`.
        let mut inner = self.inner.clone();
        let max = self.max_body;
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let bytes = match Limited::new(body, max).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(err) => {
                    let (status, message) = if err
                        .downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        (
                            http::StatusCode::PAYLOAD_TOO_LARGE,
                            format!("the request body is larger than {max} bytes"),
                        )
                    } else {
                        (
                            http::StatusCode::BAD_REQUEST,
                            format!("the request body could not be read: {err}"),
                        )
                    };
                    let mut response = http::Response::new(Full::new(Bytes::from(message)).boxed());
                    *response.status_mut() = status;
                    return Ok(response);
                }
            };
            let bytes = match lift(&bytes) {
                Some(lifted) => {
                    parts.headers.remove(http::header::CONTENT_LENGTH);
                    Bytes::from(lifted)
                }
                None => bytes,
            };
            inner
                .call(http::Request::from_parts(parts, Full::new(bytes)))
                .await
        })
    }
}

impl<H: ServerHandler + Clone> McpServer<H> {
    /// The 2025-11-25 task scheme's session manager.
    pub(super) fn task_sessions(&self) -> TaskSessions {
        TaskSessions {
            inner: LocalSessionManager::default(),
            support: self.task_support.clone(),
            tasks: self.tasks.clone(),
        }
    }

    /// Whether any tool may run as a task.
    pub(super) fn has_task_tools(&self) -> bool {
        self.task_support
            .values()
            .any(|s| *s != TaskSupport::Forbidden)
    }

    /// Serves one client over a byte stream — newline-delimited JSON-RPC,
    /// as on stdio — until it disconnects: `read` is what the client
    /// sends, `write` what it reads (a socket's halves, a pipe, or, as
    /// [`serve_stdio`](Self::serve_stdio) does, stdin and stdout).
    pub async fn serve_io<R, W>(self, read: R, write: W) -> Result<(), rmcp::RmcpError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        use rmcp::ServiceExt;
        let support = self.task_support.clone();
        let tasks = self.tasks.clone();
        let lines = Lines {
            read: BufReader::new(read),
            line: Vec::new(),
        };
        let read = tokio_util::io::StreamReader::new(Box::pin(futures_util::stream::unfold(
            lines,
            |mut lines| async move {
                let line = lines.next().await?;
                Some((line, lines))
            },
        )));
        // A renamed message may be longer than the bound by the new name.
        let transport =
            rmcp::transport::async_rw::AsyncRwTransport::<rmcp::RoleServer, _, _>::new(read, write)
                .with_max_line_length(MAX_LINE + LIFT_GROWTH);
        let running = self
            .serve(Tap::new(transport, support, tasks))
            .await
            .map_err(rmcp::RmcpError::from)?;
        running.waiting().await.map_err(rmcp::RmcpError::from)?;
        Ok(())
    }
}

/// rmcp's bound on a line (a message) of a byte stream.
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The lines of a byte stream, each [`lift`]ed; a line longer than
/// [`MAX_LINE`] is dropped (as rmcp drops it), and logged.
struct Lines<R> {
    read: BufReader<R>,
    line: Vec<u8>,
}

impl<R: AsyncRead + Unpin + Send> Lines<R> {
    /// The next line, with its newline; `None` at the end.
    async fn next(&mut self) -> Option<std::io::Result<Bytes>> {
        loop {
            self.line.clear();
            let mut too_long = false;
            loop {
                let buf = match self.read.fill_buf().await {
                    Ok(buf) => buf,
                    Err(err) => return Some(Err(err)),
                };
                if buf.is_empty() {
                    // The end: a last line without its newline still counts.
                    if self.line.is_empty() || too_long {
                        return None;
                    }
                    self.line.push(b'\n');
                    break;
                }
                let (take, done) = match memchr::memchr(b'\n', buf) {
                    Some(at) => (at + 1, true),
                    None => (buf.len(), false),
                };
                if !too_long && self.line.len() + take <= MAX_LINE + 1 {
                    self.line.extend_from_slice(&buf[..take]);
                } else {
                    too_long = true;
                    self.line.clear();
                }
                Pin::new(&mut self.read).consume(take);
                if done {
                    break;
                }
            }
            if too_long {
                tracing::warn!("an MCP message longer than {MAX_LINE} bytes was dropped");
                continue;
            }
            let text = &self.line[..self.line.len() - 1];
            return Some(Ok(match lift(text) {
                Some(mut lifted) => {
                    lifted.push(b'\n');
                    Bytes::from(lifted)
                }
                None => Bytes::copy_from_slice(&self.line),
            }));
        }
    }
}
