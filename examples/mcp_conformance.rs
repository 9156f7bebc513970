//! The MCP conformance suite's tool fixtures, written as toolstack tools and
//! served over streamable HTTP — what `.ci/run` points
//! `@modelcontextprotocol/conformance` at.
//!
//! ```text
//! cargo run --features mcp --example mcp_conformance        # 127.0.0.1:3001/mcp
//! PORT=4000 cargo run --features mcp --example mcp_conformance
//! cd conformance && npx conformance server --url http://127.0.0.1:3001/mcp --scenario tools-call-simple-text
//! ```

use std::time::Duration;

use futures_util::stream;
use serde_json::json;
use toolstack::serve::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::serve::mcp::rmcp::{Peer, RoleServer};
use toolstack::serve::mcp::{ClientLog, McpServer};
use toolstack::{tool, Progress, Resource, ToolContext, ToolError, ToolInfo, ToolOutput, Toolbox};

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV file with a header and no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

/// Most fixtures take no arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Prompt {
    /// The prompt to send to the client's model.
    prompt: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Ask {
    /// The message to show the user.
    message: String,
}

/// The MCP session that called the tool, to ask the client back.
fn client_peer(ctx: &ToolContext) -> Result<Peer<RoleServer>, ToolError> {
    ctx.extensions()
        .get::<Peer<RoleServer>>()
        .cloned()
        .ok_or_else(|| ToolError::failed("this tool needs to be called over MCP"))
}

fn toolbox() -> Toolbox {
    Toolbox::new()
        .tool(
            tool::from_fn("test_simple_text", |_: NoArgs| async {
                Ok::<_, ToolError>("This is a simple text response for testing.")
            })
            .description("Returns simple text content"),
        )
        .tool(
            tool::from_fn("test_image_content", |_: NoArgs| async {
                Ok::<_, ToolError>(ToolOutput::image(PNG, "image/png"))
            })
            .description("Returns image content"),
        )
        .tool(
            tool::from_fn("test_audio_content", |_: NoArgs| async {
                Ok::<_, ToolError>(ToolOutput::audio(WAV, "audio/wav"))
            })
            .description("Returns audio content"),
        )
        .tool(
            tool::from_fn("test_embedded_resource", |_: NoArgs| async {
                Ok::<_, ToolError>(ToolOutput::resource(
                    Resource::text(
                        "test://embedded-resource",
                        "This is an embedded resource content.",
                    )
                    .mime_type("text/plain"),
                ))
            })
            .description("Returns an embedded resource"),
        )
        .tool(
            tool::from_stream("test_multiple_content_types", |_: NoArgs| {
                stream::iter([
                    Ok::<_, ToolError>(ToolOutput::text("Multiple content types test:")),
                    Ok(ToolOutput::image(PNG, "image/png")),
                    Ok(ToolOutput::resource(
                        Resource::text(
                            "test://mixed-content-resource",
                            json!({"test": "data", "value": 123}).to_string(),
                        )
                        .mime_type("application/json"),
                    )),
                ])
            })
            .description("Returns text, an image and a resource"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_tool_with_logging",
                |_: NoArgs, ctx: ToolContext| async move {
                    let log = ctx.extensions().get::<ClientLog>();
                    for (i, message) in [
                        "Tool execution started",
                        "Tool processing data",
                        "Tool execution completed",
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        if i > 0 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        if let Some(log) = log {
                            log.info(message).await;
                        }
                    }
                    Ok::<_, ToolError>("Logging test completed")
                },
            )
            .description("Sends three log messages while it runs"),
        )
        .tool(
            tool::from_fn("test_error_handling", |_: NoArgs| async {
                Err::<String, _>(ToolError::failed(
                    "This tool intentionally returns an error for testing",
                ))
            })
            .description("Always fails"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_tool_with_progress",
                |_: NoArgs, ctx: ToolContext| async move {
                    for (i, done) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        ctx.report(Progress::new(done).total(100.0));
                    }
                    // Let the last report go out before the result.
                    tokio::task::yield_now().await;
                    Ok::<_, ToolError>("Progress test completed")
                },
            )
            .description("Reports progress 0, 50 and 100 out of 100"),
        )
        .boxed(sampling_tool())
        .tool(
            tool::from_fn_with_context(
                "test_elicitation",
                |args: Ask, ctx: ToolContext| async move {
                    let peer = client_peer(&ctx)?;
                    let params = serde_json::from_value(json!({
                        "mode": "form",
                        "message": args.message,
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "username": { "type": "string", "description": "User's response" },
                                "email": { "type": "string", "description": "User's email address" }
                            },
                            "required": ["username", "email"]
                        }
                    }))
                    .map_err(|e| ToolError::failed(format!("bad elicitation request: {e}")))?;
                    let answer = peer
                        .create_elicitation(params)
                        .await
                        .map_err(|e| ToolError::failed(format!("elicitation failed: {e}")))?;
                    Ok::<_, ToolError>(format!(
                        "User response: action={:?}, content={}",
                        answer.action,
                        answer.content.unwrap_or_default()
                    ))
                },
            )
            .description("Asks the client's user (elicitation/create)"),
        )
        .tool(tool::raw(
            ToolInfo::new("json_schema_2020_12_tool")
                .with_description("Tool with JSON Schema 2020-12 features")
                .with_input_schema(json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "type": "object",
                            "properties": {
                                "street": { "type": "string" },
                                "city": { "type": "string" }
                            }
                        }
                    },
                    "properties": {
                        "name": { "type": "string" },
                        "address": { "$ref": "#/$defs/address" }
                    },
                    "additionalProperties": false
                })),
            |request| stream::iter([Ok(ToolOutput::text(request.arguments().to_owned()))]),
        ))
}

/// `test_sampling`: asks the client's model. rmcp marks sampling
/// deprecated (SEP-2577 replaces it in a future revision); clients of the
/// current ones still offer it.
#[allow(deprecated)]
fn sampling_tool() -> toolstack::BoxTool {
    use toolstack::serve::mcp::rmcp::model;
    toolstack::BoxTool::new(
        tool::from_fn_with_context(
            "test_sampling",
            |args: Prompt, ctx: ToolContext| async move {
                let peer = client_peer(&ctx)?;
                let reply = peer
                    .create_message(model::CreateMessageRequestParams::new(
                        vec![model::SamplingMessage::user_text(args.prompt)],
                        100,
                    ))
                    .await
                    .map_err(|e| ToolError::failed(format!("sampling failed: {e}")))?;
                let text = reply
                    .message
                    .content
                    .into_vec()
                    .into_iter()
                    .filter_map(|block| block.as_text().map(|t| t.text.clone()))
                    .collect::<Vec<_>>()
                    .join("");
                Ok::<_, ToolError>(format!("LLM response: {text}"))
            },
        )
        .description("Asks the client's model (sampling/createMessage)"),
    )
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = std::env::var("PORT").unwrap_or_else(|_| "3001".into());
    let addr = format!("127.0.0.1:{port}");
    let server = McpServer::new(toolbox()).with_server_info("toolstack-conformance", "0.1.0");
    let mcp = server.into_http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", mcp);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("MCP conformance server on http://{addr}/mcp");
    axum::serve(listener, app).await
}
