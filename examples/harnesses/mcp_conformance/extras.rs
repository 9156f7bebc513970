//! What is not about tools — resources, prompts, completion — as a plain
//! rmcp handler, which [`McpServer::with_handler`] serves next to the
//! toolbox: the door through which a toolstack server becomes fully
//! conformant.
//!
//! [`McpServer::with_handler`]: toolstack::mcp::McpServer::with_handler

use serde_json::{json, Value};
use toolstack::mcp::rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, ElicitRequest,
    ElicitRequestParams, GetPromptRequestParams, GetPromptResponse, GetPromptResult, ImageContent,
    InputRequest, InputRequests, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, Prompt,
    PromptArgument, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use toolstack::mcp::rmcp::service::RequestContext;
use toolstack::mcp::rmcp::{ErrorData, RoleServer, ServerHandler};

use super::PNG;

const TEXT: &str = "This is the content of the static text resource.";

/// Resources, prompts and completion of the conformance scenarios.
#[derive(Clone)]
pub struct Extras;

fn text_contents(uri: &str, mime: &str, text: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.into(),
        mime_type: Some(mime.into()),
        text,
        meta: None,
    }
}

fn user(text: impl Into<String>) -> PromptMessage {
    PromptMessage::new_text(Role::User, text)
}

impl ServerHandler for Extras {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_resources()
                .enable_completions()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("test://static-text", "Static text").with_mime_type("text/plain"),
            Resource::new("test://static-binary", "Static binary").with_mime_type("image/png"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("test://template/{id}/data", "Data by id")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.as_str();
        let contents = match uri {
            "test://static-text" => text_contents(uri, "text/plain", TEXT.into()),
            "test://static-binary" => ResourceContents::BlobResourceContents {
                uri: uri.into(),
                mime_type: Some("image/png".into()),
                blob: PNG.into(),
                meta: None,
            },
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
            {
                Some(id) => text_contents(
                    uri,
                    "application/json",
                    json!({ "id": id, "data": format!("the data of {id}") }).to_string(),
                ),
                // rmcp sends -32002 before 2026-07-28 and -32602 from it (SEP-2164).
                None => {
                    return Err(ErrorData::resource_not_found(
                        format!("no resource at {uri}"),
                        Some(json!({ "uri": uri })),
                    ))
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        _: SubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // The resources never change: nothing to send later.
        Ok(())
    }

    async fn unsubscribe(
        &self,
        _: UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let args = vec![
            PromptArgument::new("arg1")
                .with_description("The first argument")
                .with_required(true),
            PromptArgument::new("arg2")
                .with_description("The second argument")
                .with_required(true),
        ];
        let resource = vec![PromptArgument::new("resourceUri")
            .with_description("The resource to embed")
            .with_required(true)];
        Ok(ListPromptsResult::with_all_items(vec![
            Prompt::new(
                "test_simple_prompt",
                Some("A prompt without arguments"),
                None,
            ),
            Prompt::new(
                "test_prompt_with_arguments",
                Some("A prompt with two arguments"),
                Some(args),
            ),
            Prompt::new(
                "test_prompt_with_embedded_resource",
                Some("A prompt that embeds a resource"),
                Some(resource),
            ),
            Prompt::new(
                "test_prompt_with_image",
                Some("A prompt with an image"),
                None,
            ),
            Prompt::new(
                "test_input_required_result_prompt",
                Some("A prompt that asks the user for context first"),
                None,
            ),
        ]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arg = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![user("This is a simple prompt for testing.")],
            "test_prompt_with_arguments" => vec![user(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg("arg1"),
                arg("arg2")
            ))],
            "test_prompt_with_embedded_resource" => vec![
                user("Here is a resource:"),
                PromptMessage::new_resource(
                    Role::User,
                    arg("resourceUri"),
                    Some("text/plain".into()),
                    Some("Embedded resource content for testing.".into()),
                    None,
                    None,
                    None,
                ),
            ],
            "test_prompt_with_image" => vec![
                user("Here is an image:"),
                PromptMessage::new(
                    Role::User,
                    ContentBlock::Image(ImageContent::new(PNG, "image/png")),
                ),
            ],
            // 2026-07-28: a prompt that needs the user's input first answers
            // with an input-required result; the retry carries the answer.
            "test_input_required_result_prompt" => {
                let answer = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get("user_context"))
                    .and_then(|r| r.get("content"))
                    .and_then(|c| c.get("context"))
                    .and_then(Value::as_str);
                match answer {
                    Some(context) => vec![user(format!("Answer with this context: {context}"))],
                    None => {
                        let form: ElicitRequestParams = serde_json::from_value(json!({
                            "mode": "form",
                            "message": "What context should the prompt use?",
                            "requestedSchema": {
                                "type": "object",
                                "properties": { "context": { "type": "string" } },
                                "required": ["context"]
                            }
                        }))
                        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                        let mut requests = InputRequests::new();
                        requests.insert(
                            "user_context".into(),
                            InputRequest::Elicitation(ElicitRequest::new(form)),
                        );
                        return Ok(InputRequiredResult::from_input_requests(requests).into());
                    }
                }
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no prompt named {other}"),
                    None,
                ))
            }
        };
        Ok(GetPromptResult::new(messages).into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let prefix = request.argument.value.clone();
        let values = ["testValue1", "testValue2", "test"]
            .into_iter()
            .filter(|v| v.starts_with(&prefix))
            .map(String::from)
            .collect();
        let info = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(info))
    }
}
