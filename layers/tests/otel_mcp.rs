//! The OpenTelemetry MCP conventions, end to end over streamable HTTP:
//! the client's and the server's `tools/call` and `tools/list` spans (name,
//! kind, attributes, status, the trace from caller to tool), the
//! handshake's on both ends, the server's `prompts/get` and
//! `resources/read` (served by the user's handler), and the
//! `mcp.client.operation.duration` / `mcp.server.operation.duration`
//! histograms (attributes, the recommended buckets), as
//! `otel::init_from_env` sends them over OTLP to the collector the
//! environment names — for a session (2025-11-25) and a stateless
//! 2026-07-28 client.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use toolstack::mcp::rmcp::model::{
    ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents, Role,
    ServerCapabilities, ServerConfig,
};
use toolstack::mcp::rmcp::service::RequestContext;
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use toolstack::mcp::rmcp::{RoleServer, ServerHandler};
use toolstack::mcp::{McpClient, McpServer, OPERATION_DURATION_BUCKETS};
use toolstack::{tool, ErrorKind, ToolError, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::otel;
use toolstack_layers::trace::TraceLayer;
use tower::ServiceExt as _;
use tracing::Instrument as _;

#[path = "support/otlp.rs"]
mod otlp;
use otlp::{Collector, HistogramPoint, Metrics, WireSpan};

/// `STATUS_CODE_ERROR` in OTLP.
const ERROR: i32 = 2;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// The methods that are not about tools: the prompt `greet` and the
/// resource `note://1`; any other is not found.
#[derive(Clone)]
struct Notes;

impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        match &*request.name {
            "greet" => {
                Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "hello")]).into())
            }
            other => Err(ErrorData::invalid_params(
                format!("no prompt {other}"),
                None,
            )),
        }
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResult::new(vec![ResourceContents::text("a note", request.uri)]).into())
    }
}

