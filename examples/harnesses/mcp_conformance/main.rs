//! The MCP conformance suite's server fixtures — tools written as toolstack
//! tools, resources, prompts and completion in an rmcp handler that the
//! server delegates to — served over streamable HTTP: what `.ci/conformance`
//! points `@modelcontextprotocol/conformance` at, for revisions 2025-11-25
//! (sessions) and 2026-07-28 (stateless, input-required results, tasks).
//!
//! ```text
//! cargo run --features mcp --example mcp_conformance        # 127.0.0.1:3001/mcp
//! PORT=4000 cargo run --features mcp --example mcp_conformance
//! cd conformance && npx conformance server --url http://127.0.0.1:3001/mcp --requirements 2026-07-28
//! ```

#![allow(deprecated)] // sampling and roots: rmcp marks them deprecated (SEP-2577)

mod extras;

use std::time::Duration;

use futures_util::stream;
use serde_json::{json, Value};
use toolstack::mcp::rmcp::model::{
    CreateMessageRequestParams, ElicitRequestParams, ElicitResult, SamplingMessage,
};
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::rmcp::{Peer, RoleServer};
use toolstack::mcp::{ClientInput, ClientLog, McpServer, TaskSupport};
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
            .with_description("Returns simple text content"),
        )
        .tool(
            tool::from_fn("test_image_content", |_: NoArgs| async {
                Ok::<_, ToolError>(ToolOutput::image(PNG, "image/png"))
            })
            .with_description("Returns image content"),
        )
        .tool(
            tool::from_fn("test_audio_content", |_: NoArgs| async {
                Ok::<_, ToolError>(ToolOutput::audio(WAV, "audio/wav"))
            })
            .with_description("Returns audio content"),
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
            .with_description("Returns an embedded resource"),
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
            .with_description("Returns text, an image and a resource"),
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
            .with_description("Sends three log messages while it runs"),
        )
        .tool(
            tool::from_fn("test_error_handling", |_: NoArgs| async {
                Err::<String, _>(ToolError::failed(
                    "This tool intentionally returns an error for testing",
                ))
            })
            .with_description("Always fails"),
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
            .with_description("Reports progress 0, 50 and 100 out of 100"),
        )
        .boxed(sampling_tool())
        .tool(
            tool::from_fn_with_context(
                "test_elicitation",
                |args: Ask, ctx: ToolContext| async move {
                    // A request on the session, or, for a 2026-07-28
                    // client, an input-required round.
                    let input = input(&ctx)?;
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
                    let answer = input.elicit(params).await?;
                    Ok::<_, ToolError>(format!(
                        "User response: action={:?}, content={}",
                        answer.action,
                        answer.content.unwrap_or_default()
                    ))
                },
            )
            .with_description("Asks the client's user (elicitation/create)"),
        )
        .tool(tool::raw(
            ToolInfo::new("json_schema_2020_12_tool")
                .with_description("Tool with JSON Schema 2020-12 features")
                .with_input_schema(json!({
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "$defs": {
                        "address": {
                            "$anchor": "addressDef",
                            "type": "object",
                            "properties": {
                                "street": { "type": "string" },
                                "city": { "type": "string" }
                            }
                        }
                    },
                    "properties": {
                        "name": { "type": "string" },
                        "address": { "$ref": "#/$defs/address" },
                        "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                        "phone": { "type": "string" },
                        "email": { "type": "string" }
                    },
                    "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
                    "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
                    "then": { "required": ["phone"] },
                    "else": { "required": ["email"] },
                    "additionalProperties": false
                })),
            echo,
        ))
        // A parameter the client copies into an `Mcp-Param-Value` header,
        // which rmcp checks against the body.
        .tool(tool::raw(
            ToolInfo::new("test_custom_header")
                .with_description("Echoes a value that also travels in a header")
                .with_input_schema(json!({
                    "type": "object",
                    "properties": { "value": { "type": "string", "x-mcp-header": "Value" } },
                    "required": ["value"]
                })),
            echo,
        ))
        .tool(
            tool::from_fn_with_context(
                "test_elicitation_sep1034_defaults",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .elicit(form_with(
                            "Please review your details",
                            json!({
                                "type": "object",
                                "properties": {
                                    "name": { "type": "string", "default": "John Doe" },
                                    "age": { "type": "integer", "default": 30 },
                                    "score": { "type": "number", "default": 95.5 },
                                    "status": { "type": "string", "enum": ["active", "inactive", "pending"], "default": "active" },
                                    "verified": { "type": "boolean", "default": true }
                                }
                            }),
                        )?)
                        .await?;
                    Ok::<_, ToolError>(completed(&answer))
                },
            )
            .with_description("Elicits a form whose fields have defaults (SEP-1034)"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_elicitation_sep1330_enums",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .elicit(form_with(
                            "Pick some options",
                            json!({
                                "type": "object",
                                "properties": {
                                    "untitledSingle": { "type": "string", "enum": ["option1", "option2", "option3"] },
                                    "titledSingle": { "type": "string", "oneOf": [
                                        { "const": "value1", "title": "First Option" },
                                        { "const": "value2", "title": "Second Option" },
                                        { "const": "value3", "title": "Third Option" }
                                    ] },
                                    "legacyEnum": { "type": "string", "enum": ["opt1", "opt2", "opt3"],
                                        "enumNames": ["Option One", "Option Two", "Option Three"] },
                                    "untitledMulti": { "type": "array", "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                                    "titledMulti": { "type": "array", "items": { "anyOf": [
                                        { "const": "value1", "title": "First Choice" },
                                        { "const": "value2", "title": "Second Choice" },
                                        { "const": "value3", "title": "Third Choice" }
                                    ] } }
                                }
                            }),
                        )?)
                        .await?;
                    Ok::<_, ToolError>(completed(&answer))
                },
            )
            .with_description("Elicits every kind of enum field (SEP-1330)"),
        )
        .tool(
            tool::from_fn("test_reconnection", |_: NoArgs| async {
                // Long enough for the client to drop and resume the stream.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, ToolError>("Reconnection test completed")
            })
            .with_description("Answers after 100 ms, across an SSE reconnection (SEP-1699)"),
        )
        .merge(input_required_tools())
        .merge(task_tools())
}

