//! toolstack's MCP client against the official servers, installed from npm
//! by `interop/` (`npm ci` there; `.ci/run` does it):
//! `@modelcontextprotocol/server-filesystem` and
//! `@modelcontextprotocol/server-everything` 2026.8.31 (TypeScript SDK
//! 1.32.2, revision 2025-11-25), over stdio and streamable HTTP; a server
//! built with the v2 server SDK (`@modelcontextprotocol/server` 2.4.0,
//! `interop/ts-server.mjs`), with sessions and stateless (2026-07-28); and
//! the official TypeScript clients against toolstack's server.
//!
//! Without `interop/node_modules` the tests say SKIPPED loudly (on stderr,
//! where `cargo test` shows it) and pass, unless `TOOLSTACK_REQUIRE_INTEROP`
//! is set, as in CI. Each check prints one line; the bytes the model reads
//! of a file, before and after the client gave it each result once, are
//! printed too (`cargo test --features mcp --test mcp_interop --
//! --nocapture` shows them; docs/mcp.md has the figures).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use toolstack::mcp::rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, UrlElicitationCapability,
};
use toolstack::mcp::rmcp::service::RequestContext;
use toolstack::mcp::rmcp::{ClientHandler, ErrorData, RoleClient};
use toolstack::mcp::McpClient;
use toolstack::{ToolRequest, ToolResult, Toolbox};
use tower::ServiceExt;

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The installed package's directory, or `None` (SKIPPED) when
/// `interop/` is not installed.
fn package(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("interop/node_modules/@modelcontextprotocol")
        .join(name);
    if dir.join("package.json").exists() {
        return Some(dir);
    }
    let why = format!("{} is missing (run `npm ci` in interop/)", dir.display());
    assert!(
        std::env::var_os("TOOLSTACK_REQUIRE_INTEROP").is_none(),
        "TOOLSTACK_REQUIRE_INTEROP is set but {why}"
    );
    say(&format!(
        "!! SKIPPED: the MCP interop test did NOT run: {why}"
    ));
    None
}

/// `node` running a server package's `dist/index.js`.
fn node(package: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(package.join("dist/index.js"))
        .stderr(std::process::Stdio::null());
    command
}

/// A user who opens every URL and accepts every form, remembering what
/// was asked.
#[derive(Clone, Default)]
struct Accepts(Arc<Mutex<Vec<String>>>);

impl ClientHandler for Accepts {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::default())
                .with_url(UrlElicitationCapability::new()),
        );
        ClientConfig::new(caps, Implementation::new("toolstack-interop", "1.0"))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asked = match &params {
            ElicitRequestParams::UrlElicitationParams { url, .. } => format!("url {url}"),
            ElicitRequestParams::FormElicitationParams { message, .. } => format!("form {message}"),
            other => format!("other {other:?}"),
        };
        self.0.lock().unwrap().push(asked);
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

async fn call(toolbox: &Toolbox, name: &str, arguments: serde_json::Value) -> (ToolResult, usize) {
    let request = ToolRequest::new(name.to_owned(), arguments.to_string());
    let opened = tokio::time::timeout(Duration::from_secs(30), toolbox.clone().oneshot(request))
        .await
        .expect("the call did not open in 30 s");
    // A call that failed before answering anything: its error is its result.
    let stream = match opened {
        Ok(stream) => stream,
        Err(err) => return (ToolResult::from_error(err), 0),
    };
    let items: Vec<_> = tokio::time::timeout(Duration::from_secs(30), stream.collect::<Vec<_>>())
        .await
        .expect("the call did not end in 30 s");
    let progress = items
        .iter()
        .filter(|i| i.as_ref().is_ok_and(|o| o.is_progress()))
        .count();
    let mut result = ToolResult::default();
    for item in items {
        match item {
            Ok(output) if output.is_progress() => {}
            Ok(output) => result.push(output),
            Err(err) => result.push_error(err),
        }
    }
    (result, progress)
}

/// What the model read of a result before the client gave it once: every
/// content block's text, and `structuredContent` as JSON text too.
fn read_before(result: &ToolResult) -> usize {
    let structured = result
        .content
        .iter()
        .filter(|o| matches!(o, toolstack::ToolOutput::Structured { .. }))
        .filter_map(|o| o.as_json())
        .map(|json| json.as_str().len() + 1)
        .sum::<usize>();
    result.text().len() + structured
}

