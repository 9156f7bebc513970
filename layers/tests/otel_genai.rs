//! The OpenTelemetry GenAI conventions, end to end: an agent run whose
//! model and tools are traced, checked on the spans the OpenTelemetry SDK
//! exports — the tree (`invoke_agent` → `chat`, `execute_tool`), the span
//! kinds, and the attribute names and values as the conventions spell
//! them — and the same run sent over OTLP/HTTP by `otel::init_from_env`
//! to the collector the environment names.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{self, BoxStream, StreamExt};
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Array, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, ScriptedStream, Turn};
use toolstack::{tool, ErrorKind, ToolError, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::otel::{self, OtelErrorKind};
use toolstack_layers::trace::TraceLayer;
use tower::util::BoxCloneService;
use tower::{Layer as _, ServiceBuilder, ServiceExt as _};
use tracing_subscriber::layer::SubscriberExt;

// One test here sets `OTEL_*` variables and installs the process's global
// subscriber: the tests of this file take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

const RESPONSE_MODEL: &str = "gpt-test-2026";

type Model =
    BoxCloneService<ChatRequest, BoxStream<'static, Result<ModelDelta, ToolError>>, ToolError>;

/// The model as the OpenAI client answers: the model that answered first,
/// then the deltas (text or tool calls, the finish reason, usage).
fn answered_by(
    answer: ScriptedStream,
) -> impl futures_util::Stream<Item = Result<ModelDelta, ToolError>> {
    stream::iter([Ok(ModelDelta::Model(RESPONSE_MODEL.into()))]).chain(answer)
}

/// `turns`, traced as a model of provider `openai`.
fn traced_model(turns: impl IntoIterator<Item = Turn>) -> Model {
    let traced = ServiceBuilder::new()
        .layer(TraceLayer::new().provider("openai"))
        .map_response(answered_by)
        .service(ScriptedModel::new(turns));
    BoxCloneService::new(traced.map_response(StreamExt::boxed))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// `add`, described, untraced.
fn tools() -> Toolbox {
    Toolbox::new().tool(
        tool::from_fn(
            "add",
            |Add { a, b }| async move { Ok::<_, ToolError>(a + b) },
        )
        .with_description("Adds two integers."),
    )
}

/// `add`, traced inside the toolbox (where the request carries the tool's
/// description).
fn toolbox() -> Toolbox {
    tools().layer(TraceLayer::new())
}

/// Two model turns around one tool call.
fn agent() -> Agent<Model> {
    let model = traced_model([
        Turn::new().tool_call("add", r#"{"a":2,"b":3}"#),
        Turn::new().text("It is 5."),
    ]);
    Agent::new(model, toolbox())
        .name("calculator")
        .provider("openai")
        .model_name("gpt-test")
}

async fn run(agent: &Agent<Model>) -> StopReason {
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("2+3?")]).collect().await;
    match events.last() {
        Some(AgentEvent::Done(done)) => done.stop,
        other => panic!("the run did not end with Done: {other:?}"),
    }
}

/// Spans exported to memory, through `otel::layer`, on this thread.
struct Exported {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _default: tracing::subscriber::DefaultGuard,
}

impl Exported {
    fn install() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(otel::layer(&provider));
        let _default = tracing::subscriber::set_default(subscriber);
        Exported {
            exporter,
            provider,
            _default,
        }
    }

    /// The finished spans, in the order they started.
    fn spans(&self) -> Vec<SpanData> {
        self.provider.force_flush().unwrap();
        let mut spans = self.exporter.get_finished_spans().unwrap();
        spans.sort_by_key(|span| span.start_time);
        spans
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// The span's `gen_ai.*` keys; each key once (an exported span that
/// carried one twice would be malformed OTLP).
fn gen_ai_keys(span: &SpanData) -> BTreeSet<&str> {
    let keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
    let unique: BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(
        unique.len(),
        keys.len(),
        "a key twice on {}: {keys:?}",
        span.name
    );
    unique
        .into_iter()
        .filter(|key| key.starts_with("gen_ai."))
        .collect()
}

fn strings(values: &[&str]) -> Value {
    Value::Array(Array::String(
        values.iter().map(|v| (*v).to_owned().into()).collect(),
    ))
}

fn named<'a>(spans: &'a [SpanData], prefix: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn an_agent_run_exports_invoke_agent_over_chat_and_execute_tool_spans() {
    let _serial = serial().await;
    let exported = Exported::install();
    assert_eq!(run(&agent()).await, StopReason::Finished);
    let spans = exported.spans();

    let agents = named(&spans, "invoke_agent");
    assert_eq!(agents.len(), 1, "one run: {spans:?}");
    let run = agents[0];
    assert_eq!(run.name, "invoke_agent calculator");
    assert_eq!(run.span_kind, SpanKind::Internal);
    assert_eq!(run.parent_span_id, SpanId::INVALID, "the root");
    assert_eq!(
        attribute(run, "gen_ai.operation.name"),
        Some(&Value::from("invoke_agent"))
    );
    assert_eq!(
        attribute(run, "gen_ai.agent.name"),
        Some(&Value::from("calculator"))
    );
    assert_eq!(
        attribute(run, "gen_ai.provider.name"),
        Some(&Value::from("openai"))
    );
    // The run's usage, as integers (the two turns' together).
    assert!(
        matches!(attribute(run, "gen_ai.usage.input_tokens"), Some(Value::I64(n)) if *n > 0),
        "{run:?}"
    );
    assert!(matches!(
        attribute(run, "gen_ai.usage.output_tokens"),
        Some(Value::I64(_))
    ));
    assert_eq!(
        attribute(run, "toolstack.agent.steps"),
        Some(&Value::I64(2))
    );

    // One chat span per model turn, children of the run.
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2, "{spans:?}");
    let expected: BTreeSet<&str> = [
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.response.time_to_first_chunk",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    ]
    .into();
    // The first asks for the tool (two argument fragments after one user
    // message); the second answers in three words, after three messages.
    let answers = [(["tool_calls"], 1, 2), (["stop"], 3, 3)];
    for (chat, (finish, input, output)) in chats.iter().zip(answers) {
        assert_eq!(chat.name, "chat gpt-test");
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert_eq!(chat.parent_span_id, run.span_context.span_id());
        assert_eq!(chat.span_context.trace_id(), run.span_context.trace_id());
        assert_eq!(chat.status, Status::Unset);
        assert_eq!(gen_ai_keys(chat), expected, "{:?}", chat.attributes);
        let attr = |key| attribute(chat, key);
        assert_eq!(attr("gen_ai.operation.name"), Some(&Value::from("chat")));
        assert_eq!(attr("gen_ai.provider.name"), Some(&Value::from("openai")));
        assert_eq!(attr("gen_ai.request.model"), Some(&Value::from("gpt-test")));
        assert_eq!(
            attr("gen_ai.response.model"),
            Some(&Value::from(RESPONSE_MODEL))
        );
        assert_eq!(
            attr("gen_ai.response.finish_reasons"),
            Some(&strings(&finish)),
            "a string array"
        );
        assert_eq!(attr("gen_ai.usage.input_tokens"), Some(&Value::I64(input)));
        assert_eq!(
            attr("gen_ai.usage.output_tokens"),
            Some(&Value::I64(output))
        );
        match attr("gen_ai.response.time_to_first_chunk") {
            Some(Value::F64(seconds)) => assert!((0.0..60.0).contains(seconds), "{seconds}"),
            other => panic!("time to first chunk in seconds, a double: {other:?}"),
        }
    }

    // The tool call, a child of the run too, described by the toolbox.
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 1, "{spans:?}");
    let tool = tools[0];
    assert_eq!(tool.name, "execute_tool add");
    assert_eq!(tool.span_kind, SpanKind::Internal);
    assert_eq!(tool.parent_span_id, run.span_context.span_id());
    assert_eq!(
        gen_ai_keys(tool),
        [
            "gen_ai.operation.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.description",
            "gen_ai.tool.name",
            "gen_ai.tool.type",
        ]
        .into(),
        "{:?}",
        tool.attributes
    );
    let attr = |key| attribute(tool, key);
    assert_eq!(
        attr("gen_ai.operation.name"),
        Some(&Value::from("execute_tool"))
    );
    assert_eq!(attr("gen_ai.tool.name"), Some(&Value::from("add")));
    assert_eq!(attr("gen_ai.tool.call.id"), Some(&Value::from("call_0_0")));
    assert_eq!(
        attr("gen_ai.tool.description"),
        Some(&Value::from("Adds two integers."))
    );
    assert_eq!(attr("gen_ai.tool.type"), Some(&Value::from("function")));
    // `otel.*` fields steer the exported span; they are not attributes.
    for span in &spans {
        assert!(
            span.attributes
                .iter()
                .all(|kv| !kv.key.as_str().starts_with("otel.")),
            "{:?}",
            span.attributes
        );
    }
}

#[tokio::test]
async fn an_answer_that_breaks_off_before_its_finish_reason_records_error() {
    let _serial = serial().await;
    let exported = Exported::install();
    let reset = ToolError::new(ErrorKind::Unavailable, "connection reset");
    let model = traced_model([Turn::new().text("Half an").fail(reset)]);
    let agent = Agent::new(model, toolbox()).model_name("gpt-test");
    assert_eq!(run(&agent).await, StopReason::ModelError);

    let spans = exported.spans();
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 1);
    let chat = chats[0];
    assert_eq!(
        attribute(chat, "gen_ai.response.finish_reasons"),
        Some(&strings(&["error"]))
    );
    assert_eq!(
        attribute(chat, "error.type"),
        Some(&Value::from("unavailable"))
    );
    assert!(matches!(chat.status, Status::Error { .. }));
    assert_eq!(
        attribute(chat, "gen_ai.usage.input_tokens"),
        None,
        "none reported"
    );
    assert_eq!(
        attribute(chat, "gen_ai.response.model"),
        Some(&Value::from(RESPONSE_MODEL)),
        "told before the break"
    );
}

