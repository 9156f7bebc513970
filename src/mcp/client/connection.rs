//! [`McpClient`]: a connection to an MCP server, what its operations'
//! spans and metrics say of it, and how it answers the server's requests
//! for input.

use std::fmt;
use std::sync::Arc;

use rmcp::model::{InputRequests, InputResponses};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};

use super::handler::{answer_one, Answer, Handler};
use super::progress::ProgressRouter;
use crate::mcp::telemetry::{Meters, Operation, Request, Side, Target, Transport};
use crate::{ErrorKind, ToolError};

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
    pub(super) running: Arc<Running>,
    pub(super) progress: ProgressRouter,
    pub(super) answers: Option<Arc<dyn Answer>>,
    pub(super) max_input_rounds: usize,
    pub(super) telemetry: Arc<Telemetry>,
    /// The handler declares URL elicitation: it can open a URL.
    pub(super) opens_urls: bool,
}

/// What the client's spans and metrics say of every operation: the
/// transport, the negotiated revision; and the histograms.
pub(super) struct Telemetry {
    pub(super) transport: Transport,
    pub(super) protocol_version: Option<Arc<str>>,
    pub(super) meters: Meters,
}

/// How many requests for input one round may carry: a server that asks
/// for more gets an error, not that many prompts.
pub const MAX_INPUT_REQUESTS: usize = 64;

impl McpClient {
    /// Answers the server's requests for input, as their results' JSON.
    pub(super) async fn answer(
        &self,
        requests: InputRequests,
    ) -> Result<InputResponses, ToolError> {
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
    pub(super) fn operation(
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
