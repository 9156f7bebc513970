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

use crate::mcp::telemetry::{Operation, Outcome, Target};

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
        let operation = self.operation("ping", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async { Ok(()) }).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // rmcp's own `initialize`, inside the operation's span.
        let operation = self.operation("initialize", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("server/discover", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("tools/list", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
                Outcome::ToolError
            }
            Ok(_) => Outcome::Ok,
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
        let operation = self.operation("tasks/get", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("tasks/update", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("tasks/cancel", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("logging/setLevel", Target::None, &context);
        traced(operation, || context.ct.is_cancelled(), async {
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
        let operation = self.operation("completion/complete", Target::None, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.complete(request, context),
        )
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let target = Target::prompt(&request.name);
        let operation = self.operation("prompts/get", target, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.get_prompt(request, context),
        )
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let operation = self.operation("prompts/list", Target::None, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.list_prompts(request, context),
        )
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let operation = self.operation("resources/list", Target::None, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.list_resources(request, context),
        )
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let operation = self.operation("resources/templates/list", Target::None, &context);
        let ct = context.ct.clone();
        let answer = self.handler.list_resource_templates(request, context);
        traced(operation, move || ct.is_cancelled(), answer).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let target = Target::resource(&request.uri);
        let operation = self.operation("resources/read", target, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.read_resource(request, context),
        )
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
        let operation = self.operation("resources/subscribe", target, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.subscribe(request, context),
        )
        .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let target = Target::resource(&request.uri);
        let operation = self.operation("resources/unsubscribe", target, &context);
        let ct = context.ct.clone();
        traced(
            operation,
            move || ct.is_cancelled(),
            self.handler.unsubscribe(request, context),
        )
        .await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
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

/// Answers with `answer` inside `operation`'s span, which ends with it: a
/// result, an error response, or, when the client gave up, cancelled.
async fn traced<T>(
    mut operation: Operation,
    cancelled: impl Fn() -> bool,
    answer: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    let answer = answer.instrument(operation.span()).await;
    operation.end(match &answer {
        Ok(_) => Outcome::Ok,
        Err(err) => error_outcome(err, cancelled()),
    });
    answer
}

/// How a request that failed with `err` ended: no answer goes out for a
/// request the client cancelled.
fn error_outcome(err: &ErrorData, cancelled: bool) -> Outcome<'_> {
    if cancelled {
        Outcome::Failed {
            kind: "cancelled",
            message: "the request was cancelled by the client",
        }
    } else {
        Outcome::Rpc {
            code: err.code.0,
            message: &err.message,
        }
    }
}
