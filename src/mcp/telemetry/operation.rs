//! One MCP [`Operation`]: its span, started when the request arrives
//! (server) or is about to be sent (client), ended once with how it ended
//! ([`OperationEnd`]), and its duration on
//! `mcp.{server,client}.operation.duration` ([`Meters`], with the
//! `opentelemetry` feature).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tracing::field::Empty;
use tracing::Span;

use super::target::Target;
use super::transport::Transport;
use crate::{ToolError, TraceContext};

/// The bucket boundaries, in seconds, of `mcp.server.operation.duration`
/// and `mcp.client.operation.duration`: the ones the MCP conventions
/// recommend (`docs/gen-ai/mcp.md`), given to the histograms as advice.
pub const OPERATION_DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Which end of the operation this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

/// How an operation ended.
pub(crate) enum OperationEnd<'a> {
    /// A result (for `tools/call`, one without `isError`).
    Ok,
    /// A `CallToolResult` with `isError`: `error.type = "tool_error"`.
    ToolError,
    /// A JSON-RPC error response.
    Rpc { code: i32, message: &'a str },
    /// No response: the connection, a timeout, the caller gave up…
    /// `error.type` is the error's kind.
    Failed {
        kind: &'static str,
        message: &'a str,
    },
}

impl<'a> OperationEnd<'a> {
    pub(crate) fn failed(err: &'a ToolError) -> Self {
        OperationEnd::Failed {
            kind: err.kind().as_str(),
            message: err.message(),
        }
    }
}

/// Whether a JSON-RPC error code the server answers with is an error of
/// the server's: not those that say the caller sent a request it could
/// not serve (parse error, invalid request, method not found, invalid
/// params — also an unknown tool —, resource not found). Every code is an
/// error on the client.
fn server_error(code: i32) -> bool {
    !matches!(code, -32700 | -32600 | -32601 | -32602 | -32002)
}

/// One MCP request, as a span and a duration.
pub(crate) struct Operation {
    side: Side,
    // What the metrics say of it (with the `opentelemetry` feature).
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    method: &'static str,
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    target: Target,
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    protocol_version: Option<Arc<str>>,
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    transport: Transport,
    span: Option<Span>,
    start: Instant,
    meters: Meters,
}

/// `{mcp.method.name} {target}`, the target a tool's or a prompt's name.
struct SpanName<'a>(&'static str, Option<&'a str>);

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(target) => write!(f, "{} {target}", self.0),
            None => f.write_str(self.0),
        }
    }
}

/// What an [`Operation`] is about.
pub(crate) struct Request<'a> {
    pub(crate) method: &'static str,
    pub(crate) target: Target,
    pub(crate) protocol_version: Option<Arc<str>>,
    pub(crate) session_id: Option<&'a str>,
    pub(crate) request_id: Option<&'a dyn fmt::Display>,
    pub(crate) transport: Transport,
    /// The remote parent: the caller's context (server), or the one the
    /// request came with when no local span is current (client).
    pub(crate) parent: Option<&'a TraceContext>,
}