#[tokio::test]
async fn an_answer_dropped_before_its_finish_reason_records_error() {
    let _serial = serial().await;
    let exported = Exported::install();
    let model = traced_model([Turn::new().text("A long answer, never read")]);
    let mut answer = model
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    assert!(matches!(
        answer.next().await,
        Some(Ok(ModelDelta::Model(_)))
    ));
    drop(answer);

    let spans = exported.spans();
    let chat = named(&spans, "chat")[0];
    assert_eq!(
        attribute(chat, "gen_ai.response.finish_reasons"),
        Some(&strings(&["error"]))
    );
}

#[tokio::test]
async fn a_trace_around_the_whole_toolbox_has_no_tool_description() {
    let _serial = serial().await;
    let exported = Exported::install();
    let around = TraceLayer::new().layer(tools());
    let request = ToolRequest::new("add", r#"{"a":1,"b":2}"#).with_id("call_1");
    let result = ToolResult::collect(around.oneshot(request).await.unwrap()).await;
    assert_eq!(result.into_text(), "3");

    let spans = exported.spans();
    let tool = named(&spans, "execute_tool")[0];
    // The toolbox sets the description when it dispatches: after this
    // span was made.
    assert_eq!(attribute(tool, "gen_ai.tool.description"), None);
    assert_eq!(
        attribute(tool, "gen_ai.tool.type"),
        Some(&Value::from("function"))
    );
}

/// The fields recorded on `chat` spans after they were made, for a
/// subscriber with no OpenTelemetry layer.
#[derive(Clone, Default)]
struct ChatRecords(Arc<Mutex<Vec<(String, String)>>>);

impl<S> tracing_subscriber::Layer<S> for ChatRecords
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Visit<'a>(&'a mut Vec<(String, String)>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0.push((field.name().to_owned(), value.to_owned()));
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push((field.name().to_owned(), format!("{value:?}")));
            }
        }
        if ctx.metadata(id).is_some_and(|m| m.name() == "chat") {
            values.record(&mut Visit(&mut self.0.lock().unwrap()));
        }
    }
}

