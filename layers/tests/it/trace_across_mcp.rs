//! A trace that crosses MCP: the client's `tools/call` span sends its
//! context in the request's `_meta` (`traceparent`), the server's
//! `tools/call` span continues it and the tool's `execute_tool` span is its
//! child, carrying the MCP attributes of the OpenTelemetry conventions —
//! checked on the spans an OpenTelemetry SDK exports.

use crate::support::logs;

use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use toolstack::mcp::rmcp::ServiceExt as _;
use toolstack::mcp::{McpClient, McpServer};
use toolstack::{tool, ToolError, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::trace::TraceLayer;
use tower::ServiceExt as _;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[tokio::test]
async fn the_trace_goes_from_the_client_span_to_the_server_span_to_the_tool() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    // The current-thread runtime runs client and server on this thread.
    let _default = logs::set_default(subscriber);

    let toolbox = Toolbox::new()
        .tool(tool::from_fn("add", |Add { a, b }| async move {
            Ok::<_, ToolError>(a + b)
        }))
        .tool(tool::from_fn("fail", |_: Add| async {
            Err::<i64, _>(ToolError::failed("no"))
        }))
        .layer(TraceLayer::new());
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = McpServer::new(toolbox).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let remote = McpClient::connect(client_io)
        .await
        .unwrap()
        .toolbox()
        .await
        .unwrap();

    let turn = tracing::info_span!("agent_turn");
    let call = |name: &'static str| {
        let remote = remote.clone();
        async move {
            match remote
                .oneshot(ToolRequest::new(name, r#"{"a":2,"b":3}"#))
                .await
            {
                Ok(stream) => ToolResult::collect(stream).await,
                // Failed before answering anything.
                Err(err) => ToolResult::from_error(err),
            }
        }
    };
    let (sum, failed) = async { (call("add").await, call("fail").await) }
        .instrument(turn.clone())
        .await;
    assert_eq!(sum.into_text(), "5");
    assert!(failed.is_error);
    drop(turn);
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let find = |name: &str| {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "no span {name} in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let turn = find("agent_turn");
    let by_kind = |name: &str, kind: SpanKind| {
        spans
            .iter()
            .find(|s| s.name == name && s.span_kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?} span {name}"))
    };
    let client = by_kind("tools/call add", SpanKind::Client);
    let server = by_kind("tools/call add", SpanKind::Server);
    let add = find("execute_tool add");
    // One trace: the caller's span → the client span → (across MCP) the
    // server span → the tool's span.
    for span in [client, server, add] {
        assert_eq!(span.span_context.trace_id(), turn.span_context.trace_id());
    }
    assert_eq!(client.parent_span_id, turn.span_context.span_id());
    assert!(!client.parent_span_is_remote);
    assert_eq!(server.parent_span_id, client.span_context.span_id());
    assert!(server.parent_span_is_remote);
    assert_eq!(add.parent_span_id, server.span_context.span_id());
    assert_ne!(add.parent_span_id, SpanId::INVALID);
    // The MCP attributes, on the tool's span too.
    assert_eq!(
        attribute(add, "mcp.method.name"),
        Some(&Value::from("tools/call"))
    );
    assert_eq!(
        attribute(add, "mcp.protocol.version"),
        Some(&Value::from("2025-11-25"))
    );
    assert_eq!(attribute(add, "error.type"), None);
    // A byte stream, not HTTP: `pipe`, as for stdio; and a session, but
    // no session id (stdio has none).
    assert_eq!(
        attribute(server, "network.transport"),
        Some(&Value::from("pipe"))
    );
    assert_eq!(attribute(server, "mcp.session.id"), None);

    let fail = find("execute_tool fail");
    assert_eq!(fail.span_context.trace_id(), turn.span_context.trace_id());
    assert_eq!(
        attribute(fail, "error.type"),
        Some(&Value::from("tool_error"))
    );
    for kind in [SpanKind::Client, SpanKind::Server] {
        let span = by_kind("tools/call fail", kind.clone());
        assert_eq!(
            attribute(span, "error.type"),
            Some(&Value::from("tool_error")),
            "{kind:?}"
        );
        assert!(matches!(span.status, Status::Error { .. }), "{kind:?}");
    }
}

#[tokio::test]
async fn a_call_dropped_before_its_result_ends_both_spans_as_cancelled() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = logs::set_default(subscriber);

    let (started, mut running) = tokio::sync::mpsc::unbounded_channel::<()>();
    let toolbox = Toolbox::new().tool(tool::from_fn("hang", move |_: Add| {
        let started = started.clone();
        async move {
            let _ = started.send(());
            std::future::pending::<Result<i64, ToolError>>().await
        }
    }));
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let running = McpServer::new(toolbox).serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let remote = McpClient::connect(client_io)
        .await
        .unwrap()
        .toolbox()
        .await
        .unwrap();
    // The call opens only when the tool answers, which it never does: it
    // is dropped while it opens, once the tool is running.
    let call = remote.oneshot(ToolRequest::new("hang", r#"{"a":2,"b":3}"#));
    tokio::select! {
        opened = call => panic!("the hanging tool answered: {:?}", opened.map(|_| ())),
        _ = running.recv() => {}
    }

    // The server hears of the cancellation on this thread's runtime: give
    // it turns, no time, until its span is exported.
    let ended = |kind: SpanKind| {
        exporter
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .find(|s| s.name == "tools/call hang" && s.span_kind == kind)
    };
    for _ in 0..10_000 {
        if ended(SpanKind::Server).is_some() {
            break;
        }
        tokio::task::yield_now().await;
    }
    for kind in [SpanKind::Client, SpanKind::Server] {
        let span = ended(kind.clone()).unwrap_or_else(|| panic!("no {kind:?} span ended"));
        assert_eq!(
            attribute(&span, "error.type"),
            Some(&Value::from("cancelled")),
            "{kind:?}"
        );
        assert!(matches!(span.status, Status::Error { .. }), "{kind:?}");
    }
}
