//! The task scheme of MCP 2025-11-25, as a 1.x client speaks it on the
//! wire: `capabilities.tasks`, each tool's `execution.taskSupport`, a
//! `task` in `tools/call`, `tasks/get` (the task's fields flat),
//! `tasks/result` (the call's result, tied to its task), `tasks/cancel` —
//! over streamable HTTP and over a byte stream (`serve_io`). The official
//! TypeScript clients drive the same in `tests/mcp_interop.rs`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::{McpServer, TaskSupport};
use toolstack::{tool, Progress, ToolContext, ToolError, Toolbox};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// Counts the drops of a tool's call that never ends by itself.
struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn server(dropped: Arc<AtomicUsize>) -> McpServer {
    let toolbox = Toolbox::new()
        .tool(tool::from_fn("job", |_: NoArgs| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, ToolError>("job done")
        }))
        .tool(tool::from_fn_with_context(
            "forever",
            move |_: NoArgs, ctx: ToolContext| {
                let guard = Dropped(dropped.clone());
                async move {
                    let _guard = guard;
                    ctx.report(Progress::new(1.0).message("started"));
                    futures_util::future::pending::<()>().await;
                    Ok::<_, ToolError>("never")
                }
            },
        ))
        .tool(tool::from_fn("plain", |_: NoArgs| async {
            Ok::<_, ToolError>("plain answer")
        }))
        .tool(tool::from_fn("broken", |_: NoArgs| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err::<String, _>(ToolError::failed("it broke"))
        }))
        .tool(tool::from_fn_with_context(
            "ask",
            |_: NoArgs, ctx: ToolContext| async move {
                let input = ctx
                    .extensions()
                    .get::<toolstack::mcp::ClientInput>()
                    .cloned()
                    .ok_or_else(|| ToolError::failed("no client input"))?;
                let sure = input.confirm("Go on?").await?;
                Ok::<_, ToolError>(if sure { "went on" } else { "stopped" })
            },
        ))
        .tool(tool::from_fn("panics", |_: NoArgs| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if true {
                panic!("the tool panics on purpose");
            }
            Ok::<_, ToolError>("unreachable")
        }));
    McpServer::new(toolbox)
        .task_support("job", TaskSupport::Required)
        .task_support("forever", TaskSupport::Optional)
        .task_support("broken", TaskSupport::Optional)
        .task_support("panics", TaskSupport::Optional)
        .task_support("ask", TaskSupport::Optional)
        .task_poll_interval(Duration::from_millis(100))
}

