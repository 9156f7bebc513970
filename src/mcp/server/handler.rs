//! The rmcp `ServerHandler`: the tools served, tasks, and the rest handed
//! to the inner handler.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomNotification, CustomRequest, CustomResult, DiscoverResult,
    GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use std::future::Future;

use tracing::Instrument as _;

use crate::mcp::telemetry::{OperationEnd, Target};

use super::McpServer;

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

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        self.serve("ping", Target::None, context, |_| async move { Ok(()) })
            .await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // rmcp's own `initialize`, inside the operation's span.
        self.serve("initialize", Target::None, context, |context| async move {
            context.peer.set_peer_info(request.clone());
            self.negotiate_initialize(&request)
        })
        .await
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        // rmcp's own `server/discover`, inside the operation's span.
        self.serve("server/discover", Target::None, context, |_| async move {
            Ok(DiscoverResult::from_server_info(
                self.supported_protocol_versions().into_owned(),
                self.get_info(),
            ))
        })
        .await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.serve("tools/list", Target::None, context, |context| async move {
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
        })
        .await
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut operation = self.operation("tools/call", Target::tool(&params.name), &context);
        let answer = self.serve_call(params, &context, &operation).await;
        operation.end(match &answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                OperationEnd::ToolError
            }
            Ok(_) => OperationEnd::Ok,
            // No answer goes out (see `drive`).
            Err(err) => error_outcome(err, context.ct.is_cancelled()),
        });
        answer
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.serve("tasks/get", Target::None, context, |_| async move {
            self.extension_task(&request.task_id)?;
            Ok(GetTaskResult::new(
                self.tasks.manager.get_task(&request.task_id)?,
            ))
        })
        .await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.serve("tasks/update", Target::None, context, |_| async move {
            self.extension_task(&request.task_id)?;
            self.tasks
                .manager
                .update_task(&request.task_id, request.input_responses)
        })
        .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.serve("tasks/cancel", Target::None, context, |_| async move {
            self.extension_task(&request.task_id)?;
            self.tasks.manager.cancel_task(&request.task_id)
        })
        .await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.serve("logging/setLevel", Target::None, context, |_| async move {
            crate::mcp::log::set_level(&self.log_level, request.level);
            Ok(())
        })
        .await
    }

    // Everything that is not about tools: the user's handler, each request
    // in its operation's span.

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.serve("completion/complete", Target::None, context, |context| {
            self.handler.complete(request, context)
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let target = Target::prompt(&request.name);
        self.serve("prompts/get", target, context, |context| {
            self.handler.get_prompt(request, context)
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.serve("prompts/list", Target::None, context, |context| {
            self.handler.list_prompts(request, context)
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.serve("resources/list", Target::None, context, |context| {
            self.handler.list_resources(request, context)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.serve(
            "resources/templates/list",
            Target::None,
            context,
            |context| self.handler.list_resource_templates(request, context),
        )
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let target = Target::resource(&request.uri);
        self.serve("resources/read", target, context, |context| {
            self.handler.read_resource(request, context)
        })
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        self.handler.accepted_subscription_filter(requested)
    }

    // A subscription lives as long as the client listens: no operation.
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.handler.listen(context).await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let target = Target::resource(&request.uri);
        self.serve("resources/subscribe", target, context, |context| {
            self.handler.subscribe(request, context)
        })
        .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let target = Target::resource(&request.uri);
        self.serve("resources/unsubscribe", target, context, |context| {
            self.handler.unsubscribe(request, context)
        })
        .await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // The task scheme of 2025-11-25, which rmcp reads as custom
        // requests (see `legacy`).
        let (request, context) = match self.serve_legacy(request, context).await {
            Ok(answer) => return answer,
            Err(not_ours) => not_ours,
        };
        // The method is the client's, any name: no operation (its span's
        // name and its metric's attributes would take any value).
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

impl<H: ServerHandler + Clone> McpServer<H> {
    /// Refuses, as unknown, a task of the 2025-11-25 scheme: only its own
    /// session sees it, in that scheme.
    fn extension_task(&self, id: &str) -> Result<(), ErrorData> {
        if self.tasks.is_legacy(id) {
            return Err(ErrorData::invalid_params(
                format!("task {id} not found"),
                None,
            ));
        }
        Ok(())
    }

    /// Serves the request `context` for `method` (on `target`) with
    /// `answer`, inside its operation's span, which ends with it: a result,
    /// an error response, or, when the client gave up, cancelled.
    pub(super) async fn serve<T, F>(
        &self,
        method: &'static str,
        target: Target,
        context: RequestContext<RoleServer>,
        answer: impl FnOnce(RequestContext<RoleServer>) -> F,
    ) -> Result<T, ErrorData>
    where
        F: Future<Output = Result<T, ErrorData>>,
    {
        let mut operation = self.operation(method, target, &context);
        let ct = context.ct.clone();
        let answer = answer(context).instrument(operation.span()).await;
        operation.end(match &answer {
            Ok(_) => OperationEnd::Ok,
            Err(err) => error_outcome(err, ct.is_cancelled()),
        });
        answer
    }
}

/// How a request that failed with `err` ended: no answer goes out for a
/// request the client cancelled.
pub(super) fn error_outcome(err: &ErrorData, cancelled: bool) -> OperationEnd<'_> {
    if cancelled {
        OperationEnd::Failed {
            kind: "cancelled",
            message: "the request was cancelled by the client",
        }
    } else {
        OperationEnd::Rpc {
            code: err.code.0,
            message: &err.message,
        }
    }
}
