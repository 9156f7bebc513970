//! The MCP conformance suite's client scenarios, played by toolstack's
//! [`McpClient`]: `.ci/conformance` runs
//! `conformance client --command <this binary>`, which starts a scenario's
//! mock server and runs this with its URL, the scenario's name in
//! `MCP_CONFORMANCE_SCENARIO`, the revision in
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` and the calls to make in
//! `MCP_CONFORMANCE_CONTEXT`.
//!
//! ```text
//! cd conformance && npx conformance client --requirements 2026-07-28 \
//!     --command ../target/debug/examples/mcp_conformance_client
//! ```
//!
//! The remote tools are called as a model's tool calls are: through the
//! toolbox the client makes of them, collected to a `ToolResult`.

#![allow(deprecated)] // sampling and roots: rmcp marks them deprecated (SEP-2577)

use std::time::Duration;

use serde_json::{json, Map, Value};
use toolstack::mcp::rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ListRootsResult, Role,
    Root, SamplingMessage, SamplingMessageContentBlock,
};
use toolstack::mcp::rmcp::service::RequestContext;
use toolstack::mcp::rmcp::{ClientHandler, ErrorData, RoleClient};
use toolstack::mcp::McpClient;
use toolstack::{ToolError, ToolRequest, ToolResult};
use tower::ServiceExt;

/// The person and the model at the client: accepts every form with its
/// defaults (or a placeholder per field), answers every prompt.
struct Conformance;

/// A value for each property of a form: its default, else one of its type.
fn fill(schema: &Value) -> Map<String, Value> {
    let mut content = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, property) in properties.into_iter().flatten() {
        let value = match property.get("default") {
            Some(default) => default.clone(),
            None => match property.get("type").and_then(Value::as_str) {
                Some("number") => json!(1.0),
                Some("integer") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                _ => match property.get("enum").and_then(|e| e.get(0)) {
                    Some(first) => first.clone(),
                    None => json!("test"),
                },
            },
        };
        content.insert(name.clone(), value);
    }
    content
}

impl ClientHandler for Conformance {
    fn get_info(&self) -> ClientConfig {
        let caps = ClientCapabilities::builder()
            .enable_elicitation()
            .enable_sampling()
            .enable_roots()
            .build();
        ClientConfig::new(
            caps,
            Implementation::new("toolstack-conformance-client", "0.1.0"),
        )
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let schema = match &params {
            ElicitRequestParams::FormElicitationParams {
                requested_schema, ..
            } => serde_json::to_value(requested_schema).unwrap_or_default(),
            _ => Value::Null,
        };
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(fill(&schema))))
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let message = SamplingMessage::new(
            Role::Assistant,
            SamplingMessageContentBlock::text("a reply from the client's model"),
        );
        Ok(
            CreateMessageResult::new(message, "toolstack-mock-model".into())
                .with_stop_reason("endTurn"),
        )
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(vec![Root::new(
            "file:///tmp/toolstack",
        )]))
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Context {
    #[serde(default, alias = "tool_calls")]
    tool_calls: Vec<Call>,
}

#[derive(Debug, serde::Deserialize)]
struct Call {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
}

/// Arguments for a tool the scenario did not spell out: a value for each
/// required property.
fn arguments_for(schema: &Map<String, Value>) -> Map<String, Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut filled = fill(&Value::Object(schema.clone()));
    filled.retain(|name, _| required.contains(&name.as_str()));
    filled
}

async fn run(scenario: &str, url: &str, stateless: bool) -> Result<(), ToolError> {
    let context: Context = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    let builder = McpClient::builder().handler(Conformance);
    let builder = if stateless {
        builder.stateless()
    } else {
        builder
    };
    let client = builder.connect_http(url).await?;
    let toolbox = client.toolbox().await?;

    let calls: Vec<(String, Map<String, Value>)> = match scenario {
        // Connecting and listing is the scenario.
        "initialize" | "json-schema-ref-no-deref" => Vec::new(),
        "sse-retry" => vec![("test_reconnection".into(), Map::new())],
        // The schema the client kept for one tool, sent back through
        // another: nothing of JSON Schema 2020-12 may be lost on the way.
        "json-schema-2020-12-preservation" => {
            let kept = toolbox
                .get("json_schema_2020_12_tool")
                .map(|tool| tool.info().input_schema().clone())
                .unwrap_or_default();
            let mut arguments = Map::new();
            arguments.insert("schema".into(), kept);
            vec![("json_schema_echo".into(), arguments)]
        }
        "elicitation-sep1034-client-defaults" => toolbox
            .infos()
            .filter(|info| info.name().contains("elicitation"))
            .map(|info| (info.name().to_owned(), Map::new()))
            .collect(),
        _ if !context.tool_calls.is_empty() => context
            .tool_calls
            .into_iter()
            .map(|call| (call.name, call.arguments.unwrap_or_default()))
            .collect(),
        // Every tool the server lists.
        _ => toolbox
            .infos()
            .map(|info| {
                let schema = info.input_schema().as_object().cloned().unwrap_or_default();
                (info.name().to_owned(), arguments_for(&schema))
            })
            .collect(),
    };
    for (name, arguments) in calls {
        if toolbox.get(&name).is_none() {
            eprintln!("the server lists no tool {name}");
            continue;
        }
        let request = ToolRequest::new(name.clone(), Value::Object(arguments).to_string());
        let stream = toolbox.clone().oneshot(request).await?;
        let result = ToolResult::collect(stream).await;
        eprintln!("{name}: {}", result.into_text());
    }
    Ok(())
}

const USAGE: &str = "\
Usage: mcp_conformance_client URL
  (run by `conformance client --command <this binary>`, see .ci/conformance)

Plays the MCP conformance suite's client scenario named in
MCP_CONFORMANCE_SCENARIO against the mock server at URL.
  -h, --help   this text
";

#[tokio::main]
async fn main() {
    if toolstack_demo::help(USAGE) {
        return;
    }
    let scenario =
        std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_else(|_| "initialize".into());
    let version = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").unwrap_or_default();
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: mcp_conformance_client URL (the scenario in MCP_CONFORMANCE_SCENARIO)");
        std::process::exit(2);
    };
    // The 2026-07-28 wire is stateless; so are the scenarios of its
    // per-request metadata and headers, whatever revision runs them. The
    // `json-schema-ref-no-deref` mock speaks only `initialize`.
    let stateless = scenario != "json-schema-ref-no-deref"
        && (version.as_str() >= "2026-07-28"
            || scenario.starts_with("http-")
            || scenario == "request-metadata"
            || scenario.starts_with("sep-2322"));
    // Some mock servers misbehave on purpose: end before the harness's own
    // 30 s timeout would kill the process.
    match tokio::time::timeout(Duration::from_secs(25), run(&scenario, &url, stateless)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            eprintln!("{scenario}: {err}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("{scenario}: timed out after 25 s");
            std::process::exit(1);
        }
    }
}