/// The call's [`ClientInput`], there whenever the tool runs over MCP.
fn input(ctx: &ToolContext) -> Result<ClientInput, ToolError> {
    ctx.extensions()
        .get::<ClientInput>()
        .cloned()
        .ok_or_else(|| ToolError::failed("this tool needs to be called over MCP"))
}

/// Echoes the arguments.
fn echo(request: toolstack::ToolRequest) -> impl futures_util::Stream<Item = toolstack::ToolItem> {
    stream::iter([Ok(ToolOutput::text(request.arguments().to_owned()))])
}

/// A form elicitation with `schema`.
fn form_with(message: &str, schema: Value) -> Result<ElicitRequestParams, ToolError> {
    serde_json::from_value(json!({ "mode": "form", "message": message, "requestedSchema": schema }))
        .map_err(|e| ToolError::failed(format!("bad elicitation form: {e}")))
}

/// A form asking for one string (or boolean) field.
fn form(message: &str, field: &str, kind: &str) -> Result<ElicitRequestParams, ToolError> {
    form_with(
        message,
        json!({ "type": "object", "properties": { field: { "type": kind } }, "required": [field] }),
    )
}

fn completed(answer: &ElicitResult) -> String {
    format!(
        "Elicitation completed: action={}, content={}",
        serde_json::to_value(&answer.action).unwrap_or_default(),
        answer.content.clone().unwrap_or_default()
    )
}

/// A field of an accepted form.
fn field(answer: &ElicitResult, name: &str) -> String {
    let value = answer.content.as_ref().and_then(|c| c.get(name));
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(none)".into(),
    }
}

/// One question for the client's model.
#[allow(deprecated)]
fn question(text: &str) -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(vec![SamplingMessage::user_text(text)], 100)
}