/// `add`, `fail` (an error result) and `flaky` (listed, then hidden when
/// `hidden` is set: a call of it is then an unknown tool, `-32602`),
/// traced inside the toolbox, with [`Notes`], served over streamable HTTP.
async fn serve(hidden: Arc<AtomicBool>) -> SocketAddr {
    let toolbox = Toolbox::new()
        .tool(tool::from_fn("add", |Add { a, b }| async move {
            Ok::<_, ToolError>(a + b)
        }))
        .tool(tool::from_fn("fail", |_: Add| async {
            Err::<i64, _>(ToolError::failed("no"))
        }))
        .tool(tool::from_fn("flaky", |_: Add| async {
            Ok::<_, ToolError>(0)
        }))
        .resolver(move |info: &toolstack::ToolInfo, _: &http::Extensions| {
            info.name() != "flaky" || !hidden.load(Ordering::SeqCst)
        })
        .layer(TraceLayer::new());
    let app = axum::Router::new().nest_service(
        "/mcp",
        McpServer::new(toolbox)
            .with_handler(Notes)
            .into_http_service(StreamableHttpServerConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn call(remote: &Toolbox, name: &'static str) -> ToolResult {
    match remote
        .clone()
        .oneshot(ToolRequest::new(name, r#"{"a":2,"b":3}"#))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        // Failed before answering anything.
        Err(err) => ToolResult::from_error(err),
    }
}

/// A session's calls (`add`, `fail`, then `flaky` once hidden) inside a
/// `session_turn` span, and a stateless client's `add` inside a
/// `stateless_turn` span.
async fn exercise() -> u16 {
    let hidden = Arc::new(AtomicBool::new(false));
    let addr = serve(hidden.clone()).await;
    let url = format!("http://{addr}/mcp");

    let session = McpClient::connect_http(&url).await.unwrap();
    let remote = session.toolbox().await.unwrap();
    async {
        assert_eq!(call(&remote, "add").await.into_text(), "5");
        assert!(call(&remote, "fail").await.is_error);
        hidden.store(true, Ordering::SeqCst);
        let unknown = call(&remote, "flaky").await;
        assert!(unknown.is_error);
        assert_eq!(unknown.error.map(|e| e.kind()), Some(ErrorKind::NotFound));
        // Through rmcp's own peer: the spans are the server's.
        let peer = session.peer();
        let prompt = peer.get_prompt(GetPromptRequestParams::new("greet")).await;
        assert_eq!(prompt.unwrap().messages.len(), 1);
        assert!(peer
            .get_prompt(GetPromptRequestParams::new("nope"))
            .await
            .is_err());
        let note = peer
            .read_resource(ReadResourceRequestParams::new("note://1"))
            .await;
        assert_eq!(note.unwrap().contents.len(), 1);
    }
    .instrument(tracing::info_span!("session_turn"))
    .await;

    let stateless = McpClient::builder()
        .stateless()
        .connect_http(&url)
        .await
        .unwrap();
    let remote = stateless.toolbox().await.unwrap();
    async { assert_eq!(call(&remote, "add").await.into_text(), "5") }
        .instrument(tracing::info_span!("stateless_turn"))
        .await;
    addr.port()
}

#[test]
fn mcp_spans_and_durations_reach_the_collector_as_the_conventions_say() {
    let collector = Collector::start();
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_SAMPLER",
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url);
    std::env::set_var("OTEL_SERVICE_NAME", "toolstack-mcp-test");
    let guard = otel::init_from_env()
        .unwrap()
        .expect("a collector is named");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = runtime.block_on(exercise());
    drop(runtime);
    // Sends what is queued and measured, then shuts down.
    drop(guard);

    let (traces, metrics): (Vec<_>, Vec<_>) = collector
        .requests
        .try_iter()
        .partition(|(path, _, _)| path == "/v1/traces");
    let spans: Vec<WireSpan> = traces
        .iter()
        .flat_map(|(_, _, body)| WireSpan::decode(body))
        .collect();
    check_spans(&spans, port);
    // Cumulative: the last export has every measurement.
    let (path, _, body) = metrics.last().expect("no metrics reached the collector");
    assert_eq!(path, "/v1/metrics");
    check_metrics(&Metrics::decode(body), port);
}

fn check_spans(spans: &[WireSpan], port: u16) {
    let find = |name: &str, kind: SpanKind, parent: &[u8]| {
        let found: Vec<&WireSpan> = spans
            .iter()
            .filter(|s| s.name == name && s.kind == kind && s.parent_span_id == parent)
            .collect();
        match found[..] {
            [span] => span,
            _ => panic!(
                "not one {kind:?} span {name} under {parent:?}: {:#?}",
                spans
                    .iter()
                    .map(|s| (&s.name, s.kind, &s.parent_span_id))
                    .collect::<Vec<_>>()
            ),
        }
    };
    let root = |name: &str| find(name, SpanKind::Internal, &[]);
    let session_turn = root("session_turn");
    let stateless_turn = root("stateless_turn");
    let port = port.to_string();

    // The client's spans: a child of the caller's, kind CLIENT.
    let client_add = find("tools/call add", SpanKind::Client, &session_turn.span_id);
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "add"),
        ("mcp.protocol.version", "2025-11-25"),
        ("network.transport", "tcp"),
        ("network.protocol.name", "http"),
        ("server.address", "127.0.0.1"),
        ("server.port", &port),
    ] {
        assert_eq!(client_add.attribute(key), Some(value), "client: {key}");
    }
    assert!(client_add.attribute("jsonrpc.request.id").is_some());
    assert_eq!(client_add.attribute("error.type"), None);
    assert_ne!(client_add.status.0, ERROR);

    // The server's: a child of the client's (across MCP), kind SERVER;
    // the tool's span under it.
    let server_add = find("tools/call add", SpanKind::Server, &client_add.span_id);
    assert_eq!(server_add.trace_id, session_turn.trace_id);
    for (key, value) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "add"),
        ("mcp.protocol.version", "2025-11-25"),
        ("network.transport", "tcp"),
        ("network.protocol.name", "http"),
        ("network.protocol.version", "1.1"),
    ] {
        assert_eq!(server_add.attribute(key), Some(value), "server: {key}");
    }
    // The same request on both ends.
    assert_eq!(
        server_add.attribute("jsonrpc.request.id"),
        client_add.attribute("jsonrpc.request.id")
    );
    // A session's request says which session.
    assert!(
        server_add
            .attribute("mcp.session.id")
            .is_some_and(|id| !id.is_empty()),
        "{server_add:?}"
    );
    let tool = find("execute_tool add", SpanKind::Internal, &server_add.span_id);
    assert_eq!(tool.trace_id, session_turn.trace_id);

    // An error result: `tool_error` and an error status on both ends.
    let client_fail = find("tools/call fail", SpanKind::Client, &session_turn.span_id);
    let server_fail = find("tools/call fail", SpanKind::Server, &client_fail.span_id);
    for span in [client_fail, server_fail] {
        assert_eq!(span.attribute("error.type"), Some("tool_error"), "{span:?}");
        assert_eq!(span.attribute("rpc.response.status_code"), None);
        assert_eq!(span.status.0, ERROR, "{span:?}");
    }

    // An unknown tool, `-32602`: an error of the client's, not the
    // server's (the caller's mistake).
    let client_unknown = find("tools/call flaky", SpanKind::Client, &session_turn.span_id);
    assert_eq!(
        client_unknown.attribute("rpc.response.status_code"),
        Some("-32602")
    );
    assert_eq!(client_unknown.attribute("error.type"), Some("-32602"));
    assert_eq!(client_unknown.status.0, ERROR);
    assert!(
        client_unknown.status.1.contains("flaky"),
        "the JSON-RPC error's message: {:?}",
        client_unknown.status
    );
    let server_unknown = find(
        "tools/call flaky",
        SpanKind::Server,
        &client_unknown.span_id,
    );
    assert_eq!(
        server_unknown.attribute("rpc.response.status_code"),
        Some("-32602")
    );
    assert_eq!(server_unknown.attribute("error.type"), None);
    assert_ne!(server_unknown.status.0, ERROR);

    // A stateless request (2026-07-28): no session id.
    let client_stateless = find("tools/call add", SpanKind::Client, &stateless_turn.span_id);
    let server_stateless = find(
        "tools/call add",
        SpanKind::Server,
        &client_stateless.span_id,
    );
    for span in [client_stateless, server_stateless] {
        assert_eq!(
            span.attribute("mcp.protocol.version"),
            Some("2026-07-28"),
            "{span:?}"
        );
        assert_eq!(span.attribute("mcp.session.id"), None, "{span:?}");
    }

    // The user's handler's methods, on the server: `prompts/get {name}`
    // with `gen_ai.prompt.name`, a failure with its status code; the
    // resource's URI as an attribute, not in the name.
    let by_name = |name: &str| -> Vec<&WireSpan> {
        spans
            .iter()
            .filter(|s| s.name == name && s.kind == SpanKind::Server)
            .collect()
    };
    let [greet] = by_name("prompts/get greet")[..] else {
        panic!("not one server span prompts/get greet: {spans:#?}")
    };
    for (key, value) in [
        ("mcp.method.name", "prompts/get"),
        ("gen_ai.prompt.name", "greet"),
        ("mcp.protocol.version", "2025-11-25"),
        ("network.transport", "tcp"),
    ] {
        assert_eq!(greet.attribute(key), Some(value), "prompts/get: {key}");
    }
    assert_eq!(greet.attribute("gen_ai.operation.name"), None);
    assert!(greet.attribute("mcp.session.id").is_some());
    assert!(greet.attribute("jsonrpc.request.id").is_some());
    assert_ne!(greet.status.0, ERROR);
    let [nope] = by_name("prompts/get nope")[..] else {
        panic!("not one server span prompts/get nope: {spans:#?}")
    };
    assert_eq!(nope.attribute("rpc.response.status_code"), Some("-32602"));
    // The caller's mistake: not the server's error.
    assert_eq!(nope.attribute("error.type"), None);
    let [read] = by_name("resources/read")[..] else {
        panic!("not one server span resources/read: {spans:#?}")
    };
    assert_eq!(read.attribute("mcp.method.name"), Some("resources/read"));
    assert_eq!(read.attribute("mcp.resource.uri"), Some("note://1"));

    // The handshake, on both ends: `initialize` for the session,
    // `server/discover` for the stateless client.
    for method in ["initialize", "server/discover"] {
        let ends: BTreeSet<i32> = spans
            .iter()
            .filter(|s| s.name == method)
            .inspect(|s| {
                assert_eq!(s.attribute("mcp.method.name"), Some(method), "{s:?}");
                assert_eq!(s.attribute("network.transport"), Some("tcp"), "{s:?}");
                assert_ne!(s.status.0, ERROR, "{s:?}");
            })
            .map(|s| s.kind as i32)
            .collect();
        assert_eq!(
            ends,
            [SpanKind::Server as i32, SpanKind::Client as i32].into(),
            "{method}"
        );
    }

    // `tools/list`, on both ends, with no tool and no operation name.
    let lists: Vec<&WireSpan> = spans.iter().filter(|s| s.name == "tools/list").collect();
    let kinds: BTreeSet<i32> = lists.iter().map(|s| s.kind as i32).collect();
    assert_eq!(
        kinds,
        [SpanKind::Server as i32, SpanKind::Client as i32].into()
    );
    for list in lists {
        assert_eq!(list.attribute("mcp.method.name"), Some("tools/list"));
        assert_eq!(list.attribute("gen_ai.operation.name"), None);
        assert_eq!(list.attribute("gen_ai.tool.name"), None);
    }
}

