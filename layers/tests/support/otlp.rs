//! A stand-in OTLP/HTTP collector and what its exports say, decoded: the
//! tests of `otel::init_from_env` read the spans and metrics a process
//! sent over the wire.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// A stand-in OTLP/HTTP collector: each request's path, content type and
/// body, answered `200 OK`.
pub struct Collector {
    pub url: String,
    pub requests: mpsc::Receiver<(String, String, Vec<u8>)>,
}

impl Collector {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, requests) = mpsc::channel();
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(mut connection) = connection else {
                    return;
                };
                connection
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut reader = BufReader::new(connection.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                let (mut length, mut content_type) = (0, String::new());
                loop {
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    let header = line.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    let (name, value) = header.split_once(':').unwrap_or((header, ""));
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.trim().parse().unwrap(),
                        "content-type" => content_type = value.trim().to_owned(),
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                // Told before the answer: once the exporter has its answer,
                // the request is here.
                let _ = tx.send((path, content_type, body));
                connection
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                          content-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .unwrap();
            }
        });
        Collector { url, requests }
    }
}

/// What a metrics export says, by metric name: its unit and data points.
#[derive(Debug, Default)]
pub struct Metrics(Vec<opentelemetry_proto::tonic::metrics::v1::Metric>);

impl Metrics {
    pub fn decode(body: &[u8]) -> Self {
        use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
        use prost::Message as _;
        let request = ExportMetricsServiceRequest::decode(body).unwrap();
        let mut metrics = Vec::new();
        for resource in request.resource_metrics {
            for scope in resource.scope_metrics {
                assert_eq!(scope.scope.map(|s| s.name).as_deref(), Some("toolstack"));
                metrics.extend(scope.metrics);
            }
        }
        Metrics(metrics)
    }

    pub fn get(&self, name: &str) -> &opentelemetry_proto::tonic::metrics::v1::Metric {
        self.0
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no {name} among {:?}", self.names()))
    }

    pub fn names(&self) -> BTreeSet<&str> {
        self.0.iter().map(|m| m.name.as_str()).collect()
    }

    pub fn histogram(&self, name: &str) -> Vec<HistogramPoint> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        match &self.get(name).data {
            Some(Data::Histogram(histogram)) => histogram
                .data_points
                .iter()
                .map(|point| HistogramPoint {
                    attributes: attributes(&point.attributes),
                    count: point.count,
                    sum: point.sum.unwrap_or_default(),
                    bucket_counts: point.bucket_counts.clone(),
                    explicit_bounds: point.explicit_bounds.clone(),
                })
                .collect(),
            other => panic!("{name} is not a histogram: {other:?}"),
        }
    }

    /// A counter's points: attributes and the (integer) total.
    pub fn counter(&self, name: &str) -> Vec<(BTreeSet<(String, String)>, i64)> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
        match &self.get(name).data {
            Some(Data::Sum(sum)) => {
                assert!(sum.is_monotonic, "{name} is a counter");
                sum.data_points
                    .iter()
                    .map(|point| match point.value {
                        Some(Value::AsInt(total)) => (attributes(&point.attributes), total),
                        other => panic!("{name} counts integers, not {other:?}"),
                    })
                    .collect()
            }
            other => panic!("{name} is not a sum: {other:?}"),
        }
    }
}

#[derive(Debug)]
pub struct HistogramPoint {
    pub attributes: BTreeSet<(String, String)>,
    pub count: u64,
    pub sum: f64,
    pub bucket_counts: Vec<u64>,
    pub explicit_bounds: Vec<f64>,
}

/// Attributes as `(key, value)` text pairs.
pub fn attributes(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> BTreeSet<(String, String)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(text)) => text.clone(),
                Some(Value::IntValue(n)) => n.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

pub fn pairs(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// One exported span, decoded: its name, kind, ids, attributes as text
/// and status.
#[derive(Debug, Clone)]
pub struct WireSpan {
    pub name: String,
    pub kind: opentelemetry_proto::tonic::trace::v1::span::SpanKind,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    pub attributes: std::collections::BTreeMap<String, String>,
    /// The status code (`STATUS_CODE_ERROR` = 2) and message.
    pub status: (i32, String),
}

impl WireSpan {
    /// The spans of one trace export.
    pub fn decode(body: &[u8]) -> Vec<WireSpan> {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
        use prost::Message as _;
        let request = ExportTraceServiceRequest::decode(body).unwrap();
        let mut spans = Vec::new();
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let status = span.status.map(|s| (s.code, s.message)).unwrap_or_default();
                    spans.push(WireSpan {
                        name: span.name,
                        kind: SpanKind::try_from(span.kind).unwrap(),
                        trace_id: span.trace_id,
                        span_id: span.span_id,
                        parent_span_id: span.parent_span_id,
                        attributes: attributes(&span.attributes).into_iter().collect(),
                        status,
                    });
                }
            }
        }
        spans
    }

    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}
