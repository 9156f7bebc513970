//! MCP: our client against our server — in memory, over streamable HTTP on
//! 127.0.0.1, and over stdio with a child process — plus the protocol's
//! bad-input cases on the wire.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::middleware;
use futures_util::{stream, StreamExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolstack::mcp::rmcp::model::{CallToolRequestParams, ErrorCode};
use toolstack::mcp::rmcp::service::ServiceError;
use toolstack::mcp::rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::rmcp::transport::StreamableHttpClientTransport;
use toolstack::mcp::rmcp::ServiceExt as _;
use toolstack::mcp::{McpClient, McpServer};
use toolstack::{
    tool, Describe, ErrorKind, Progress, Resource, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, ToolRequest, ToolResult, Toolbox,
};
use toolstack_demo::auth::{require_bearer, Tokens};
use tower::ServiceExt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    sum: i64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn add_tool() -> toolstack::BoxTool {
    toolstack::BoxTool::new(
        tool::from_fn("add", |Add { a, b }| async move {
            Ok::<_, ToolError>(Sum { sum: a + b })
        })
        .with_description("Adds two integers")
        .with_output_schema_for::<Sum>()
        .with_annotations(ToolAnnotations::new().read_only().title("Adder")),
    )
}

/// Text, JSON, an image and a resource, with progress in between.
fn mixed_tool() -> Toolbox {
    Toolbox::new().tool(tool::from_stream("mixed", |_: NoArgs| {
        stream::iter([
            Ok::<_, ToolError>(ToolOutput::progress(
                Progress::new(1.0).total(2.0).message("half"),
            )),
            Ok(ToolOutput::text("hello")),
            Ok(ToolOutput::json(json!({"rows": 3}))),
            Ok(ToolOutput::progress(Progress::new(2.0).total(2.0))),
            Ok(ToolOutput::image("aGk=", "image/png")),
            Ok(ToolOutput::resource(
                Resource::text("mem://notes", "a note").mime_type("text/plain"),
            )),
        ])
    }))
}

fn toolbox() -> Toolbox {
    let mixed = mixed_tool();
    Toolbox::new()
        .boxed(add_tool())
        .boxed(mixed.get("mixed").unwrap().clone())
        .tool(tool::from_stream("fails_midway", |_: NoArgs| {
            stream::iter([
                Ok(ToolOutput::text("partial")),
                Err(ToolError::rate_limited(Some(Duration::from_secs(2)))),
            ])
        }))
}

/// Our server on one end of an in-memory pipe, our client on the other.
/// A client of `toolbox` served over MCP, in memory.
pub(crate) async fn in_memory(toolbox: Toolbox) -> McpClient {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = McpServer::new(toolbox).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    McpClient::connect(client_io).await.unwrap()
}

async fn items(client: &McpClient, name: &str, args: &str) -> Vec<toolstack::ToolItem> {
    let toolbox = client.toolbox().await.unwrap();
    // A call that failed before answering: its error is its one item.
    match toolbox
        .oneshot(ToolRequest::new(name.to_owned(), args.to_owned()))
        .await
    {
        Ok(stream) => stream.collect().await,
        Err(err) => vec![Err(err)],
    }
}

#[tokio::test]
async fn remote_tool_keeps_its_definition() {
    let local = add_tool();
    let client = in_memory(toolbox()).await;
    let tools = client.tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.info().name().to_owned()).collect();
    assert_eq!(names, ["add", "mixed", "fails_midway"]);
    let remote = tools[0].info();
    assert_eq!(remote, local.info());
    assert_eq!(
        remote.input_schema()["properties"]["a"]["description"],
        "The first addend."
    );
    assert!(remote.annotations().is_idempotent());
}

#[tokio::test]
async fn remote_call_returns_structured_output() {
    let client = in_memory(toolbox()).await;
    let out = items(&client, "add", r#"{"a": 2, "b": 40}"#).await;
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        out[0]
            .as_ref()
            .unwrap()
            .as_json()
            .map(toolstack::Json::value),
        Some(json!({"sum": 42}))
    );
}

#[tokio::test]
async fn remote_stream_carries_progress_then_content_in_order() {
    let client = in_memory(toolbox()).await;
    let out: Vec<ToolOutput> = items(&client, "mixed", "{}")
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let progress: Vec<_> = out.iter().filter_map(ToolOutput::as_progress).collect();
    assert_eq!(progress.len(), 2, "{out:?}");
    assert_eq!(progress[0].message.as_deref(), Some("half"));
    assert_eq!(progress[1].progress, 2.0);
    let content: Vec<_> = out.iter().filter(|o| !o.is_progress()).cloned().collect();
    assert_eq!(
        content,
        [
            ToolOutput::text("hello"),
            ToolOutput::json(json!({"rows": 3})),
            ToolOutput::image("aGk=", "image/png"),
            ToolOutput::resource(Resource::text("mem://notes", "a note").mime_type("text/plain")),
        ]
    );
    // Progress arrives while the call runs, before the result's content.
    assert!(out[0].is_progress() && out[1].is_progress(), "{out:?}");
}