#[tokio::test]
async fn without_an_opentelemetry_layer_the_finish_reason_is_a_string_field() {
    let _serial = serial().await;
    let records = ChatRecords::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(records.clone()));
    let model = traced_model([Turn::new().text("Hello.")]);
    let answer = model
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(answer.count().await, 4, "model, text, finish, usage");

    let records = records.0.lock().unwrap().clone();
    let field = |name: &str| {
        records
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(field("gen_ai.response.finish_reasons"), Some("stop"));
    assert_eq!(field("gen_ai.response.model"), Some(RESPONSE_MODEL));
    assert_eq!(field("gen_ai.usage.input_tokens"), Some("1"));
    assert_eq!(field("gen_ai.usage.output_tokens"), Some("1"));
    assert!(field("gen_ai.response.time_to_first_chunk").is_some());
}

#[tokio::test]
async fn cache_writes_are_an_attribute_of_the_chat_span_when_reported() {
    let _serial = serial().await;
    let records = ChatRecords::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(records.clone()));
    let usage = toolstack::model::Usage::new(1_300, 2)
        .cached(1_000)
        .cache_creation(200);
    let model = traced_model([Turn::new().text("Hello.").usage(usage)]);
    let answer = model
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    answer.count().await;
    let records = records.0.lock().unwrap().clone();
    let field = |name: &str| {
        records
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(field("gen_ai.usage.input_tokens"), Some("1300"));
    assert_eq!(
        field("gen_ai.usage.cache_creation.input_tokens"),
        Some("200")
    );
}