impl Operation {
    /// Starts the operation `request` on `side`: its span (kind `SERVER` or
    /// `CLIENT`) and its clock.
    pub(crate) fn start(side: Side, request: Request<'_>, meters: &Meters) -> Self {
        let Request {
            method,
            target,
            protocol_version,
            session_id,
            request_id,
            transport,
            parent,
        } = request;
        let span = tracing::info_span!(
            "mcp",
            otel.name = %SpanName(method, target.name()),
            otel.kind = match side {
                Side::Client => "client",
                Side::Server => "server",
            },
            mcp.method.name = method,
            gen_ai.operation.name = (method == "tools/call").then_some("execute_tool"),
            gen_ai.tool.name = target.tool_name(),
            gen_ai.prompt.name = target.prompt_name(),
            mcp.resource.uri = target.resource_uri(),
            mcp.protocol.version = protocol_version.as_deref(),
            mcp.session.id = session_id,
            jsonrpc.request.id = request_id.map(tracing::field::display),
            network.transport = transport.network,
            network.protocol.name = transport.protocol.map(|(name, _)| name),
            network.protocol.version = transport
                .protocol
                .map(|(_, version)| version)
                .filter(|v| !v.is_empty()),
            server.address = transport.server.as_ref().map(|(host, _)| &**host),
            server.port = transport.server.as_ref().map(|(_, port)| i64::from(*port)),
            rpc.response.status_code = Empty,
            error.type = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        set_parent(&span, side, parent);
        Operation {
            side,
            method,
            target,
            protocol_version,
            transport,
            span: Some(span),
            start: Instant::now(),
            meters: meters.clone(),
        }
    }

    /// The trace context this operation's span gives its callee (with the
    /// `opentelemetry` feature and a layer that exports it).
    pub(crate) fn trace_context(&self) -> Option<TraceContext> {
        #[cfg(feature = "opentelemetry")]
        if let Some(span) = &self.span {
            return TraceContext::from_span(span);
        }
        None
    }

    /// The operation's span, to run its work in (none once it ended).
    pub(crate) fn span(&self) -> Span {
        self.span.clone().unwrap_or_else(Span::none)
    }

    /// Records the request's JSON-RPC id, once it has one (client).
    pub(crate) fn request_id(&self, id: &dyn fmt::Display) {
        if let Some(span) = &self.span {
            span.record("jsonrpc.request.id", tracing::field::display(id));
        }
    }

    /// Ends the operation with `outcome`: the span's status and error
    /// attributes, its duration. Only the first end counts.
    pub(crate) fn end(&mut self, outcome: OperationEnd<'_>) {
        let Some(span) = self.span.take() else {
            return;
        };
        let seconds = self.start.elapsed().as_secs_f64();
        let mut status_code = None;
        let (error_type, message): (Option<Cow<'_, str>>, Option<&str>) = match outcome {
            OperationEnd::Ok => (None, None),
            OperationEnd::ToolError => (Some(Cow::Borrowed("tool_error")), None),
            OperationEnd::Rpc { code, message } => {
                status_code = Some(code);
                if self.side == Side::Client || server_error(code) {
                    (Some(Cow::Owned(code.to_string())), Some(message))
                } else {
                    (None, None)
                }
            }
            OperationEnd::Failed { kind, message } => (Some(Cow::Borrowed(kind)), Some(message)),
        };
        if let Some(code) = status_code {
            span.record("rpc.response.status_code", tracing::field::display(code));
        }
        if let Some(error_type) = &error_type {
            span.record("error.type", &**error_type);
            span.record("otel.status_code", "error");
            if let Some(message) = message.filter(|m| !m.is_empty()) {
                span.record("otel.status_description", message);
            }
        }
        // The span ends here, not when the last handle on the operation goes.
        drop(span);
        self.meters
            .record(self, seconds, status_code, error_type.as_deref());
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.end(OperationEnd::Failed {
            kind: "cancelled",
            message: "the operation ended before its answer",
        });
    }
}

fn set_parent(span: &Span, side: Side, parent: Option<&TraceContext>) {
    #[cfg(feature = "opentelemetry")]
    if let Some(parent) = parent {
        // A client span continues the local span it was made in, when that
        // one is exported; the request's context only stands in for one.
        let local = side == Side::Client && TraceContext::from_span(&Span::current()).is_some();
        if !local && !span.is_disabled() {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let _ = span.set_parent(parent.to_otel_context());
        }
    }
    #[cfg(not(feature = "opentelemetry"))]
    let _ = (span, side, parent);
}

#[cfg(feature = "opentelemetry")]
pub(crate) use self::enabled::Meters;

#[cfg(not(feature = "opentelemetry"))]
pub(crate) use self::disabled::Meters;

#[cfg(feature = "opentelemetry")]
mod enabled {
    use std::sync::{Arc, OnceLock};

    use opentelemetry::metrics::Histogram;
    use opentelemetry::KeyValue;

    use super::{Operation, Side, Target, OPERATION_DURATION_BUCKETS};