#[tokio::test]
async fn tool_error_is_an_error_result_and_reads_back_typed() {
    let client = in_memory(toolbox()).await;
    // On the wire: isError with the partial output and the model-facing JSON.
    let raw = client
        .peer()
        .call_tool(CallToolRequestParams::new("fails_midway"))
        .await
        .unwrap();
    assert_eq!(raw.is_error, Some(true));
    let texts: Vec<_> = raw
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(texts[0], "partial");
    let model: serde_json::Value = serde_json::from_str(&texts[1]).unwrap();
    assert_eq!(model["kind"], "rate_limited");
    assert_eq!(model["retry_after_ms"], 2000);

    // Through the client: the items, then the same typed error.
    let out = items(&client, "fails_midway", "{}").await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].as_ref().unwrap().as_text(), Some("partial"));
    let err = out[1].as_ref().unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_secs(2))
        }
    );
}

#[tokio::test]
async fn unknown_tool_is_a_protocol_error_and_the_server_goes_on() {
    let client = in_memory(toolbox()).await;
    let err = client
        .peer()
        .call_tool(CallToolRequestParams::new("ad"))
        .await
        .unwrap_err();
    match err {
        ServiceError::McpError(data) => {
            assert_eq!(data.code, ErrorCode::INVALID_PARAMS);
            assert!(
                data.message
                    .starts_with("unknown tool `ad`; did you mean `add`?"),
                "{}",
                data.message
            );
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    let out = items(&client, "add", r#"{"a": 1, "b": 1}"#).await;
    assert_eq!(
        out[0]
            .as_ref()
            .unwrap()
            .as_json()
            .map(toolstack::Json::value),
        Some(json!({"sum": 2}))
    );
}

#[tokio::test]
async fn wrong_arguments_name_the_field() {
    let client = in_memory(toolbox()).await;
    let out = items(&client, "add", r#"{"a": "two", "b": 1}"#).await;
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message().contains("`a`") || err.message().contains("a:"),
        "{}",
        err.message()
    );

    // Arguments that are not a JSON object never leave the client.
    let tool = client.tools().await.unwrap().remove(0);
    let err = tool
        .oneshot(ToolRequest::new("add", "[1, 2]"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message().contains("must be a JSON object"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_remote_tool() {
    struct SetOnDrop(Arc<AtomicBool>, Option<tokio::sync::oneshot::Sender<()>>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
            if let Some(tx) = self.1.take() {
                let _ = tx.send(());
            }
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let slot = Arc::new(std::sync::Mutex::new(Some(tx)));
    let flag = dropped.clone();
    let slow = tool::from_fn_with_context("slow", move |_: NoArgs, ctx: ToolContext| {
        let guard = SetOnDrop(flag.clone(), slot.lock().unwrap().take());
        async move {
            let _guard = guard;
            ctx.report(Progress::new(0.0).message("started"));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("never")
        }
    });
    let client = in_memory(Toolbox::new().tool(slow)).await;
    let toolbox = client.toolbox().await.unwrap();
    let mut stream = toolbox
        .oneshot(ToolRequest::new("slow", "{}"))
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.is_progress(), "the tool is running");
    assert!(!dropped.load(Ordering::SeqCst));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("the server dropped the tool after notifications/cancelled")
        .unwrap();
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_still_cancels_promptly() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let slot = Arc::new(std::sync::Mutex::new(Some(tx)));
    let slow = tool::from_fn_with_context("slow", move |_: NoArgs, ctx: ToolContext| {
        // Dropping `_tx` with the tool's future tells the test it ended.
        let _tx = slot.lock().unwrap().take();
        async move {
            let _tx = _tx;
            ctx.report(Progress::new(0.0));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("never")
        }
    });
    // Only the stream holds the connection once `oneshot` dropped the toolbox.
    let remote = in_memory(Toolbox::new().tool(slow))
        .await
        .toolbox()
        .await
        .unwrap();
    let mut stream = remote
        .oneshot(ToolRequest::new("slow", "{}"))
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().unwrap().is_progress());
    drop(stream);
    // Without the cancellation the server would only notice the closed
    // pipe, and wait out its 5 s drain before dropping the tool.
    let ended = tokio::time::timeout(Duration::from_secs(2), rx).await;
    assert!(ended.is_ok(), "the tool was not cancelled within 2 s");
}

#[tokio::test]
async fn a_remote_toolbox_can_take_a_resolver() {
    let client = in_memory(toolbox()).await;
    let toolbox = client
        .toolbox()
        .await
        .unwrap()
        .resolver(|info: &toolstack::ToolInfo, _: &http::Extensions| info.name() != "mixed");
    let nobody = http::Extensions::new();
    let visible: Vec<_> = toolbox.infos_for(&nobody).map(|i| i.name()).collect();
    assert_eq!(visible, ["add", "fails_midway"]);
    let err = toolbox
        .oneshot(ToolRequest::new("mixed", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

// ---- streamable HTTP on 127.0.0.1 ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    Guest,
    Admin,
}

/// The bearer tokens and who they stand for.
const TOKENS: Tokens<Caller> = &[("admin", Caller::Admin), ("guest", Caller::Guest)];

async fn http_server() -> SocketAddr {
    let toolbox = toolbox()
        .tool(tool::from_fn("admin_only", |_: NoArgs| async {
            Ok::<_, ToolError>("done")
        }))
        .resolver(|info: &toolstack::ToolInfo, ext: &http::Extensions| {
            info.name() != "admin_only" || ext.get::<Caller>() == Some(&Caller::Admin)
        });
    let config = StreamableHttpServerConfig::default().with_max_request_body_bytes(16 * 1024);
    let app = axum::Router::new()
        .nest_service("/mcp", McpServer::new(toolbox).into_http_service(config))
        .layer(middleware::from_fn_with_state(
            TOKENS,
            require_bearer::<Caller>,
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn http_client(addr: SocketAddr, token: &str) -> McpClient {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(token);
    McpClient::connect(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

/// A stateless client against a server of revision 2025-11-25 (as the
/// TypeScript SDK 1.x answers `server/discover`: 400, -32000 "Server not
/// initialized"): it connects again with `initialize`, and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_client_falls_back_to_initialize_on_an_older_server() {
    use axum::extract::Request;
    use axum::middleware::Next;
    use axum::response::IntoResponse;

    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&refused);
    let legacy = middleware::from_fn(move |request: Request, next: Next| {
        let count = Arc::clone(&count);
        async move {
            let (parts, body) = request.into_parts();
            let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
            if String::from_utf8_lossy(&bytes).contains("\"server/discover\"") {
                count.fetch_add(1, Ordering::SeqCst);
                let body = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}"#;
                return (
                    axum::http::StatusCode::BAD_REQUEST,
                    [("content-type", "application/json")],
                    body,
                )
                    .into_response();
            }
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
    });
    let app = axum::Router::new()
        .nest_service(
            "/mcp",
            McpServer::new(toolbox()).into_http_service(StreamableHttpServerConfig::default()),
        )
        .layer(legacy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = McpClient::builder()
        .stateless()
        .connect_http(&format!("http://{addr}/mcp"))
        .await
        .unwrap();
    assert_eq!(
        refused.load(Ordering::SeqCst),
        1,
        "discover was tried first"
    );
    let out = items(&client, "add", r#"{"a": 2, "b": 3}"#).await;
    assert!(
        out.iter().any(|i| i
            .as_ref()
            .unwrap()
            .as_json()
            .is_some_and(|j| j.value() == json!({"sum": 5}))),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_each_caller_sees_and_calls_its_own_tools() {
    let addr = http_server().await;
    let guest = http_client(addr, "guest").await;
    let admin = http_client(addr, "admin").await;

    let guest_tools: Vec<_> = guest
        .tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.info().name().to_owned())
        .collect();
    let admin_tools: Vec<_> = admin
        .tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.info().name().to_owned())
        .collect();
    assert_eq!(guest_tools, ["add", "mixed", "fails_midway"]);
    assert_eq!(admin_tools, ["add", "mixed", "fails_midway", "admin_only"]);

    let err = guest
        .peer()
        .call_tool(CallToolRequestParams::new("admin_only"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ServiceError::McpError(ref d) if d.code == ErrorCode::INVALID_PARAMS),
        "{err:?}"
    );
    let out = items(&admin, "admin_only", "{}").await;
    assert_eq!(out[0].as_ref().unwrap().as_text(), Some("done"));

    // Progress over HTTP too.
    let out = items(&guest, "mixed", "{}").await;
    assert_eq!(
        out.iter()
            .filter(|i| i.as_ref().unwrap().is_progress())
            .count(),
        2
    );
    let result = ToolResult::collect(stream::iter(out)).await;
    assert_eq!(result.structured_content(), Some(json!({"rows": 3})));
}

/// One HTTP/1.1 exchange on a fresh connection: (status, head, body).
async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut raw))
        .await
        .expect("the server answered")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// Initializes a session over raw HTTP and returns its id.
async fn raw_session(addr: SocketAddr) -> String {
    let (status, head, body) = post(addr, &[("authorization", "Bearer guest")], INIT).await;
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(body.contains(r#""serverInfo""#), "{body}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .trim()
        .to_owned();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, _) = post(
        addr,
        &[
            ("authorization", "Bearer guest"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        initialized,
    )
    .await;
    assert_eq!(status, 202);
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_bad_input_gets_clear_errors_and_the_server_keeps_serving() {
    let addr = http_server().await;

    // No token, wrong token: 401 with a Bearer challenge.
    for headers in [&[][..], &[("authorization", "Bearer nope")][..]] {
        let (status, head, body) = post(addr, headers, INIT).await;
        assert_eq!(status, 401);
        assert!(head.contains("www-authenticate: bearer"), "{head}");
        assert!(body.contains("bearer token"), "{body}");
    }

    // An oversized body: 413, before any JSON is read.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(20 * 1024)
    );
    let (status, _, _) = post(addr, &[("authorization", "Bearer guest")], &big).await;
    assert_eq!(status, 413);

    let session = raw_session(addr).await;
    let auth = [
        ("authorization", "Bearer guest"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    // Malformed JSON-RPC: rmcp answers 415 with the parser's message.
    let (status, _, body) = post(addr, &auth, r#"{"jsonrpc":"2.0","id":2,"method":"#).await;
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("fail to deserialize request body"), "{body}");

    // An unknown method: JSON-RPC "method not found".
    let (status, _, body) = post(
        addr,
        &auth,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/explode","params":{}}"#,
    )
    .await;
    assert!(body.contains("-32601"), "{status} {body}");

    // An unknown tool: a protocol error naming it.
    let (_, _, body) = post(
        addr,
        &auth,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
    )
    .await;
    assert!(
        body.contains("-32602") && body.contains("unknown tool `nope`"),
        "{body}"
    );

    // Arguments of the wrong shape: a tool error result naming the field.
    let (_, _, body) = post(addr, &auth, r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":"x","b":1}}}"#).await;
    assert!(
        body.contains(r#""isError":true"#) && body.contains("invalid_arguments"),
        "{body}"
    );

    // And the session still works.
    let (status, _, body) = post(addr, &auth, r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add","arguments":{"a":20,"b":22}}}"#).await;
    assert_eq!(status, 200);
    assert!(body.contains(r#""structuredContent":{"sum":42}"#), "{body}");
}

// ---- stdio, with the example server as a child process ----

#[tokio::test]
async fn stdio_child_process_serves_the_example_toolbox() {
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let server = dir.join(format!("mcp_server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        server.exists(),
        "{} is missing: run the tests with `cargo test --features mcp` (which builds examples)",
        server.display()
    );
    let mut command = tokio::process::Command::new(server);
    command.arg("--stdio");
    let client = McpClient::connect_stdio(command).await.unwrap();
    let names: Vec<_> = client
        .tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.info().name().to_owned())
        .collect();
    assert_eq!(names, ["add", "count", "shutdown_reactor"]);
    let out = items(&client, "count", r#"{"to": 3}"#).await;
    let progress = out
        .iter()
        .filter(|i| i.as_ref().unwrap().is_progress())
        .count();
    assert_eq!(progress, 2, "{out:?}");
    assert_eq!(
        out.last().unwrap().as_ref().unwrap().as_text(),
        Some("counted to 3")
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_stdio_childs_stderr_goes_where_its_command_says() {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let server = dir.join("mcp_server");
    let log = std::env::temp_dir().join(format!("toolstack-stderr-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    // A server that writes to its stderr before it serves.
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(r#"echo "the server's own words" >&2; exec "$0" --stdio"#)
        .arg(&server)
        .stderr(std::process::Stdio::from(file));
    let client = McpClient::connect_stdio(command).await.unwrap();
    assert_eq!(client.tools().await.unwrap().len(), 3);
    let written = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(written, "the server's own words\n");
}

#[tokio::test]
async fn a_call_keeps_the_connection_open_after_every_handle_is_dropped() {
    let remote = in_memory(toolbox()).await.toolbox().await.unwrap();
    // `oneshot` drops the toolbox (the last handle) once the call started.
    let stream = remote
        .oneshot(ToolRequest::new("add", r#"{"a": 2, "b": 3}"#))
        .await
        .unwrap();
    let result = ToolResult::collect(stream).await;
    assert_eq!(
        result.structured_content(),
        Some(json!({"sum": 5})),
        "{result:?}"
    );
}

#[tokio::test]
async fn non_object_json_travels_as_text() {
    let tb = Toolbox::new().tool(tool::from_fn("five", |_: NoArgs| async {
        Ok::<_, ToolError>(5)
    }));
    let client = in_memory(tb).await;
    let raw = client
        .peer()
        .call_tool(CallToolRequestParams::new("five"))
        .await
        .unwrap();
    assert_eq!(
        raw.structured_content, None,
        "MCP structuredContent is an object"
    );
    let out = items(&client, "five", "{}").await;
    assert_eq!(out[0].as_ref().unwrap().as_text(), Some("5"));
}

// ---- bounds and error kinds on the wire ----

#[tokio::test]
async fn an_unknown_tool_error_carries_its_kind_in_data() {
    let client = in_memory(toolbox()).await;
    let err = client
        .peer()
        .call_tool(CallToolRequestParams::new("ad"))
        .await
        .unwrap_err();
    match err {
        ServiceError::McpError(data) => {
            assert_eq!(data.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(data.data, Some(json!({"kind": "not_found"})));
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

/// A stub server's settings: tools, and nothing else.
fn tools_only() -> toolstack::mcp::rmcp::model::ServerConfig {
    use toolstack::mcp::rmcp::model::{ServerCapabilities, ServerConfig};
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
}

/// A stub server's tools: these names, each taking any object.
fn listing(names: &[&'static str]) -> toolstack::mcp::rmcp::model::ListToolsResult {
    let schema = serde_json::Map::from_iter([("type".to_owned(), json!("object"))]);
    let tools = names
        .iter()
        .map(|name| toolstack::mcp::rmcp::model::Tool::new_with_raw(*name, None, schema.clone()))
        .collect();
    toolstack::mcp::rmcp::model::ListToolsResult::with_all_items(tools)
}

/// A server of someone else's: one tool, `odd`, whose every call is the
/// protocol error given.
#[derive(Clone)]
struct ErrorServer(toolstack::mcp::rmcp::ErrorData);

impl toolstack::mcp::rmcp::ServerHandler for ErrorServer {
    fn get_info(&self) -> toolstack::mcp::rmcp::model::ServerConfig {
        tools_only()
    }

    async fn list_tools(
        &self,
        _: Option<toolstack::mcp::rmcp::model::PaginatedRequestParams>,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::ListToolsResult, toolstack::mcp::rmcp::ErrorData> {
        Ok(listing(&["odd"]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::CallToolResponse, toolstack::mcp::rmcp::ErrorData>
    {
        Err(self.0.clone())
    }
}

async fn error_from(data: toolstack::mcp::rmcp::ErrorData) -> ToolError {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = ErrorServer(data).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = McpClient::connect(client_io).await.unwrap();
    let out = items(&client, "odd", "{}").await;
    out.into_iter()
        .find_map(Result::err)
        .expect("the call fails")
}

#[tokio::test]
async fn the_client_takes_the_error_kind_from_data_and_the_message_only_as_a_fallback() {
    use toolstack::mcp::rmcp::ErrorData;
    // The kind in `data` wins over the code and the words.
    let err = error_from(ErrorData::internal_error(
        "no such thing here",
        Some(json!({"kind": "not_found"})),
    ))
    .await;
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.message(), "no such thing here");
    let err = error_from(ErrorData::invalid_params(
        "slow down",
        Some(json!({"kind": "rate_limited", "retry_after_ms": 1500})),
    ))
    .await;
    assert_eq!(
        err.kind(),
        ErrorKind::RateLimited {
            retry_after: Some(Duration::from_millis(1500))
        }
    );
    // A server that sends no kind: the code, then the English prefix.
    let err = error_from(ErrorData::invalid_params("unknown tool `odd`", None)).await;
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = error_from(ErrorData::invalid_params("bad `x`", Some(json!("text")))).await;
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    let err = error_from(ErrorData::internal_error("boom", None)).await;
    assert_eq!(err.kind(), ErrorKind::Failed);
}

async fn in_memory_server(server: McpServer) -> McpClient {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    McpClient::connect(client_io).await.unwrap()
}

/// A raw tool (no size check of its own) that says how much it was sent.
fn sink(calls: Arc<std::sync::atomic::AtomicUsize>) -> Toolbox {
    let info = toolstack::ToolInfo::new("sink");
    Toolbox::new().tool(tool::raw(info, move |request: ToolRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        stream::iter([Ok(ToolOutput::text(request.arguments().len().to_string()))])
    }))
}

#[tokio::test]
async fn arguments_over_the_servers_limit_are_refused_before_the_tool_runs() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = in_memory_server(McpServer::new(sink(calls.clone())).max_argument_bytes(64)).await;
    let big = json!({"pad": "x".repeat(100)}).to_string();
    let out = items(&client, "sink", &big).await;
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert_eq!(
        err.message(),
        "arguments are 110 bytes; the limit for `sink` is 64 bytes"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Under the limit, the tool gets the arguments.
    let out = items(&client, "sink", r#"{"pad": "x"}"#).await;
    assert_eq!(out[0].as_ref().unwrap().as_text(), Some("11"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_servers_default_argument_limit_is_the_one_typed_tools_use() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = in_memory(sink(calls.clone())).await;
    let limit = toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
    let over = json!({"pad": "x".repeat(limit)}).to_string();
    let out = items(&client, "sink", &over).await;
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message()
            .ends_with("the limit for `sink` is 1048576 bytes"),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_rate_limit_over_mcp_keeps_its_retry_after_rounded_up() {
    let limited = Toolbox::new().tool(tool::from_stream("limited", |_: NoArgs| {
        stream::iter([Err::<ToolOutput, _>(ToolError::rate_limited(Some(
            Duration::from_micros(1_000_500),
        )))])
    }));
    let client = in_memory(limited).await;
    let out = items(&client, "limited", "{}").await;
    let err = out.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1001)));
}

/// Reads JSON-RPC lines until one answers `id`; returns every line read.
async fn lines_until_answer(
    lines: &mut tokio::io::Lines<
        tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    >,
    id: u64,
) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("the server answered")
            .unwrap()
            .expect("the connection is open");
        let message: serde_json::Value = serde_json::from_str(&line).unwrap();
        let done = message["id"] == id;
        seen.push(message);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_cancelled_request_gets_no_response_and_its_tool_is_dropped() {
    use tokio::io::AsyncBufReadExt;

    let started = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(tokio::sync::Notify::new());
    let (on_start, on_drop) = (started.clone(), dropped.clone());
    let slow = Toolbox::new().tool(tool::from_fn("slow", move |_: NoArgs| {
        let (on_start, on_drop) = (on_start.clone(), on_drop.clone());
        async move {
            struct Dropped(Arc<tokio::sync::Notify>);
            impl Drop for Dropped {
                fn drop(&mut self) {
                    self.0.notify_one();
                }
            }
            let _guard = Dropped(on_drop);
            on_start.notify_one();
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("never")
        }
    }));
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = McpServer::new(slow).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut send = async |message: &str| {
        write.write_all(message.as_bytes()).await.unwrap();
        write.write_all(b"\n").await.unwrap();
    };
    send(INIT).await;
    lines_until_answer(&mut lines, 1).await;
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
    )
    .await;
    patiently_notified(&started).await;
    send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}"#).await;
    patiently_notified(&dropped).await;
    // Each ping is answered; nothing ever answers the cancelled call.
    let mut seen = Vec::new();
    for id in 3..6 {
        send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).await;
        seen.extend(lines_until_answer(&mut lines, id).await);
    }
    assert!(seen.iter().all(|m| m["id"] != 2), "{seen:?}");
}

async fn patiently_notified(notify: &tokio::sync::Notify) {
    tokio::time::timeout(Duration::from_secs(10), notify.notified())
        .await
        .expect("notified in time");
}

#[tokio::test]
async fn a_flood_of_progress_keeps_only_the_newest_reports_per_call() {
    let finished = Arc::new(tokio::sync::Notify::new());
    let on_finish = finished.clone();
    let flood = Toolbox::new().tool(tool::from_stream("flood", move |_: NoArgs| {
        let on_finish = on_finish.clone();
        let reports =
            (1..=1000).map(|n| Ok::<_, ToolError>(ToolOutput::progress(Progress::new(n as f64))));
        stream::iter(reports)
            .chain(stream::iter([Ok(ToolOutput::text("done"))]))
            .chain(stream::poll_fn(move |_| {
                // The server has sent every report before it polls past the
                // last item.
                on_finish.notify_one();
                std::task::Poll::Ready(None)
            }))
    }));
    let client = in_memory(flood).await;
    let toolbox = client.toolbox().await.unwrap();
    let call = toolbox
        .oneshot(ToolRequest::new("flood", "{}"))
        .await
        .unwrap();
    patiently_notified(&finished).await;
    // A ping's answer comes after every notification the server wrote
    // before it: by then the client has routed all thousand.
    client
        .peer()
        .send_request(toolstack::mcp::rmcp::model::ClientRequest::PingRequest(
            Default::default(),
        ))
        .await
        .unwrap();
    let out: Vec<toolstack::ToolItem> = call.collect().await;
    let progress: Vec<f64> = out
        .iter()
        .filter_map(|i| Some(i.as_ref().ok()?.as_progress()?.progress))
        .collect();
    // The first report opened the call; of the rest, the newest backlog.
    assert_eq!(
        progress.len(),
        1 + toolstack::tool::PROGRESS_BACKLOG,
        "{progress:?}"
    );
    assert_eq!(progress[..2], [1.0, 969.0]);
    assert_eq!(progress.last(), Some(&1000.0));
    assert_eq!(
        out.last().unwrap().as_ref().unwrap().as_text(),
        Some("done")
    );
}

/// A server that needs the user to open a URL before its tool answers (as
/// server-everything's URL elicitation tools do, MCP 2025-11-25): its first
/// call is the `-32042` error with the URL in its data; its next, the
/// answer.
#[derive(Clone)]
struct SignInServer(Arc<std::sync::atomic::AtomicUsize>);

impl toolstack::mcp::rmcp::ServerHandler for SignInServer {
    fn get_info(&self) -> toolstack::mcp::rmcp::model::ServerConfig {
        tools_only()
    }

    async fn list_tools(
        &self,
        _: Option<toolstack::mcp::rmcp::model::PaginatedRequestParams>,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::ListToolsResult, toolstack::mcp::rmcp::ErrorData> {
        Ok(listing(&["inbox"]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::CallToolResponse, toolstack::mcp::rmcp::ErrorData>
    {
        use toolstack::mcp::rmcp::model::{CallToolResult, ContentBlock};
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(toolstack::mcp::rmcp::ErrorData::new(
                ErrorCode(-32042),
                "This request requires browser-based authorization.",
                Some(json!({"elicitations": [{
                    "mode": "url",
                    "elicitationId": "sign-in-1",
                    "url": "https://auth.example/sign-in?state=1",
                    "message": "Sign in to read the inbox",
                }]})),
            ));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("3 new messages")]).into())
    }
}

/// A user who opens every URL asked of them.
#[derive(Clone, Default)]
struct Opens(Arc<std::sync::Mutex<Vec<String>>>);

impl toolstack::mcp::rmcp::ClientHandler for Opens {
    fn get_info(&self) -> toolstack::mcp::rmcp::model::ClientConfig {
        use toolstack::mcp::rmcp::model::{
            ClientCapabilities, ClientConfig, ElicitationCapability, Implementation,
            UrlElicitationCapability,
        };
        let mut caps = ClientCapabilities::default();
        caps.elicitation =
            Some(ElicitationCapability::new().with_url(UrlElicitationCapability::new()));
        ClientConfig::new(caps, Implementation::new("opens", "1.0"))
    }

    async fn create_elicitation(
        &self,
        params: toolstack::mcp::rmcp::model::ElicitRequestParams,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleClient>,
    ) -> Result<toolstack::mcp::rmcp::model::ElicitResult, toolstack::mcp::rmcp::ErrorData> {
        use toolstack::mcp::rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        if let ElicitRequestParams::UrlElicitationParams { url, .. } = params {
            self.0.lock().unwrap().push(url);
        }
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

async fn sign_in_server(calls: Arc<std::sync::atomic::AtomicUsize>) -> tokio::io::DuplexStream {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = SignInServer(calls).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    client_io
}

#[tokio::test]
async fn url_elicitation_required_asks_the_handler_then_calls_again() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let opened = Opens::default();
    let client = McpClient::builder()
        .handler(opened.clone())
        .connect(sign_in_server(Arc::clone(&calls)).await)
        .await
        .unwrap();
    let out = items(&client, "inbox", "{}").await;
    assert_eq!(
        out.last().unwrap().as_ref().unwrap().as_text(),
        Some("3 new messages"),
        "{out:?}"
    );
    assert_eq!(
        *opened.0.lock().unwrap(),
        ["https://auth.example/sign-in?state=1"]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2, "called again once opened");
}

#[tokio::test]
async fn url_elicitation_required_without_a_handler_names_the_url() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = McpClient::connect(sign_in_server(Arc::clone(&calls)).await)
        .await
        .unwrap();
    let out = items(&client, "inbox", "{}").await;
    let err = out
        .into_iter()
        .find_map(Result::err)
        .expect("the call fails");
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert!(
        err.message()
            .contains("Sign in to read the inbox (https://auth.example/sign-in?state=1)")
            && err.message().contains("no handler"),
        "{}",
        err.message()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A server that sends each result twice, as the spec asks for old
/// clients: content blocks, and the same as `structuredContent`
/// (server-filesystem's shape: a file's text, then `{"content": text}`; an
/// image, then its base64 again in JSON).
#[derive(Clone)]
struct TwiceServer;

impl toolstack::mcp::rmcp::ServerHandler for TwiceServer {
    fn get_info(&self) -> toolstack::mcp::rmcp::model::ServerConfig {
        tools_only()
    }

    async fn list_tools(
        &self,
        _: Option<toolstack::mcp::rmcp::model::PaginatedRequestParams>,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::ListToolsResult, toolstack::mcp::rmcp::ErrorData> {
        Ok(listing(&["read_text_file", "read_media_file", "sum"]))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleServer>,
    ) -> Result<toolstack::mcp::rmcp::model::CallToolResponse, toolstack::mcp::rmcp::ErrorData>
    {
        use toolstack::mcp::rmcp::model::{CallToolResult, ContentBlock};
        let text = "line one\nline two\n".repeat(100);
        let (content, structured) = match &*params.name {
            "read_text_file" => (
                vec![ContentBlock::text(text.clone())],
                json!({"content": text}),
            ),
            "read_media_file" => (
                vec![ContentBlock::image("iVBORw0KGgo=", "image/png")],
                json!({"content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}),
            ),
            // The text block is the JSON itself: one item, the JSON.
            _ => (vec![ContentBlock::text(r#"{"sum":5}"#)], json!({"sum": 5})),
        };
        let mut result = CallToolResult::success(content);
        result.structured_content = Some(structured);
        Ok(result.into())
    }
}

#[tokio::test]
async fn the_model_reads_a_result_once_and_programs_get_its_structured_form() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = TwiceServer.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = McpClient::connect(client_io).await.unwrap();
    let result = |name: &'static str| {
        let client = client.clone();
        async move {
            let items = items(&client, name, "{}").await;
            let mut result = ToolResult::default();
            for item in items {
                result.push(item.unwrap());
            }
            result
        }
    };
    let file = "line one\nline two\n".repeat(100);

    let text = result("read_text_file").await;
    assert_eq!(text.text(), file, "the model reads the file once");
    assert_eq!(text.structured_content(), Some(json!({"content": file})));

    let image = result("read_media_file").await;
    assert_eq!(image.text(), "image/png", "not the base64 again");
    assert_eq!(
        image.structured_content().unwrap()["content"][0]["data"],
        "iVBORw0KGgo="
    );

    // A text block that is the JSON itself stays the one JSON item.
    let sum = result("sum").await;
    assert_eq!(sum.text(), r#"{"sum":5}"#);
    assert_eq!(sum.content.len(), 1);
    assert_eq!(sum.structured_content(), Some(json!({"sum": 5})));

    // Served again by a toolstack server, the result keeps its shape.
    let served = serde_json::to_value(&text).unwrap();
    assert_eq!(served["content"].as_array().unwrap().len(), 1);
    assert_eq!(served["structuredContent"], json!({"content": file}));
}

/// A handler that accepts every elicitation but declares forms only.
#[derive(Clone)]
struct FormsOnly;

impl toolstack::mcp::rmcp::ClientHandler for FormsOnly {
    fn get_info(&self) -> toolstack::mcp::rmcp::model::ClientConfig {
        use toolstack::mcp::rmcp::model::{
            ClientCapabilities, ClientConfig, ElicitationCapability, FormElicitationCapability,
            Implementation,
        };
        let mut caps = ClientCapabilities::default();
        caps.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(caps, Implementation::new("forms", "1.0"))
    }

    async fn create_elicitation(
        &self,
        _: toolstack::mcp::rmcp::model::ElicitRequestParams,
        _: toolstack::mcp::rmcp::service::RequestContext<toolstack::mcp::rmcp::RoleClient>,
    ) -> Result<toolstack::mcp::rmcp::model::ElicitResult, toolstack::mcp::rmcp::ErrorData> {
        use toolstack::mcp::rmcp::model::{ElicitResult, ElicitationAction};
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

#[tokio::test]
async fn url_elicitation_required_is_not_put_to_a_handler_that_opens_no_urls() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = McpClient::builder()
        .handler(FormsOnly)
        .connect(sign_in_server(Arc::clone(&calls)).await)
        .await
        .unwrap();
    let out = items(&client, "inbox", "{}").await;
    let err = out
        .into_iter()
        .find_map(Result::err)
        .expect("the call fails");
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert!(
        err.message()
            .contains("https://auth.example/sign-in?state=1"),
        "{}",
        err.message()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "not called again for nothing"
    );
}