/// A stand-in OTLP/HTTP collector: each request's path, content type and
/// body, answered `200 OK`.
struct Collector {
    url: String,
    requests: mpsc::Receiver<(String, String, Vec<u8>)>,
}

impl Collector {
    fn start() -> Self {
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

#[test]
fn init_from_env_sends_the_spans_to_the_collector_the_environment_names() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as WireKind;
    use prost::Message as _;

    let _serial = SERIAL.blocking_lock();
    let collector = Collector::start();
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_TRACES_EXPORTER",
        "OTEL_SDK_DISABLED",
        "OTEL_TRACES_SAMPLER",
    ] {
        std::env::remove_var(var);
    }
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url);
    std::env::set_var("OTEL_SERVICE_NAME", "toolstack-otel-test");
    let guard = otel::init_from_env()
        .unwrap()
        .expect("a collector is named");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(runtime.block_on(run(&agent())), StopReason::Finished);
    // Sends what is queued, then shuts down.
    drop(guard);

    let exports: Vec<_> = collector.requests.try_iter().collect();
    assert!(!exports.is_empty(), "nothing reached the collector");
    let mut names = Vec::new();
    for (path, content_type, body) in &exports {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.clone()?.value);
            assert_eq!(
                service,
                Some(any_value::Value::StringValue("toolstack-otel-test".into()))
            );
            for scope_spans in resource_spans.scope_spans {
                assert_eq!(
                    scope_spans.scope.map(|s| s.name).as_deref(),
                    Some("toolstack")
                );
                for span in scope_spans.spans {
                    let kind = WireKind::try_from(span.kind).unwrap();
                    names.push((span.name, kind));
                }
            }
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        names,
        [
            ("chat gpt-test".to_owned(), WireKind::Client),
            ("chat gpt-test".to_owned(), WireKind::Client),
            ("execute_tool add".to_owned(), WireKind::Internal),
            ("invoke_agent calculator".to_owned(), WireKind::Internal),
        ]
    );

    // The global subscriber is taken now: a second one is refused, with a
    // way out in the message.
    let again = otel::init_from_env().unwrap_err();
    assert_eq!(again.kind(), OtelErrorKind::AlreadyInstalled);
    assert!(again.to_string().contains("otel::layer"), "{again}");
}
