//! A local toolbox with a remote MCP server's tools nested in it, driven by
//! the agent: the model sees and calls the prefixed name, the server runs
//! its tool under its own name, and the result reaches the model.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use http::Extensions;
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::mcp::rmcp::ServiceExt as _;
use toolstack::mcp::{McpClient, McpServer};
use toolstack::model::{ChatRequest, Message, ScriptedModel, Turn};
use toolstack::{tool, ToolError, ToolInfo, Toolbox};
use tower::ServiceBuilder;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Query {
    q: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// The remote server's toolbox: `search` counts its runs; `delete` is there
/// to be hidden by the client side's resolver.
fn remote_tools(runs: Arc<AtomicUsize>) -> Toolbox {
    Toolbox::new()
        .tool(tool::from_fn("search", move |Query { q }| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(serde_json::json!({"hits": [format!("BUG-7: {q}")]}))
            }
        }))
        .tool(tool::from_fn("delete", |_: Query| async {
            Ok::<_, ToolError>("deleted")
        }))
}

/// Our server on one end of an in-memory pipe, our client on the other.
async fn connect(toolbox: Toolbox) -> McpClient {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = McpServer::new(toolbox).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    McpClient::connect(client_io).await.unwrap()
}

#[tokio::test]
async fn an_agent_calls_a_nested_remote_mcp_tool_by_its_prefixed_name() {
    let runs = Arc::new(AtomicUsize::new(0));
    let client = connect(remote_tools(runs.clone())).await;
    let remote = client
        .toolbox()
        .await
        .unwrap()
        .resolver(|info: &ToolInfo, _: &Extensions| info.name() != "delete");
    let local = Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }));
    let toolbox = local.nest("jira", remote);

    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("jira.search", r#"{"q":"login fails"}"#)
            .tool_call("add", r#"{"a":2,"b":3}"#),
        Turn::new().text("Found BUG-7."),
    ]);
    let requests = Arc::new(Mutex::new(Vec::<ChatRequest>::new()));
    let log = requests.clone();
    let model = ServiceBuilder::new()
        .map_request(move |req: ChatRequest| {
            log.lock().unwrap().push(req.clone());
            req
        })
        .service(model);

    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("Any bugs about logging in?")])
        .collect()
        .await;

    assert_eq!(runs.load(Ordering::SeqCst), 1, "the remote tool ran once");
    let results: Vec<(&str, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { name, result, .. } => Some((name.as_str(), result.text())),
            _ => None,
        })
        .collect();
    assert!(
        results
            .iter()
            .all(|(_, text)| !text.contains("unknown tool")),
        "{results:?}"
    );

    let requests = requests.lock().unwrap();
    assert_eq!(requests.len(), 2);
    // The model is shown the prefixed names, and not the hidden remote tool.
    let shown: Vec<&str> = requests[0].tools.iter().map(|t| t.name()).collect();
    assert_eq!(shown, ["add", "jira.search"]);
    // The remote result is in the model's next request, answering its call.
    let tool_messages: Vec<&str> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } if tool_call_id == "call_0_0" => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(tool_messages.len(), 1);
    assert!(
        tool_messages[0].contains("BUG-7: login fails"),
        "{tool_messages:?}"
    );

    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done event: {events:?}")
    };
    assert_eq!(done.stop, StopReason::Finished);
    let last_tool = done.messages.iter().find_map(|m| match m {
        Message::Tool {
            tool_call_id,
            content,
            ..
        } if tool_call_id == "call_0_0" => Some(content.as_str()),
        _ => None,
    });
    assert!(last_tool.is_some_and(|c| c.contains("BUG-7: login fails")));
    assert!(matches!(
        done.messages.last(),
        Some(Message::Assistant { content: Some(text), .. }) if text == "Found BUG-7."
    ));
}

/// A remote MCP server's tools merged deferred: the model is shown only
/// the local tool and the search; a search finds the remote `search` (but
/// never the `delete` the client side hides), loads it, and the call runs
/// on the server.
#[tokio::test]
async fn a_remote_mcp_toolbox_merged_deferred_is_searched_loaded_and_called() {
    use toolstack::agent::SEARCH_TOOLS;

    let runs = Arc::new(AtomicUsize::new(0));
    let client = connect(remote_tools(runs.clone())).await;
    let remote = client
        .toolbox()
        .await
        .unwrap()
        .resolver(|info: &ToolInfo, _: &Extensions| info.name() != "delete");
    let local = Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }));
    let toolbox = local.nest_with("jira", '_', remote.deferred());

    let model = ScriptedModel::new([
        Turn::new().tool_call(SEARCH_TOOLS, r#"{"query": "search or delete jira"}"#),
        Turn::new().tool_call("jira_search", r#"{"q":"login fails"}"#),
        Turn::new().text("Found BUG-7."),
    ]);
    let requests = Arc::new(Mutex::new(Vec::<ChatRequest>::new()));
    let log = requests.clone();
    let model = ServiceBuilder::new()
        .map_request(move |req: ChatRequest| {
            log.lock().unwrap().push(req.clone());
            req
        })
        .service(model);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("Any bugs about logging in?")])
        .collect()
        .await;

    let loaded: Vec<&Vec<String>> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolsLoaded { names, .. } => Some(names),
            _ => None,
        })
        .collect();
    assert_eq!(loaded, [&vec!["jira_search".to_owned()]]);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the remote tool ran once");
    let requests = requests.lock().unwrap();
    let shown = |at: usize| -> Vec<String> {
        requests[at]
            .tools
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    };
    assert_eq!(shown(0), ["add", SEARCH_TOOLS]);
    assert_eq!(shown(1), ["add", "jira_search"]);
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done event: {events:?}")
    };
    assert_eq!(done.stop, StopReason::Finished);
}
