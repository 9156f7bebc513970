//! `tools/call` served: the call opened on the toolbox, driven to its
//! result, parked for the client's input, or run as a task.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::future::{self, Either};
use http::Extensions;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, CreateTaskResult, ErrorCode,
    InputRequiredResult, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::mcp::call::{progress_param, CallEvent, ServerCall, TaskSupport, Watcher};
use crate::mcp::convert;
use crate::mcp::input::{Backend, InputState};
use crate::mcp::log::ClientLog;
use crate::mcp::telemetry::{self, Operation, Request, Side, Target, Transport};
use crate::{ErrorKind, McpAttributes, ToolError, ToolRequest, ToolResult, TraceContext};

use super::{revision, McpServer};

impl<H: ServerHandler + Clone> McpServer<H> {
    /// The caller's extensions: those of the HTTP request that carried the
    /// message (streamable HTTP), or none (stdio).
    pub(super) fn caller_extensions(context: &RequestContext<RoleServer>) -> Extensions {
        context
            .extensions
            .get::<http::request::Parts>()
            .map(|parts| parts.extensions.clone())
            .unwrap_or_default()
    }

    pub(super) fn task_support_of(&self, tool: &str) -> TaskSupport {
        self.task_support.get(tool).copied().unwrap_or_default()
    }

    /// The span and clock of the request `context` for `method` (on
    /// `target`), the caller's trace context its parent.
    pub(super) fn operation(
        &self,
        method: &'static str,
        target: Target,
        context: &RequestContext<RoleServer>,
    ) -> Operation {
        let parts = context.extensions.get::<http::request::Parts>();
        // A session's requests carry its `Mcp-Session-Id` (which rmcp
        // checked); a stateless 2026-07-28 request, and stdio, none.
        let session_id = telemetry::session_id(parts);
        let caller = caller_trace(context);
        let request = Request {
            method,
            target,
            protocol_version: context.protocol_version().map(|v| Arc::from(v.as_str())),
            session_id,
            request_id: Some(&context.id),
            transport: Transport::of_request(parts),
            parent: caller.as_ref(),
        };
        Operation::start(Side::Server, request, &self.meters)
    }

    /// `tools/call`: a new call opened, or a waiting one resumed, driven to
    /// this request's answer.
    pub(super) async fn serve_call(
        &self,
        mut params: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        operation: &Operation,
    ) -> Result<CallToolResponse, ErrorData> {
        let rounds = is_stateless_revision(context);
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
                    if context
                        .protocol_version()
                        .is_some_and(|v| revision::speaks_legacy_tasks(v.as_str()))
                    {
                        // A 2025-11-25 client asks for a task in the call
                        // itself (the TypeScript SDK 1.x's words).
                        return Err(ErrorData::new(
                            ErrorCode::METHOD_NOT_FOUND,
                            format!(
                                "Tool {} requires task augmentation (taskSupport: 'required'): \
                                 call it with `task`",
                                params.name
                            ),
                            None,
                        ));
                    }
                    let required = ClientCapabilities::builder().enable_tasks().build();
                    return Err(ErrorData::missing_required_client_capability(required));
                }
                let early = params.input_responses.take();
                match self.open_call(params, context, rounds, operation)? {
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
        self.drive(call, context, as_task).await
    }

    /// Opens a call: the tool's future, with the client's log and input
    /// in its extensions; or the result at once (arguments too large).
    pub(super) fn open_call(
        &self,
        params: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        rounds: bool,
        operation: &Operation,
    ) -> Result<Result<ServerCall, ToolResult>, ErrorData> {
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
        // The trace the call's span (trace layer) continues: the server
        // span's when it is exported, else the caller's; and the MCP
        // attributes that span records.
        if let Some(trace) = operation.trace_context().or_else(|| caller_trace(context)) {
            request.extensions_mut().insert(trace);
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
        Ok(Ok(ServerCall::new(
            tool_name,
            tool.call_shared(request),
            input,
        )))
    }

    /// The answer for a call that ended with `result`.
    pub(super) fn complete(
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
    pub(super) fn park(&self, call: ServerCall) -> CallToolResponse {
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

    pub(super) fn too_many_tasks() -> CallToolResponse {
        convert::call_result(ToolResult::from_error(ToolError::new(
            ErrorKind::Overloaded,
            "too many tasks are running; try again later",
        )))
        .into()
    }

    /// Drives `call` to its answer for this request: its result, an
    /// input-required result, or a task.
    pub(super) async fn drive(
        &self,
        mut call: ServerCall,
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
                    Some(CallEvent::Progress(p)) => progress(p).await,
                    Some(CallEvent::Done(result)) => {
                        if support == TaskSupport::Optional {
                            return Self::complete(&call.input, result);
                        }
                        return Ok(match self.tasks.finished(result) {
                            Some(task) => CreateTaskResult::new(task).into(),
                            None => Self::too_many_tasks(),
                        });
                    }
                    Some(CallEvent::NeedsInput) => return Ok(self.park(call)),
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
                CallEvent::Progress(p) => progress(p).await,
                CallEvent::Done(result) => return Self::complete(&call.input, result),
                CallEvent::NeedsInput => return Ok(self.park(call)),
            }
        }
    }
}

/// The caller's trace context, from the request's `_meta`.
fn caller_trace(context: &RequestContext<RoleServer>) -> Option<TraceContext> {
    let parent = context.meta.get_traceparent()?;
    TraceContext::parse(parent, context.meta.get_tracestate())
}

/// Whether the request is of revision 2026-07-28 or later: no requests
/// from the server, input through input-required results.
pub(super) fn is_stateless_revision(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| revision::is_stateless(v.as_str()))
}

pub(super) fn with_tasks(
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
pub(super) fn protocol_error(code: ErrorCode, err: &ToolError) -> ErrorData {
    let mut data = err.to_model_json();
    if let Some(map) = data.as_object_mut() {
        map.remove("error");
    }
    ErrorData::new(code, err.message().to_owned(), Some(data))
}

/// `map` as compact JSON text, or, when that is longer than `limit` bytes,
/// its length, found without keeping more than `limit` bytes of it.
pub(super) fn bounded_json(map: &rmcp::model::JsonObject, limit: usize) -> Result<String, usize> {
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