#[allow(deprecated)]
fn reply_text(reply: &toolstack::mcp::rmcp::model::CreateMessageResult) -> String {
    reply
        .message
        .content
        .clone()
        .into_vec()
        .into_iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// Tools that ask the client for input: on 2026-07-28, through
/// input-required results and retries (SEP-2322).
fn input_required_tools() -> Toolbox {
    Toolbox::new()
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_elicitation",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .with_key("user_name")
                        .elicit(form("What is your name?", "name", "string")?)
                        .await?;
                    Ok::<_, ToolError>(format!("Hello, {}!", field(&answer, "name")))
                },
            )
            .with_description("Asks the user's name (input-required round)"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_sampling",
                |_: NoArgs, ctx: ToolContext| async move {
                    let reply = input(&ctx)?
                        .with_key("capital_question")
                        .create_message(question("What is the capital of France?"))
                        .await?;
                    Ok::<_, ToolError>(format!("The model said: {}", reply_text(&reply)))
                },
            )
            .with_description("Asks the client's model a question (input-required round)"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_list_roots",
                |_: NoArgs, ctx: ToolContext| async move {
                    let roots = input(&ctx)?.with_key("client_roots").list_roots().await?;
                    let uris: Vec<_> = roots.roots.iter().map(|r| r.uri.clone()).collect();
                    Ok::<_, ToolError>(format!("Roots: {}", uris.join(", ")))
                },
            )
            .with_description("Asks for the client's roots (input-required round)"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_request_state",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .with_key("confirm")
                        .elicit(form("Confirm to continue", "ok", "boolean")?)
                        .await?;
                    Ok::<_, ToolError>(format!("state-ok: ok={}", field(&answer, "ok")))
                },
            )
            .with_description("Asks for a confirmation, resumed by its requestState"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_multiple_inputs",
                |_: NoArgs, ctx: ToolContext| async move {
                    let input = input(&ctx)?;
                    let (named, greeter, rooted) = (
                        input.with_key("user_name"),
                        input.with_key("greeting"),
                        input.with_key("client_roots"),
                    );
                    // Three requests at once: one round asks for all of them.
                    let (name, greeting, roots) = futures_util::try_join!(
                        async {
                            named
                                .elicit(form("What is your name?", "name", "string")?)
                                .await
                        },
                        greeter.create_message(question("Write a greeting")),
                        rooted.list_roots(),
                    )?;
                    Ok::<_, ToolError>(format!(
                        "{} — {} ({} roots)",
                        field(&name, "name"),
                        reply_text(&greeting),
                        roots.roots.len()
                    ))
                },
            )
            .with_description("Asks for three inputs in one round"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_multi_round",
                |_: NoArgs, ctx: ToolContext| async move {
                    let input = input(&ctx)?;
                    let name = input
                        .with_key("step1")
                        .elicit(form("Step 1: What is your name?", "name", "string")?)
                        .await?;
                    // A second request after the first answer: a second round.
                    let color = input
                        .with_key("step2")
                        .elicit(form(
                            "Step 2: What is your favourite color?",
                            "color",
                            "string",
                        )?)
                        .await?;
                    Ok::<_, ToolError>(format!(
                        "{} likes {}",
                        field(&name, "name"),
                        field(&color, "color")
                    ))
                },
            )
            .with_description("Asks twice, in two rounds"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_tampered_state",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .elicit(form("What is your name?", "name", "string")?)
                        .await?;
                    Ok::<_, ToolError>(format!("Hello, {}!", field(&answer, "name")))
                },
            )
            .with_description("Asks once; an altered requestState is refused"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_input_required_result_capabilities",
                |_: NoArgs, ctx: ToolContext| async move {
                    // Asks only what the client said it can answer.
                    let input = input(&ctx)?;
                    if input.supports_elicitation() {
                        let answer = input.elicit(form("Your name?", "name", "string")?).await?;
                        Ok::<_, ToolError>(format!("elicited {}", field(&answer, "name")))
                    } else {
                        let reply = input.create_message(question("Your name?")).await?;
                        Ok(format!("sampled {}", reply_text(&reply)))
                    }
                },
            )
            .with_description("Asks only for what the client declared"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_missing_capability",
                |_: NoArgs, ctx: ToolContext| async move {
                    // Without sampling the call fails with -32021, naming it.
                    let reply = input(&ctx)?.create_message(question("Say hi")).await?;
                    Ok::<_, ToolError>(reply_text(&reply))
                },
            )
            .with_description("Needs sampling: -32021 from a client without it"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_streaming_elicitation",
                |_: NoArgs, ctx: ToolContext| async move {
                    let answer = input(&ctx)?
                        .elicit(form("What is your name?", "name", "string")?)
                        .await?;
                    Ok::<_, ToolError>(format!("Hello, {}!", field(&answer, "name")))
                },
            )
            .with_description("Asks the user's name"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_logging_tool",
                |_: NoArgs, ctx: ToolContext| async move {
                    // Sent only when the request's `_meta` asks for a level.
                    if let Some(log) = ctx.extensions().get::<ClientLog>() {
                        log.info("logging tool ran").await;
                    }
                    Ok::<_, ToolError>("logged")
                },
            )
            .with_description("Logs only at the level the request asks for"),
        )
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Name {
    name: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Compute {
    /// How long to work.
    seconds: f64,
    /// What to call the result.
    label: Option<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct File {
    filename: String,
}

/// Tools of the tasks extension scenarios (SEP-2663).
fn task_tools() -> Toolbox {
    Toolbox::new()
        .tool(
            tool::from_fn("greet", |Name { name }| async move {
                Ok::<_, ToolError>(format!("Hello, {name}!"))
            })
            .with_description("Greets by name, at once"),
        )
        .tool(
            tool::from_fn("slow_compute", |Compute { seconds, label }| async move {
                if seconds > 0.0 {
                    tokio::time::sleep(Duration::from_secs_f64(seconds.min(60.0))).await;
                }
                let label = label.unwrap_or_else(|| "result".into());
                Ok::<_, ToolError>(format!("{label}: computed in {seconds}s"))
            })
            .with_description("Works for `seconds`, as a task when the client supports tasks"),
        )
        .tool(
            tool::from_fn("failing_job", |_: NoArgs| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err::<String, _>(ToolError::failed("the job failed, as it always does"))
            })
            .with_description("A task whose tool fails after a second"),
        )
        .tool(
            tool::from_fn("protocol_error_job", |_: NoArgs| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                // A panic is a failure of the server, not of the tool's work:
                // the task ends `failed`.
                if true {
                    panic!("protocol_error_job breaks the server on purpose");
                }
                Ok::<_, ToolError>("unreachable")
            })
            .with_description("A task whose tool panics"),
        )
        .tool(
            tool::from_fn_with_context(
                "confirm_delete",
                |File { filename }, ctx: ToolContext| async move {
                    // Some work first, so that the call becomes a task.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let sure = input(&ctx)?.confirm(format!("Delete {filename}?")).await?;
                    Ok::<_, ToolError>(if sure {
                        format!("Deleted {filename}")
                    } else {
                        format!("Kept {filename}")
                    })
                },
            )
            .with_description("A task that asks the user to confirm"),
        )
        .tool(
            tool::from_fn_with_context("multi_input", |_: NoArgs, ctx: ToolContext| async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let input = input(&ctx)?;
                let (first, second) = futures_util::try_join!(
                    async { input.elicit(form("First value?", "value", "string")?).await },
                    async {
                        input
                            .elicit(form("Second value?", "value", "string")?)
                            .await
                    },
                )?;
                Ok::<_, ToolError>(format!(
                    "{} and {}",
                    field(&first, "value"),
                    field(&second, "value")
                ))
            })
            .with_description("A task that asks two questions at once"),
        )
        .tool(
            tool::from_fn_with_context(
                "test_tool_with_task",
                |_: NoArgs, ctx: ToolContext| async move {
                    // Asks before any work: an input-required round, then a task.
                    let name = input(&ctx)?
                        .with_key("user_name")
                        .elicit(form("What is your name?", "name", "string")?)
                        .await?;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, ToolError>(format!("Hello, {}, from a task", field(&name, "name")))
                },
            )
            .with_description("Asks the user's name, then works as a task"),
        )
}

/// `test_sampling`: asks the client's model. rmcp marks sampling
/// deprecated (SEP-2577 replaces it in a future revision); clients of the
/// current ones still offer it.
#[allow(deprecated)]
fn sampling_tool() -> toolstack::BoxTool {
    use toolstack::mcp::rmcp::model;
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
        .with_description("Asks the client's model (sampling/createMessage)"),
    )
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = std::env::var("PORT").unwrap_or_else(|_| "3001".into());
    let addr = format!("127.0.0.1:{port}");
    let server = McpServer::new(toolbox())
        .with_server_info("toolstack-conformance", "0.1.0")
        .task_support("slow_compute", TaskSupport::Optional)
        .task_support("confirm_delete", TaskSupport::Optional)
        .task_support("multi_input", TaskSupport::Optional)
        .task_support("failing_job", TaskSupport::Required)
        .task_support("protocol_error_job", TaskSupport::Required)
        .task_support("test_tool_with_task", TaskSupport::Required)
        .with_handler(extras::Extras);
    let mcp = server.into_http_service(StreamableHttpServerConfig::default());
    let app = axum::Router::new().nest_service("/mcp", mcp);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("MCP conformance server on http://{addr}/mcp");
    axum::serve(listener, app).await
}
