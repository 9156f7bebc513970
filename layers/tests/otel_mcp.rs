//! The OpenTelemetry MCP conventions, end to end over streamable HTTP:
//! the client's and the server's `tools/call` and `tools/list` spans (name,
//! kind, attributes, status, the trace from caller to tool) and the
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
use toolstack::mcp::rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
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

/// `add`, `fail` (an error result) and `flaky` (listed, then hidden when
/// `hidden` is set: a call of it is then an unknown tool, `-32602`),
/// traced inside the toolbox, served over streamable HTTP.
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
        McpServer::new(toolbox).into_http_service(StreamableHttpServerConfig::default()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn call(remote: &Toolbox, name: &'static str) -> Result<ToolResult, ToolError> {
    let stream = remote
        .clone()
        .oneshot(ToolRequest::new(name, r#"{"a":2,"b":3}"#))
        .await?;
    Ok(ToolResult::collect(stream).await)
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
        assert_eq!(call(&remote, "add").await.unwrap().into_text(), "5");
        assert!(call(&remote, "fail").await.unwrap().is_error);
        hidden.store(true, Ordering::SeqCst);
        let unknown = call(&remote, "flaky").await.unwrap();
        assert!(unknown.is_error);
        assert_eq!(unknown.error.map(|e| e.kind()), Some(ErrorKind::NotFound));
    }
    .instrument(tracing::info_span!("session_turn"))
    .await;

    let stateless = McpClient::builder()
        .stateless()
        .connect_http(&url)
        .await
        .unwrap();
    let remote = stateless.toolbox().await.unwrap();
    async { assert_eq!(call(&remote, "add").await.unwrap().into_text(), "5") }
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