fn check_metrics(metrics: &Metrics, port: u16) {
    let port = port.to_string();
    for (name, side) in [
        ("mcp.client.operation.duration", "client"),
        ("mcp.server.operation.duration", "server"),
    ] {
        assert_eq!(metrics.get(name).unit, "s", "{name}");
        let points = metrics.histogram(name);
        for point in &points {
            assert_eq!(point.explicit_bounds, OPERATION_DURATION_BUCKETS, "{name}");
            // The recommended boundaries, as the conventions write them.
            assert_eq!(
                point.explicit_bounds,
                [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0]
            );
            assert_eq!(point.bucket_counts.len(), 15);
            assert_eq!(point.bucket_counts.iter().sum::<u64>(), point.count);
        }
        let series = |pairs: &[(&str, &str)]| -> &HistogramPoint {
            let mut expected = otlp::pairs(&[
                ("mcp.method.name", "tools/call"),
                ("gen_ai.operation.name", "execute_tool"),
                ("network.transport", "tcp"),
                ("network.protocol.name", "http"),
            ]);
            expected.extend(otlp::pairs(pairs));
            if side == "client" {
                expected.extend(otlp::pairs(&[
                    ("server.address", "127.0.0.1"),
                    ("server.port", &port),
                ]));
            } else {
                expected.extend(otlp::pairs(&[("network.protocol.version", "1.1")]));
            }
            points
                .iter()
                .find(|p| p.attributes == expected)
                .unwrap_or_else(|| panic!("{name}: no series {expected:?} in {points:#?}"))
        };
        let add = series(&[
            ("gen_ai.tool.name", "add"),
            ("mcp.protocol.version", "2025-11-25"),
        ]);
        assert_eq!(add.count, 1, "{name}");
        let stateless = series(&[
            ("gen_ai.tool.name", "add"),
            ("mcp.protocol.version", "2026-07-28"),
        ]);
        assert_eq!(stateless.count, 1, "{name}");
        let fail = series(&[
            ("gen_ai.tool.name", "fail"),
            ("mcp.protocol.version", "2025-11-25"),
            ("error.type", "tool_error"),
        ]);
        assert_eq!(fail.count, 1, "{name}");
        let mut unknown = vec![
            ("gen_ai.tool.name", "flaky"),
            ("mcp.protocol.version", "2025-11-25"),
            ("rpc.response.status_code", "-32602"),
        ];
        if side == "client" {
            unknown.push(("error.type", "-32602"));
        }
        assert_eq!(series(&unknown).count, 1, "{name}");
        // The prompt, named on the server's series; the resource's URI is
        // on no series.
        if side == "server" {
            let greet = points.iter().find(|p| {
                p.attributes
                    .contains(&("gen_ai.prompt.name".into(), "greet".into()))
            });
            let greet = greet.unwrap_or_else(|| panic!("{name}: no prompts/get greet"));
            assert!(greet
                .attributes
                .contains(&("mcp.method.name".into(), "prompts/get".into())));
            assert_eq!(greet.count, 1);
            assert!(points.iter().all(|p| p
                .attributes
                .iter()
                .all(|(key, _)| key != "mcp.resource.uri")));
            assert!(points.iter().any(|p| p
                .attributes
                .contains(&("mcp.method.name".into(), "resources/read".into()))));
        }
        for method in ["initialize", "server/discover"] {
            assert!(
                points.iter().any(|p| p
                    .attributes
                    .contains(&("mcp.method.name".into(), method.into()))),
                "{name}: no {method} in {points:#?}"
            );
        }
        // And the lists: two on the client (two connections), as many
        // requests on the server.
        assert!(
            points.iter().any(|p| p
                .attributes
                .contains(&("mcp.method.name".into(), "tools/list".into()))),
            "{name}: no tools/list in {points:#?}"
        );
    }
}