async fn http_server(dropped: Arc<AtomicUsize>) -> SocketAddr {
    let app = axum::Router::new().nest_service(
        "/mcp",
        server(dropped).into_http_service(StreamableHttpServerConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A session over raw HTTP, as a client of `revision` opens it.
struct Session {
    http: reqwest::Client,
    url: String,
    id: String,
    revision: &'static str,
    next: u64,
    init: Value,
}

impl Session {
    async fn open(addr: SocketAddr, revision: &'static str) -> Session {
        Session::open_with(addr, revision, json!({})).await
    }

    async fn open_with(addr: SocketAddr, revision: &'static str, capabilities: Value) -> Session {
        let http = reqwest::Client::new();
        let url = format!("http://{addr}/mcp");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": revision, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}});
        let response = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let init = message(&response.text().await.unwrap());
        let mut session = Session {
            http,
            url,
            id,
            revision,
            next: 1,
            init,
        };
        session
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        session
    }

    async fn send(&mut self, body: Value) -> String {
        self.http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", self.revision)
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A request's answer: its `result` or its `error`.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        message(&self.send(body).await)
    }
}

/// The JSON-RPC answer in a response body (JSON, or SSE events).
fn message(body: &str) -> Value {
    let answer = |value: &Value| value.get("result").is_some() || value.get("error").is_some();
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return value;
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(answer)
        .unwrap_or_else(|| panic!("no answer in {body}"))
}

fn result(answer: &Value) -> &Value {
    answer
        .get("result")
        .unwrap_or_else(|| panic!("an error: {answer}"))
}

fn error(answer: &Value) -> &Value {
    answer
        .get("error")
        .unwrap_or_else(|| panic!("a result: {answer}"))
}

/// `answer` is the error `code` whose message says `words`.
fn refused_with(answer: &Value, code: i64, words: &str) {
    let err = error(answer);
    assert_eq!(err["code"], code, "{answer}");
    let message = err["message"].as_str().unwrap_or_default();
    assert!(message.contains(words), "{answer}");
}

async fn status(session: &mut Session, id: &str) -> Value {
    let got = session.request("tasks/get", json!({"taskId": id})).await;
    result(&got).clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_session_is_told_of_tasks_and_an_older_one_is_not() {
    let addr = http_server(Arc::default()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let caps = &result(&session.init)["capabilities"];
    assert_eq!(
        caps["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{caps}"
    );
    let list = session.request("tools/list", json!({})).await;
    let tools = result(&list)["tools"].as_array().unwrap().clone();
    let support = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"]["taskSupport"].clone())
            .unwrap()
    };
    assert_eq!(support("job"), "required");
    assert_eq!(support("forever"), "optional");
    assert_eq!(support("plain"), Value::Null);

    // 2025-06-18 has no tasks.
    let mut older = Session::open(addr, "2025-06-18").await;
    assert!(result(&older.init)["capabilities"].get("tasks").is_none());
    let list = older.request("tools/list", json!({})).await;
    assert!(result(&list)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.get("execution").is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_made_polled_and_its_result_read() {
    let addr = http_server(Arc::default()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let created = session
        .request(
            "tools/call",
            json!({"name": "job", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let task = &result(&created)["task"];
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(task["status"], "working", "{created}");
    // The revision's own shape: `ttl` (the server's: it keeps a task that
    // long, and would end a tool at a shorter one), `pollInterval`, no
    // `resultType`.
    assert_eq!(task["ttl"], 300_000);
    assert_eq!(task["pollInterval"], 100);
    assert!(task.get("ttlMs").is_none() && result(&created).get("resultType").is_none());

    let got = status(&mut session, &id).await;
    assert_eq!(got["taskId"], id.as_str());
    assert!(["working", "completed"].contains(&got["status"].as_str().unwrap()));
    assert!(got.get("createdAt").is_some() && got.get("lastUpdatedAt").is_some());

    let answer = session.request("tasks/result", json!({"taskId": id})).await;
    let answer = result(&answer);
    assert_eq!(answer["content"][0]["text"], "job done", "{answer}");
    assert_eq!(
        answer["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert!(answer.get("resultType").is_none());
    assert_eq!(status(&mut session, &id).await["status"], "completed");

    // A tool's error fails the task (2025-11-25: "this includes cases
    // where the tool call result has `isError` set to true"), saying what
    // the tool said; its result is the error result.
    let created = session
        .request("tools/call", json!({"name": "broken", "task": {}}))
        .await;
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = session.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result(&answer)["isError"], true);
    assert!(result(&answer)["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("it broke"));
    let got = status(&mut session, &id).await;
    assert_eq!(got["status"], "failed", "{got}");
    assert!(
        got["statusMessage"].as_str().unwrap().contains("it broke"),
        "{got}"
    );

    // A `ttl` of 0 does not end the tool: the server keeps its own.
    let created = session
        .request("tools/call", json!({"name": "job", "task": {"ttl": 0}}))
        .await;
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = session.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        result(&answer)["content"][0]["text"],
        "job done",
        "{answer}"
    );

    // A panic is a failure of the server: the task `failed`, saying why,
    // and its result the JSON-RPC error.
    let created = session
        .request("tools/call", json!({"name": "panics", "task": {}}))
        .await;
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = session.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(error(&answer)["code"], -32603, "{answer}");
    // Its end is kept before `tasks/result` answers: no wait.
    let got = status(&mut session, &id).await;
    assert_eq!(got["status"], "failed", "{got}");
    assert!(
        got["statusMessage"].as_str().unwrap().contains("panic"),
        "{got}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_kind_of_call_is_refused_with_what_to_do() {
    let addr = http_server(Arc::default()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    // A tool that requires a task, called without one.
    let refused = session
        .request("tools/call", json!({"name": "job", "arguments": {}}))
        .await;
    refused_with(&refused, -32601, "requires task augmentation");
    // A tool that does not run as a task, asked for one.
    let refused = session
        .request("tools/call", json!({"name": "plain", "task": {}}))
        .await;
    refused_with(&refused, -32601, "call it without `task`");
    // An unknown tool stays an unknown tool.
    let refused = session
        .request("tools/call", json!({"name": "nope", "task": {}}))
        .await;
    assert_eq!(error(&refused)["code"], -32602, "{refused}");
    // An optional tool without a task just answers.
    let plain = session
        .request("tools/call", json!({"name": "broken"}))
        .await;
    assert_eq!(result(&plain)["isError"], true);
    // An unknown task.
    let refused = session
        .request("tasks/get", json!({"taskId": "no-such-task"}))
        .await;
    assert_eq!(error(&refused)["code"], -32602, "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_drops_its_tool_and_only_its_session_sees_it() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let addr = http_server(dropped.clone()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let created = session
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(status(&mut session, &id).await["status"], "working");

    // Another session cannot see it, nor cancel it.
    let mut other = Session::open(addr, "2025-11-25").await;
    for method in ["tasks/get", "tasks/cancel", "tasks/result"] {
        let refused = other.request(method, json!({"taskId": id})).await;
        assert_eq!(error(&refused)["code"], -32602, "{method}: {refused}");
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 0);

    let cancelled = session.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(result(&cancelled)["status"], "cancelled", "{cancelled}");
    assert_eq!(result(&cancelled)["taskId"], id.as_str());
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the tool was not dropped"
    );
    let got = status(&mut session, &id).await;
    assert_eq!(got["status"], "cancelled");
    assert!(
        got["statusMessage"].as_str().unwrap().contains("cancelled"),
        "{got}"
    );
    let again = session.request("tasks/cancel", json!({"taskId": id})).await;
    refused_with(&again, -32602, "already cancelled");
    let answer = session.request("tasks/result", json!({"taskId": id})).await;
    assert!(error(&answer)["message"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
}

/// One end of a byte stream, speaking newline-delimited JSON-RPC.
struct Wire<R, W> {
    lines: tokio::io::Lines<BufReader<R>>,
    write: W,
}

impl<R: tokio::io::AsyncRead + Unpin, W: tokio::io::AsyncWrite + Unpin> Wire<R, W> {
    async fn write(&mut self, text: &str) {
        self.write.write_all(text.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    /// Sends `message` and reads up to its answer.
    async fn ask(&mut self, message: Value) -> Value {
        self.write(&message.to_string()).await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
                .await
                .expect("an answer within 10 s")
                .unwrap()
                .expect("the stream is open");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == message["id"] {
                return value;
            }
        }
    }
}

/// The same over a byte stream (`serve_io`, as `serve_stdio` serves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_over_a_byte_stream() {
    let (client, server_end) = tokio::io::duplex(64 * 1024);
    let (read, write) = tokio::io::split(server_end);
    tokio::spawn(server(Arc::default()).serve_io(read, write));
    let (client_read, client_write) = tokio::io::split(client);
    let mut wire = Wire {
        lines: BufReader::new(client_read).lines(),
        write: client_write,
    };
    let init = wire
        .ask(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        )
        .await;
    assert!(
        result(&init)["capabilities"].get("tasks").is_some(),
        "{init}"
    );
    let created = wire
        .ask(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "job", "task": {"ttl": 1000}}}))
        .await;
    let id = result(&created)["task"]["taskId"].clone();
    assert_eq!(result(&created)["task"]["ttl"], 300_000);
    let answer = wire
        .ask(json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result",
            "params": {"taskId": id}}))
        .await;
    assert_eq!(result(&answer)["content"][0]["text"], "job done");
    // A line longer than the bound is dropped, and the stream goes on.
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(17 * 1024 * 1024)
    );
    wire.write(&long).await;
    let ping = wire
        .ask(json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}))
        .await;
    assert!(ping.get("result").is_some(), "{ping}");
}

/// The progress the tool reports while it runs as a task reaches the
/// session (its standalone stream, once the call has its answer), under
/// the call's progress token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_progress_reaches_its_session() {
    use futures_util::StreamExt;
    let addr = http_server(Arc::default()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let listen = session
        .http
        .get(&session.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", session.revision)
        .send()
        .await
        .unwrap();
    assert_eq!(listen.status(), 200);
    let mut events = listen.bytes_stream();
    session.next += 1;
    let body = json!({"jsonrpc": "2.0", "id": session.next, "method": "tools/call",
        "params": {"name": "forever", "task": {}, "_meta": {"progressToken": "p1"}}});
    let mut seen = session.send(body).await;
    assert!(seen.contains("\"task\""), "{seen}");
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while !(seen.contains("notifications/progress") && seen.contains("\"p1\"")) {
            let chunk = events.next().await.expect("the stream is open").unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(found.is_ok(), "no progress: {seen}");
    assert!(seen.contains("started"), "{seen}");
    // Tied to its task (2025-11-25: MUST).
    assert!(
        seen.contains("io.modelcontextprotocol/related-task"),
        "{seen}"
    );
}

/// A task whose tool asks the client: `input_required` while the question
/// waits, the elicitation on the session tied to the task, the answer
/// reaching the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_asks_shows_input_required_and_ties_its_question_to_itself() {
    use futures_util::StreamExt;
    let addr = http_server(Arc::default()).await;
    let mut session =
        Session::open_with(addr, "2025-11-25", json!({"elicitation": {"form": {}}})).await;
    let listen = session
        .http
        .get(&session.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", session.revision)
        .send()
        .await
        .unwrap();
    let mut events = listen.bytes_stream();
    session.next += 1;
    let call = json!({"jsonrpc": "2.0", "id": session.next, "method": "tools/call",
        "params": {"name": "ask", "task": {}}});
    let raw = session.send(call).await;
    let created = message(&raw);
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The question: on the call's own stream if it was still open, else on
    // the session's.
    let mut seen = raw.clone();
    let question = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(event) = seen
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m["method"] == "elicitation/create")
            {
                return event;
            }
            let chunk = events.next().await.expect("the stream is open").unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the question came: {seen}"));
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str(),
        "{question}"
    );
    assert_eq!(status(&mut session, &id).await["status"], "input_required");
    // The answer.
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}});
    session.send(answer).await;
    let done = session.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result(&done)["content"][0]["text"], "went on", "{done}");
}

/// A 2026-07-28 request, stateless: its revision, the client and its
/// capabilities (the tasks extension) in `_meta`, and the headers rmcp
/// checks.
async fn modern(addr: SocketAddr, method: &str, name: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let text = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    message(&text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extension_does_not_show_a_2025_11_25_task_and_ignores_a_task_member() {
    let addr = http_server(Arc::default()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let created = session
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    let id = result(&created)["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    for method in ["tasks/get", "tasks/cancel"] {
        let refused = modern(addr, method, &id, json!({"taskId": id})).await;
        assert_eq!(error(&refused)["code"], -32602, "{method}: {refused}");
    }
    assert_eq!(status(&mut session, &id).await["status"], "working");

    // A 2026-07-28 call with a `task` member: ignored, an ordinary call.
    let plain = modern(
        addr,
        "tools/call",
        "plain",
        json!({"name": "plain", "arguments": {}, "task": {"ttl": 1}}),
    )
    .await;
    assert_eq!(
        result(&plain)["content"][0]["text"],
        "plain answer",
        "{plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_cancels_its_tasks() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let addr = http_server(dropped.clone()).await;
    let mut session = Session::open(addr, "2025-11-25").await;
    let created = session
        .request("tools/call", json!({"name": "forever", "task": {}}))
        .await;
    assert!(result(&created)["task"]["taskId"].is_string());
    let closed = session
        .http
        .delete(&session.url)
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", session.revision)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    // The session's end reaches the task on its own tasks: a generous
    // bound, for a busy machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while dropped.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed session's task still runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