    /// The two duration histograms, on the global meter provider's
    /// `toolstack` meter, taken at the first operation measured (a
    /// provider installed before it counts) and shared by the clones of a
    /// server or client.
    #[derive(Clone, Default)]
    pub(crate) struct Meters(Arc<OnceLock<Histograms>>);

    struct Histograms {
        client: Histogram<f64>,
        server: Histogram<f64>,
    }

    impl Meters {
        pub(crate) fn new() -> Self {
            Meters::default()
        }

        fn histograms(&self) -> &Histograms {
            self.0.get_or_init(|| {
                let meter = opentelemetry::global::meter_with_scope(
                    opentelemetry::InstrumentationScope::builder("toolstack")
                        .with_version(env!("CARGO_PKG_VERSION"))
                        .build(),
                );
                let histogram = |name: &'static str, description: &'static str| {
                    meter
                        .f64_histogram(name)
                        .with_unit("s")
                        .with_description(description)
                        .with_boundaries(OPERATION_DURATION_BUCKETS.to_vec())
                        .build()
                };
                Histograms {
                    client: histogram(
                        "mcp.client.operation.duration",
                        "The duration of the MCP request as observed on the sender, from the \
                         time it was sent until the response is received.",
                    ),
                    server: histogram(
                        "mcp.server.operation.duration",
                        "MCP request duration as observed on the receiver, from the time it \
                         was received until the result is sent.",
                    ),
                }
            })
        }

        pub(super) fn record(
            &self,
            op: &Operation,
            seconds: f64,
            status_code: Option<i32>,
            error_type: Option<&str>,
        ) {
            let mut attributes = Vec::with_capacity(10);
            attributes.push(KeyValue::new("mcp.method.name", op.method));
            if op.method == "tools/call" {
                attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            }
            match &op.target {
                Target::Tool(tool) => {
                    attributes.push(KeyValue::new("gen_ai.tool.name", Arc::clone(tool)));
                }
                Target::Prompt(prompt) => {
                    attributes.push(KeyValue::new("gen_ai.prompt.name", Arc::clone(prompt)));
                }
                Target::None | Target::Resource(_) => {}
            }
            if let Some(version) = &op.protocol_version {
                attributes.push(KeyValue::new("mcp.protocol.version", Arc::clone(version)));
            }
            let transport = &op.transport;
            if let Some(network) = transport.network {
                attributes.push(KeyValue::new("network.transport", network));
            }
            if let Some((name, version)) = transport.protocol {
                attributes.push(KeyValue::new("network.protocol.name", name));
                if !version.is_empty() {
                    attributes.push(KeyValue::new("network.protocol.version", version));
                }
            }
            if let Some((host, port)) = &transport.server {
                attributes.push(KeyValue::new("server.address", Arc::clone(host)));
                attributes.push(KeyValue::new("server.port", i64::from(*port)));
            }
            if let Some(code) = status_code {
                attributes.push(KeyValue::new("rpc.response.status_code", code.to_string()));
            }
            if let Some(error_type) = error_type {
                attributes.push(KeyValue::new("error.type", error_type.to_owned()));
            }
            let histograms = self.histograms();
            let histogram = match op.side {
                Side::Client => &histograms.client,
                Side::Server => &histograms.server,
            };
            histogram.record(seconds, &attributes);
        }
    }
}

#[cfg(not(feature = "opentelemetry"))]
mod disabled {
    use super::Operation;

    /// Without the `opentelemetry` feature: nothing is measured.
    #[derive(Clone)]
    pub(crate) struct Meters;

    impl Meters {
        pub(crate) fn new() -> Self {
            Meters
        }

        pub(super) fn record(&self, _: &Operation, _: f64, _: Option<i32>, _: Option<&str>) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_servers_own_failures_are_its_errors() {
        for code in [-32700, -32600, -32601, -32602, -32002] {
            assert!(!server_error(code), "{code}");
        }
        for code in [-32603, -32000, -32099, -1] {
            assert!(server_error(code), "{code}");
        }
    }
}
