//! The rmcp `ServerHandler`: the tools served, tasks, and the rest handed
//! to the inner handler.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomNotification, CustomRequest, CustomResult, GetPromptRequestParams,
    GetPromptResponse, GetTaskParams, GetTaskResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use std::sync::Arc;

use crate::mcp::telemetry::Outcome;

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

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut operation = self.operation("tools/list", None, &context);
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
        operation.end(Outcome::Ok);
        Ok(list)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = Arc::from(&*params.name);
        let mut operation = self.operation("tools/call", Some(tool), &context);
        let answer = self.serve_call(params, &context, &operation).await;
        operation.end(match &answer {
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                Outcome::ToolError
            }
            Ok(_) => Outcome::Ok,
            // No answer goes out (see `drive`).
            Err(_) if context.ct.is_cancelled() => Outcome::Failed {
                kind: "cancelled",
                message: "the call was cancelled by the client",
            },
            Err(err) => Outcome::Rpc {
                code: err.code.0,
                message: &err.message,
            },
        });
        answer
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

    crate::mcp::log::set_level_method!();

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
