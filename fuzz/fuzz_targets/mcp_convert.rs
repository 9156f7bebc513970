//! The MCP conversions (`toolstack::mcp::convert`) on arbitrary
//! JSON, and a call's arguments over a real MCP session.
//!
//! Input: one mode byte, then the text.
//!
//! * 0: the text as an rmcp `CallToolResult` → toolstack items → a
//!   collected `ToolResult` → a `CallToolResult` again, twice: after the
//!   first round trip the conversion is stable.
//! * 1: the text as an rmcp `Tool` → `ToolInfo` → `Tool` → `ToolInfo`:
//!   stable after the first round trip, and `tool_to_mcp` never panics.
//! * 2: the text as a call's arguments, through an in-memory
//!   `McpClient` → `McpServer` session (made once) to a typed tool: the
//!   call goes through or is refused as `invalid_arguments`, on either
//!   side of the wire.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolstack::mcp::rmcp::model::{CallToolResult, Tool};
use toolstack::mcp::{convert, McpClient, McpServer};
use toolstack::{tool, ToolError, ToolItem, ToolOutput, ToolRequest, ToolResult, Toolbox};
use toolstack_fuzz::{assert_invalid, assert_ok_or_invalid, text, Args};
use tower::ServiceExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// What a consumer of the items can tell apart.
fn observable(items: &[ToolItem]) -> Vec<Result<ToolOutput, String>> {
    items
        .iter()
        .map(|item| match item {
            Ok(output) => Ok(output.clone()),
            Err(err) => Err(format!("{}: {}", err.kind(), err.message())),
        })
        .collect()
}

fn round_trip(items: Vec<ToolItem>) -> Vec<ToolItem> {
    let result = futures::executor::block_on(ToolResult::collect(futures::stream::iter(items)));
    let wire = serde_json::to_string(&convert::call_result(result)).expect("a result serializes");
    let back: CallToolResult = serde_json::from_str(&wire).expect("a sent result reads back");
    convert::result_items(back)
}

fn results(text: &str) {
    let Ok(result) = serde_json::from_str::<CallToolResult>(text) else {
        return;
    };
    let once = round_trip(convert::result_items(result));
    let twice = round_trip(once.clone());
    assert_eq!(observable(&once), observable(&twice), "for {text:?}");
    // An error ends the items, and only there.
    for items in [&once, &twice] {
        if let Some(at) = items.iter().position(Result::is_err) {
            assert_eq!(at + 1, items.len());
        }
    }
}

fn tools(text: &str) {
    let Ok(tool) = serde_json::from_str::<Tool>(text) else {
        return;
    };
    let info = convert::tool_from_mcp(&tool);
    assert_eq!(info.name(), tool.name.as_ref());
    let sent = convert::tool_to_mcp(&info);
    let wire = serde_json::to_string(&sent).expect("a tool serializes");
    let sent: Tool = serde_json::from_str(&wire).expect("a sent tool reads back");
    let again = convert::tool_from_mcp(&sent);
    let resent = convert::tool_to_mcp(&again);
    assert_eq!(convert::tool_from_mcp(&resent), again, "for {text:?}");
    // What a server does with it.
    let served = Toolbox::new().service(
        info,
        tower::service_fn(|_: ToolRequest| async {
            Ok::<_, ToolError>(futures::stream::empty::<ToolItem>())
        }),
    );
    let _ = McpServer::new(served);
}

/// The remote toolbox of an in-memory MCP session, made once.
fn remote() -> &'static Toolbox {
    static REMOTE: OnceLock<Toolbox> = OnceLock::new();
    REMOTE.get_or_init(|| {
        runtime().block_on(async {
            let served = Toolbox::new().tool(tool::from_fn("args", |args: Args| async move {
                Ok::<_, ToolError>(args)
            }));
            let (server_io, client_io) = tokio::io::duplex(1 << 16);
            tokio::spawn(async move {
                use toolstack::mcp::rmcp::ServiceExt as _;
                let running = McpServer::new(served)
                    .serve(server_io)
                    .await
                    .expect("served");
                let _ = running.waiting().await;
            });
            let client = McpClient::connect(client_io).await.expect("connected");
            // The session lives as long as the process.
            let toolbox = client.toolbox().await.expect("listed");
            std::mem::forget(client);
            toolbox
        })
    })
}

fn arguments(text: &str) {
    let remote = remote().clone();
    let result = runtime().block_on(async {
        match remote
            .oneshot(ToolRequest::new("args", text.to_owned()))
            .await
        {
            Ok(stream) => ToolResult::collect(stream).await,
            Err(err) => {
                assert_invalid(&err, text);
                ToolResult::from_error(err)
            }
        }
    });
    assert_ok_or_invalid(&result, text);
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = text(rest);
    match mode % 3 {
        0 => results(&text),
        1 => tools(&text),
        _ => arguments(&text),
    }
});
