//! MCP at revision 2026-07-28 with toolstack's own client and server, over
//! streamable HTTP on 127.0.0.1 (stateless) and in memory (a 2025-11-25
//! session): tools that ask the client for input mid-call, tools that run
//! as MCP tasks, and what the server delegates to an rmcp handler.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use toolstack::mcp::rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorCode, Implementation, ListPromptsResult, NumberOrString,
    PaginatedRequestParams, Prompt, ServerCapabilities, ServerConfig,
};
use toolstack::mcp::rmcp::service::{RequestContext, ServiceError};
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler};
use toolstack::mcp::{ClientInput, McpClient, McpServer, TaskSupport};
use toolstack::{
    tool, ErrorKind, Progress, ToolContext, ToolError, ToolOutput, ToolRequest, ToolResult, Toolbox,
};
use tower::ServiceExt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Drop {
    table: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn input(ctx: &ToolContext) -> Result<ClientInput, ToolError> {
    ctx.extensions()
        .get::<ClientInput>()
        .cloned()
        .ok_or_else(|| ToolError::failed("not called over MCP"))
}

/// Asks twice — first to confirm, then for a reason — and says which
/// mechanism carried the questions.
fn drop_table() -> Toolbox {
    Toolbox::new().tool(tool::from_fn_with_context(
        "drop_table",
        |args: Drop, ctx: ToolContext| async move {
            let input = input(&ctx)?;
            if !input.confirm(format!("Drop {}?", args.table)).await? {
                return Err(ToolError::new(ErrorKind::Denied, "the user said no"));
            }
            let reason: ElicitRequestParams = serde_json::from_value(json!({
                "mode": "form",
                "message": "Why?",
                "requestedSchema": {
                    "type": "object",
                    "properties": { "reason": { "type": "string" } },
                    "required": ["reason"]
                }
            }))
            .unwrap();
            let why = input.elicit(reason).await?;
            let why = why
                .content
                .and_then(|c| c.get("reason").cloned())
                .unwrap_or_default();
            Ok::<_, ToolError>(format!("dropped {} because {why} ({input:?})", args.table))
        },
    ))
}

/// The person at the client: says yes (or no) to every confirmation and
/// gives "cleanup" as every reason; counts the questions.
#[derive(Clone)]
struct Person {
    yes: bool,
    asked: Arc<AtomicUsize>,
}

impl Person {
    fn new(yes: bool) -> Self {
        Person {
            yes,
            asked: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl ClientHandler for Person {
    fn get_info(&self) -> ClientConfig {
        let caps = ClientCapabilities::builder().enable_elicitation().build();
        ClientConfig::new(caps, Implementation::new("person", "1.0"))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let message = match &params {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        let content = if message.starts_with("Drop") {
            json!({ "confirm": self.yes })
        } else {
            json!({ "reason": "cleanup" })
        };
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }
}

async fn serve_http(server: McpServer<impl ServerHandler + Clone>) -> SocketAddr {
    let app = axum::Router::new().nest_service(
        "/mcp",
        server.into_http_service(StreamableHttpServerConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn stateless(addr: SocketAddr, person: Option<Person>) -> McpClient {
    let builder = McpClient::builder().stateless();
    let builder = match person {
        Some(person) => builder.handler(person),
        None => builder,
    };
    builder
        .connect_http(&format!("http://{addr}/mcp"))
        .await
        .unwrap()
}

async fn call(client: &McpClient, name: &str, args: &str) -> ToolResult {
    let toolbox = client.toolbox().await.unwrap();
    match toolbox
        .oneshot(ToolRequest::new(name.to_owned(), args.to_owned()))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        // Failed before answering anything.
        Err(err) => ToolResult::from_error(err),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_asks_the_user_mid_call_in_input_required_rounds() {
    let server = McpServer::new(drop_table());
    let waiting = server.clone();
    let addr = serve_http(server).await;
    let person = Person::new(true);
    let client = stateless(addr, Some(person.clone())).await;

    let result = call(&client, "drop_table", r#"{"table":"logs"}"#).await;
    let text = result.into_text();
    assert!(
        text.starts_with("dropped logs because \"cleanup\""),
        "{text}"
    );
    // Two questions, two rounds, over input-required results: the same
    // tool stream resumed each time, none left waiting.
    assert!(text.contains("input-required results"), "{text}");
    assert_eq!(person.asked.load(Ordering::SeqCst), 2);
    assert_eq!(waiting.waiting_calls(), 0);

    // A "no" ends the call with the tool's error, after one question.
    let client = stateless(addr, Some(Person::new(false))).await;
    let result = call(&client, "drop_table", r#"{"table":"logs"}"#).await;
    assert_eq!(result.error.map(|e| e.kind()), Some(ErrorKind::Denied));
}

#[tokio::test]
async fn the_same_tool_asks_with_session_requests_on_2025_11_25() {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        use toolstack::mcp::rmcp::ServiceExt as _;
        let running = McpServer::new(drop_table()).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let person = Person::new(true);
    let client = McpClient::builder()
        .handler(person.clone())
        .connect(client_io)
        .await
        .unwrap();
    let text = call(&client, "drop_table", r#"{"table":"t"}"#)
        .await
        .into_text();
    assert!(text.contains("session requests"), "{text}");
    assert_eq!(person.asked.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_capability_gets_an_error_naming_it() {
    let addr = serve_http(McpServer::new(drop_table())).await;
    // No handler: the client declares no elicitation.
    let client = stateless(addr, None).await;
    let result = call(&client, "drop_table", r#"{"table":"t"}"#).await;
    let err = result.error.expect("an error");
    assert!(err.message().contains("elicitation"), "{err}");
}

/// A raw `tools/call` of the 2026-07-28 wire.
fn params(name: &str) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned())
        .with_arguments(json!({"table": "t"}).as_object().cloned().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_expired_request_state_is_refused_and_the_waiting_calls_are_bounded() {
    let server = McpServer::new(drop_table()).max_waiting_calls(1);
    let handle = server.clone();
    let addr = serve_http(server).await;
    let client = stateless(addr, Some(Person::new(true))).await;
    let peer = client.peer();

    // A state the server never gave: a protocol error, the tool not run.
    let mut forged = params("drop_table");
    forged.request_state = Some("0123456789abcdef".into());
    match peer.call_tool_once(forged).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains("requestState"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }

    // One call may wait; the second is refused with an overloaded result.
    let first = peer.call_tool_once(params("drop_table")).await.unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("{first:?}")
    };
    assert_eq!(handle.waiting_calls(), 1);
    match peer.call_tool_once(params("drop_table")).await.unwrap() {
        CallToolResponse::Complete(result) => {
            assert_eq!(result.is_error, Some(true));
            assert!(format!("{result:?}").contains("overloaded"), "{result:?}");
        }
        other => panic!("{other:?}"),
    }

    // The state, altered: refused; the waiting call is gone with it (a
    // state is good for one retry).
    let mut altered = params("drop_table");
    altered.request_state = asked.request_state.map(|s| format!("{s}-TAMPERED"));
    assert!(peer.call_tool_once(altered).await.is_err());
}

/// The task fixtures. Each first yields (so that its first poll is
/// pending and the call becomes a task); `report` then takes a permit of
/// `steps` before each of its three steps, so a test paces it; `forever`
/// notifies `dropped` when its stream is dropped.
fn task_tools(dropped: Arc<Notify>, steps: Arc<Semaphore>) -> Toolbox {
    Toolbox::new()
        .tool(tool::from_fn_with_context(
            "report",
            move |_: NoArgs, ctx: ToolContext| {
                let steps = steps.clone();
                async move {
                    tokio::task::yield_now().await;
                    for step in 1..=3 {
                        steps.acquire().await.expect("open").forget();
                        ctx.report(
                            Progress::new(f64::from(step))
                                .total(3.0)
                                .message(format!("step {step}")),
                        );
                    }
                    Ok::<_, ToolError>(ToolOutput::text("all steps done"))
                }
            },
        ))
        .tool(tool::from_fn_with_context(
            "forever",
            move |_: NoArgs, ctx: ToolContext| {
                let dropped = dropped.clone();
                async move {
                    struct Flag(Arc<Notify>);
                    impl std::ops::Drop for Flag {
                        fn drop(&mut self) {
                            self.0.notify_one();
                        }
                    }
                    let _flag = Flag(dropped);
                    tokio::task::yield_now().await;
                    ctx.report(Progress::new(1.0).message("started"));
                    futures_util::future::pending::<()>().await;
                    Ok::<_, ToolError>("never")
                }
            },
        ))
        .tool(tool::from_fn_with_context(
            "careful",
            |_: NoArgs, ctx: ToolContext| async move {
                tokio::task::yield_now().await;
                let yes = input(&ctx)?.confirm("Drop it?").await?;
                Ok::<_, ToolError>(format!("confirmed={yes} ({:?})", input(&ctx)?))
            },
        ))
        .tool(tool::from_fn("quick", |_: NoArgs| async {
            Ok::<_, ToolError>("at once")
        }))
}

async fn task_server(dropped: Arc<Notify>, steps: Arc<Semaphore>) -> SocketAddr {
    let server = McpServer::new(task_tools(dropped, steps))
        .task_support("report", TaskSupport::Optional)
        .task_support("forever", TaskSupport::Optional)
        .task_support("careful", TaskSupport::Optional)
        .task_support("quick", TaskSupport::Optional)
        .task_poll_interval(Duration::from_millis(20));
    serve_http(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_runs_as_a_task_and_still_looks_like_a_stream() {
    let steps = Arc::new(Semaphore::new(0));
    let addr = task_server(Arc::default(), steps.clone()).await;
    let client = stateless(addr, None).await;

    // The server made a task (the tool was pending at its first poll); the
    // client polls it, and each of the tool's progress messages comes as a
    // progress item — the next step goes only once the last was seen —
    // then the result.
    // The call opens with the first step's progress.
    let toolbox = client.toolbox().await.unwrap();
    steps.add_permits(1);
    let mut stream = toolbox
        .oneshot(ToolRequest::new("report", "{}"))
        .await
        .unwrap();
    let mut messages = Vec::new();
    let mut rest = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the task goes on")
    {
        match item {
            Ok(ToolOutput::Progress(p)) => {
                messages.push(p.message.unwrap_or_default());
                steps.add_permits(1);
            }
            other => rest.push(other),
        }
    }
    assert_eq!(messages, ["1/3: step 1", "2/3: step 2", "3/3: step 3"]);
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].as_ref().unwrap().as_text(), Some("all steps done"));

    // A tool that answers at once answers without a task.
    assert_eq!(call(&client, "quick", "{}").await.into_text(), "at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_task_stream_cancels_the_task_and_drops_the_tool() {
    let dropped = Arc::new(Notify::new());
    let addr = task_server(dropped.clone(), Arc::new(Semaphore::new(0))).await;
    let client = stateless(addr, None).await;
    let toolbox = client.toolbox().await.unwrap();
    let mut stream = toolbox
        .oneshot(ToolRequest::new("forever", "{}"))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the task's first status");
    assert!(
        matches!(first, Some(Ok(ToolOutput::Progress(_)))),
        "{first:?}"
    );
    drop(stream);
    // `tasks/cancel` went out; the server dropped the tool's stream.
    tokio::time::timeout(Duration::from_secs(10), dropped.notified())
        .await
        .expect("the tool was not dropped after the task stream was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_asks_for_input_and_the_client_answers_with_tasks_update() {
    let addr = task_server(Arc::default(), Arc::new(Semaphore::new(0))).await;
    let person = Person::new(true);
    let client = stateless(addr, Some(person.clone())).await;
    let text = call(&client, "careful", "{}").await.into_text();
    assert!(text.starts_with("confirmed=true"), "{text}");
    assert!(text.contains("task"), "{text}");
    assert_eq!(person.asked.load(Ordering::SeqCst), 1);
}

/// Prompts, from an rmcp handler next to the toolbox.
#[derive(Clone)]
struct Prompts;

impl ServerHandler for Prompts {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_prompts().build())
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greeting",
            Some("Says hello"),
            None,
        )]))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_about_tools_goes_to_the_handler() {
    let server = McpServer::new(drop_table()).with_handler(Prompts);
    let addr = serve_http(server).await;
    let client = McpClient::connect_http(&format!("http://{addr}/mcp"))
        .await
        .unwrap();
    let info = client.peer().peer_info().unwrap();
    assert!(info.capabilities.prompts.is_some());
    assert!(info.capabilities.tools.is_some());
    let prompts = client.peer().list_prompts(None).await.unwrap();
    assert_eq!(prompts.prompts[0].name, "greeting");
    // And the tools are still the toolbox's.
    assert_eq!(client.tools().await.unwrap().len(), 1);
    // A method neither serves: method not found.
    let err = client.peer().list_resources(None).await.unwrap_err();
    assert!(
        format!("{err}").contains("-32601")
            || format!("{err:?}").contains("METHOD_NOT_FOUND")
            || format!("{err:?}").contains("32601"),
        "{err:?}"
    );
}

/// A raw rmcp client that declares the tasks extension and records the
/// notifications a session gets while its task runs.
#[derive(Clone, Default)]
struct Watching {
    statuses: Arc<std::sync::Mutex<Vec<String>>>,
    progress: Arc<AtomicUsize>,
    /// Notified on every notification.
    completed: Arc<Notify>,
}

impl ClientHandler for Watching {
    fn get_info(&self) -> ClientConfig {
        let caps = ClientCapabilities::builder().enable_tasks().build();
        ClientConfig::new(caps, Implementation::new("watching", "1.0"))
    }

    async fn on_task_status(
        &self,
        params: toolstack::mcp::rmcp::model::TaskStatusNotificationParams,
        _: toolstack::mcp::rmcp::service::NotificationContext<RoleClient>,
    ) {
        let status = serde_json::to_value(params.task.status()).unwrap();
        let status = status.as_str().unwrap_or_default().to_owned();
        self.statuses.lock().unwrap().push(status);
        self.completed.notify_one();
    }

    async fn on_progress(
        &self,
        _: toolstack::mcp::rmcp::model::ProgressNotificationParam,
        _: toolstack::mcp::rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::SeqCst);
        self.completed.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_hears_of_its_task_as_it_runs() {
    use toolstack::mcp::rmcp::model::{ProgressToken, RequestParamsMeta};
    use toolstack::mcp::rmcp::ServiceExt as _;
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = McpServer::new(task_tools(Arc::default(), Arc::new(Semaphore::new(3))))
        .task_support("report", TaskSupport::Optional);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let watching = Watching::default();
    let client = watching.clone().serve(client_io).await.unwrap();
    let mut params = CallToolRequestParams::new("report");
    params.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let created = client.peer().call_tool_once(params).await.unwrap();
    let CallToolResponse::Task(created) = created else {
        panic!("{created:?}")
    };
    // Three progress reports and three status changes while it ran, then
    // its end — without polling.
    // rmcp handles each notification in a task of its own: wait until all
    // have been seen, in whatever order.
    let all_seen = || {
        let statuses = watching.statuses.lock().unwrap();
        statuses.iter().any(|s| s == "completed")
            && statuses.iter().filter(|s| *s == "working").count() >= 3
            && watching.progress.load(Ordering::SeqCst) == 3
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while !all_seen() {
            watching.completed.notified().await;
        }
    })
    .await
    .expect("every notification of the task");
    let statuses = watching.statuses.lock().unwrap().clone();
    assert_eq!(
        statuses.iter().filter(|s| *s == "completed").count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().filter(|s| *s == "working").count() >= 3,
        "{statuses:?}"
    );
    assert_eq!(watching.progress.load(Ordering::SeqCst), 3);
    // The end is told as the task ends; rmcp records it once the task's
    // future has returned, a moment later: `tasks/get` shows it then.
    let recorded = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let got = client
                .peer()
                .get_task(toolstack::mcp::rmcp::model::GetTaskParams::new(
                    created.task.task_id.clone(),
                ))
                .await
                .unwrap();
            let status = serde_json::to_value(got.task.status()).unwrap();
            if status != "working" {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the task's end recorded");
    assert_eq!(recorded, "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_asks_for_too_many_inputs_at_once_gets_an_error_not_prompts() {
    let many = Toolbox::new().tool(tool::from_fn_with_context(
        "many",
        |_: NoArgs, ctx: ToolContext| async move {
            let input = input(&ctx)?;
            let asks = (0..65).map(|_| input.confirm("again?"));
            futures_util::future::try_join_all(asks).await?;
            Ok::<_, ToolError>("never")
        },
    ));
    let addr = serve_http(McpServer::new(many)).await;
    let person = Person::new(true);
    let client = stateless(addr, Some(person.clone())).await;
    let err = call(&client, "many", "{}").await.error.expect("refused");
    assert!(err.message().contains("asked for 65 inputs"), "{err}");
    assert_eq!(person.asked.load(Ordering::SeqCst), 0);
}