#[tokio::test]
async fn server_filesystem_over_stdio_each_file_read_once() {
    let Some(entry) = package("server-filesystem") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("toolstack-interop-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    // 21,250 bytes of text, and a 1×1 PNG.
    let text: String = (0..850)
        .map(|n| format!("line {n:>6} of the file.\n"))
        .collect();
    assert_eq!(text.len(), 21_250);
    std::fs::write(dir.join("notes.txt"), &text).unwrap();
    let png = [
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x49, 0x48, 0x44, 0x52, 0,
        0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0x0d, 0x49, 0x44,
        0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0, 0x05, 0, 0x01, 0xff, 0x89,
        0x99, 0x3d, 0x1d, 0, 0, 0, 0, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    std::fs::write(dir.join("dot.png"), png).unwrap();

    let mut command = node(&entry);
    command.arg(&dir);
    let client = McpClient::connect_stdio(command).await.unwrap();
    let toolbox = client.toolbox().await.unwrap();
    say(&format!(
        "ok: server-filesystem lists {} tools",
        toolbox.len()
    ));

    let path = dir.join("notes.txt").display().to_string();
    let (file, _) = call(&toolbox, "read_text_file", json!({"path": path})).await;
    assert!(!file.is_error, "{file:?}");
    assert_eq!(file.text(), text, "the model reads the file, once");
    assert_eq!(
        file.structured_content().unwrap()["content"],
        json!(text),
        "programs still get structuredContent"
    );
    say(&format!(
        "ok: read_text_file of a {}-byte file: the model reads {} bytes (it read {} before)",
        text.len(),
        file.text().len(),
        read_before(&file)
    ));

    let path = dir.join("dot.png").display().to_string();
    let (image, _) = call(&toolbox, "read_media_file", json!({"path": path})).await;
    assert!(!image.is_error, "{image:?}");
    assert_eq!(
        image.text(),
        "image/png",
        "the image, not its base64 as text"
    );
    say(&format!(
        "ok: read_media_file of a {}-byte PNG: the model reads {} bytes of text beside the image (it read {} before)",
        png.len(),
        image.text().len(),
        read_before(&image)
    ));

    // Bad input: a path outside the allowed directory.
    let (outside, _) = call(&toolbox, "read_text_file", json!({"path": "/etc/passwd"})).await;
    assert!(outside.is_error, "{outside:?}");
    say("ok: a path outside the allowed directory is an error result");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn everything_checks(client: McpClient, how: &str, asked: &Accepts) {
    let toolbox = client.toolbox().await.unwrap();
    let names: Vec<&str> = toolbox.infos().map(|t| t.name()).collect();
    for name in [
        "echo",
        "get-structured-content",
        "trigger-long-running-operation",
        "trigger-url-elicitation",
    ] {
        assert!(names.contains(&name), "{how}: no `{name}` in {names:?}");
    }
    say(&format!(
        "ok: server-everything ({how}) lists {} tools",
        names.len()
    ));

    let (echo, _) = call(&toolbox, "echo", json!({"message": "hello"})).await;
    assert!(echo.text().contains("hello"), "{echo:?}");
    say(&format!("ok: server-everything ({how}) echo"));

    let (weather, _) = call(
        &toolbox,
        "get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    assert!(!weather.is_error, "{weather:?}");
    let structured = weather.structured_content().unwrap();
    assert!(structured.get("temperature").is_some(), "{structured}");
    assert_eq!(
        weather.text().matches("temperature").count(),
        1,
        "the model reads it once: {}",
        weather.text()
    );
    say(&format!(
        "ok: server-everything ({how}) structured content, read once"
    ));

    let (long, progress) = call(
        &toolbox,
        "trigger-long-running-operation",
        json!({"duration": 1, "steps": 3}),
    )
    .await;
    assert!(!long.is_error, "{long:?}");
    assert_eq!(progress, 3, "a progress item per step");
    say(&format!("ok: server-everything ({how}) progress, 3 steps"));

    // The error path: -32042 first, the URL opened, the call made again.
    let (url, _) = call(
        &toolbox,
        "trigger-url-elicitation",
        json!({"url": "https://example.com/authorize", "errorPath": true}),
    )
    .await;
    assert!(!url.is_error, "{url:?}");
    let opened = asked.0.lock().unwrap().clone();
    assert!(
        opened.contains(&"url https://modelcontextprotocol.io".to_owned())
            && opened.contains(&"url https://example.com/authorize".to_owned()),
        "{opened:?}"
    );
    say(&format!(
        "ok: server-everything ({how}) URL elicitation required (-32042): opened, then called again"
    ));

    // A tool that runs only as a task (2025-11-25 scheme): its status as
    // progress, a clarification asked of the user on the way, its report.
    let (research, progress) = call(
        &toolbox,
        "simulate-research-query",
        json!({"topic": "rust", "ambiguous": true}),
    )
    .await;
    assert!(!research.is_error, "{research:?}");
    assert!(
        research.text().contains("# Research Report: rust"),
        "{}",
        research.text()
    );
    // How many status messages a poll sees depends on the server's pace.
    assert!(progress >= 1, "status messages as progress: {progress}");
    assert!(
        asked
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.starts_with("form ")),
        "the clarification was asked"
    );
    say(&format!(
        "ok: server-everything ({how}) a task-required tool (2025-11-25 tasks): {progress} status reports, a clarification, the report"
    ));

    // Bad input and an unknown tool: errors, and the server goes on.
    let (bad, _) = call(&toolbox, "echo", json!({"message": 7})).await;
    assert!(bad.is_error, "{bad:?}");
    let unknown = toolbox
        .clone()
        .oneshot(ToolRequest::new("no-such-tool", "{}"))
        .await;
    assert!(unknown.is_err());
    let (echo, _) = call(&toolbox, "echo", json!({"message": "still here"})).await;
    assert!(echo.text().contains("still here"));
    say(&format!(
        "ok: server-everything ({how}) bad arguments and an unknown tool, then goes on"
    ));
}

#[tokio::test]
async fn server_everything_over_stdio() {
    let Some(entry) = package("server-everything") else {
        return;
    };
    let mut command = node(&entry);
    command.arg("stdio");
    let asked = Accepts::default();
    let client = McpClient::builder()
        .handler(asked.clone())
        .connect_stdio(command)
        .await
        .unwrap();
    everything_checks(client, "stdio", &asked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http_with_a_session_and_stateless() {
    let Some(entry) = package("server-everything") else {
        return;
    };
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut server = node(&entry);
    server
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    let _server = server.spawn().unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    // Until it listens.
    let mut ready = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "server-everything did not listen on {port}");

    let asked = Accepts::default();
    let client = McpClient::builder()
        .handler(asked.clone())
        .connect_http(&url)
        .await
        .unwrap();
    everything_checks(client, "streamable HTTP, a session", &asked).await;

    // Stateless: its server/discover refused (revision 2025-11-25), the
    // client connects with initialize.
    let asked = Accepts::default();
    let client = McpClient::builder()
        .handler(asked.clone())
        .stateless()
        .connect_http(&url)
        .await
        .unwrap();
    everything_checks(client, "streamable HTTP, stateless falling back", &asked).await;
}

/// A user who answers every form with "Ada" in each field.
#[derive(Clone, Default)]
struct Ada(Arc<Mutex<Vec<String>>>);

impl ClientHandler for Ada {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(caps, Implementation::new("toolstack-interop", "1.0"))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = params
        else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        self.0.lock().unwrap().push(message);
        let schema = serde_json::to_value(&requested_schema).unwrap();
        let content: serde_json::Map<String, serde_json::Value> = schema["properties"]
            .as_object()
            .map(|fields| fields.keys().map(|k| (k.clone(), json!("Ada"))).collect())
            .unwrap_or_default();
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(serde_json::Value::Object(content)))
    }
}

/// toolstack's client against a server of the v2 TypeScript server SDK
/// (`interop/ts-server.mjs`): with a session (it negotiates 2025-11-25)
/// and stateless (2026-07-28: `server/discover`, the elicitation an
/// input-required round) — tools listed, structured content read once,
/// progress, cancellation reaching the server, an elicitation answered,
/// a tool error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolstacks_client_against_a_server_of_the_v2_typescript_sdk() {
    if package("server").is_none() || package("node").is_none() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/ts-server.mjs");
    for mode in ["stateful", "stateless"] {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let mut server = tokio::process::Command::new("node")
            .arg(&script)
            .arg(mode)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // What the server says on stderr: "listening on …", and a
        // cancelled count.
        let said = Arc::new(Mutex::new(String::new()));
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            server.stderr.take().unwrap(),
        ));
        let heard = said.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                heard.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let mut ready = false;
        for _ in 0..100 {
            if said.lock().unwrap().contains("listening on") {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            ready,
            "ts-server.mjs {mode} did not listen: {}",
            said.lock().unwrap()
        );
        let url = format!("http://127.0.0.1:{port}/mcp");
        let how = format!("ts-sdk-v2 server ({mode})");

        let asked = Ada::default();
        let builder = McpClient::builder().handler(asked.clone());
        let builder = if mode == "stateless" {
            builder.stateless()
        } else {
            builder
        };
        let client = builder.connect_http(&url).await.unwrap();
        let revision = client
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.as_str().to_owned())
            .unwrap_or_default();
        let expected = if mode == "stateless" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(revision, expected, "{how}");
        let toolbox = client.toolbox().await.unwrap();
        let mut names: Vec<&str> = toolbox.infos().map(|t| t.name()).collect();
        names.sort();
        assert_eq!(names, ["ask_name", "count", "echo", "fail"], "{how}");
        say(&format!("ok: {how} revision {revision}, lists {names:?}"));

        let (echo, _) = call(&toolbox, "echo", json!({"text": "hi"})).await;
        assert_eq!(echo.text(), "echo: hi", "{how}: {echo:?}");
        assert_eq!(echo.structured_content(), Some(json!({"echoed": "hi"})));
        say(&format!("ok: {how} echo, its structured content apart"));

        let (count, progress) = call(&toolbox, "count", json!({"to": 4})).await;
        assert_eq!(count.text(), "counted to 4", "{how}: {count:?}");
        assert_eq!(progress, 4, "{how}: a progress item per step");
        say(&format!("ok: {how} progress, 4 steps"));

        // Dropped after two reports: the server hears of it.
        let stream = toolbox
            .clone()
            .oneshot(ToolRequest::new("count", json!({"to": 200}).to_string()))
            .await
            .unwrap();
        let mut stream = Box::pin(stream);
        let mut reports = 0;
        while let Some(item) = stream.next().await {
            if item.unwrap().is_progress() {
                reports += 1;
                if reports == 2 {
                    break;
                }
            }
        }
        drop(stream);
        let mut heard = false;
        for _ in 0..400 {
            if said.lock().unwrap().contains("count cancelled") {
                heard = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(heard, "{how}: the server went on: {}", said.lock().unwrap());
        say(&format!(
            "ok: {how} a dropped call is cancelled at the server"
        ));

        let (hello, _) = call(&toolbox, "ask_name", json!({})).await;
        assert_eq!(hello.text(), "Hello, Ada", "{how}: {hello:?}");
        assert_eq!(asked.0.lock().unwrap().len(), 1);
        say(&format!(
            "ok: {how} an elicitation answered: {}",
            hello.text()
        ));

        let (fail, _) = call(&toolbox, "fail", json!({})).await;
        assert!(fail.is_error, "{how}: {fail:?}");
        assert!(
            fail.text().contains("it failed on purpose"),
            "{how}: {fail:?}"
        );
        let (echo, _) = call(&toolbox, "echo", json!({"text": "still here"})).await;
        assert_eq!(echo.text(), "echo: still here");
        say(&format!("ok: {how} a tool error, then goes on"));
        drop(server);
    }
}

/// The official TypeScript client, 1.x (`@modelcontextprotocol/sdk`
/// 1.32.2) and 2.x (`@modelcontextprotocol/client` 2.4.0, on a session and
/// in the stateless 2026-07-28 era), driving toolstack's server (the
/// `mcp_server` example) over streamable HTTP:
/// `interop/ts-client.mjs` prints a line per check — tools per caller,
/// a call, progress, cancellation, bad arguments, an unknown tool, a
/// hidden tool; and, against the conformance harness's server, the
/// client's answer to an elicitation — and fails on any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_typescript_clients_drive_toolstacks_server() {
    if package("sdk").is_none() || package("client").is_none() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/ts-client.mjs");
    let (_server, url) = serve_example("mcp_server").await;
    let (_harness, elicitation_url) = serve_example("mcp_conformance").await;
    for sdk in ["v1", "v2", "v2-stateless"] {
        run_node(&script, &[sdk, &url, &elicitation_url], 9).await;
    }
}

/// The official TypeScript clients calling toolstack's tools as tasks, in
/// both task schemes, against the conformance harness's server:
/// `interop/ts-tasks.mjs` — the 1.x SDK's own task API on a 2025-11-25
/// session; the 2.x client with `@modelcontextprotocol/ext-tasks` in the
/// 2026-07-28 era (the tasks extension) and on a 2025-11-25 session. Each
/// makes, polls, reads, cancels, and answers a task's questions; a line per
/// check, failing on any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_typescript_clients_run_tasks_of_both_schemes() {
    if package("sdk").is_none() || package("client").is_none() || package("ext-tasks").is_none() {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/ts-tasks.mjs");
    let (_harness, url) = serve_example("mcp_conformance").await;
    for mode in ["v1", "v2", "v2-legacy"] {
        run_node(&script, &[mode, &url], 7).await;
    }
}

/// Runs `node script args…` (at most 120 s), prints what it printed, and
/// fails unless it succeeded with at least `checks` `ok:` lines.
async fn run_node(script: &std::path::Path, args: &[&str], checks: usize) {
    let run = tokio::process::Command::new("node")
        .arg(script)
        .args(args)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the TypeScript client did not end in 120 s")
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    for line in printed.lines() {
        say(line);
    }
    assert!(
        out.status.success(),
        "the TypeScript client ({args:?}) failed:\n{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.lines().filter(|l| l.starts_with("ok: ")).count() >= checks,
        "{printed}"
    );
}

/// An example's MCP server on a free port (`cargo test` builds the
/// examples next to the test binaries): the process, killed when dropped,
/// and its URL once it listens.
async fn serve_example(name: &str) -> (tokio::process::Child, String) {
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(binary.exists(), "{} is missing", binary.display());
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let child = tokio::process::Command::new(&binary)
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the {name} example did not listen on {port}");
}
