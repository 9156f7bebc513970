//! The OpenTelemetry GenAI conventions, end to end: an agent run whose
//! model and tools are traced, checked on the spans the OpenTelemetry SDK
//! exports — the tree (`invoke_agent` → `chat`, `execute_tool`), the span
//! kinds, and the attribute names and values as the conventions spell
//! them — and the same run sent over OTLP/HTTP by `otel::init_from_env`
//! to the collector the environment names.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

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

#[path = "support/logs.rs"]
mod logs;
#[path = "support/otlp.rs"]
mod otlp;
use otlp::{pairs, Collector, Metrics};

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
        let _default = logs::set_default(subscriber);
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
        "gen_ai.request.stream",
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
        assert_eq!(attr("gen_ai.request.stream"), Some(&Value::Bool(true)));
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
async fn cache_reads_writes_and_reasoning_tokens_are_on_the_chat_and_agent_spans() {
    let _serial = serial().await;
    let exported = Exported::install();
    assert_eq!(run(&agent_with_usage()).await, StopReason::Finished);
    let spans = exported.spans();
    let chats = named(&spans, "chat");
    let parts = |span: &SpanData| {
        (
            attribute(span, "gen_ai.usage.cache_read.input_tokens").cloned(),
            attribute(span, "gen_ai.usage.cache_creation.input_tokens").cloned(),
            attribute(span, "gen_ai.usage.reasoning.output_tokens").cloned(),
        )
    };
    let reported = (
        Some(Value::I64(64)),
        Some(Value::I64(32)),
        Some(Value::I64(8)),
    );
    assert_eq!(parts(chats[0]), reported);
    // None reported: left out rather than zero.
    assert_eq!(parts(chats[1]), (None, None, None));
    let run = named(&spans, "invoke_agent")[0];
    assert_eq!(parts(run), reported);
    assert_eq!(
        attribute(run, "gen_ai.usage.input_tokens"),
        Some(&Value::I64(5100))
    );
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
    let _default = logs::set_default(tracing_subscriber::registry().with(records.clone()));
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
    let _default = logs::set_default(tracing_subscriber::registry().with(records.clone()));
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

/// The agent of [`agent`], its model reporting usage with cached and
/// reasoning tokens: 100 in (64 cached), 20 out (8 reasoning), then 5000
/// in, 30 out.
fn agent_with_usage() -> Agent<Model> {
    use toolstack::model::Usage;
    let model = traced_model([
        Turn::new().tool_call("add", r#"{"a":2,"b":3}"#).usage(
            Usage::new(100, 20)
                .cached(64)
                .cache_creation(32)
                .reasoning(8),
        ),
        Turn::new().text("It is 5.").usage(Usage::new(5000, 30)),
    ]);
    Agent::new(model, toolbox())
        .name("calculator")
        .provider("openai")
        .model_name("gpt-test")
}

/// The metrics of [`agent_with_usage`]'s run, as the conventions name,
/// measure and bucket them.
fn check_metrics(metrics: &Metrics) {
    // The boundaries the conventions recommend, as they write them.
    const DURATION_BUCKETS: [f64; 14] = [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ];
    const TOKEN_BUCKETS: [f64; 14] = [
        1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
        4194304.0, 16777216.0, 67108864.0,
    ];

    let chat = pairs(&[
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "gpt-test"),
        ("gen_ai.response.model", RESPONSE_MODEL),
    ]);
    assert_eq!(metrics.get("gen_ai.client.operation.duration").unit, "s");
    let [duration] = &metrics.histogram("gen_ai.client.operation.duration")[..] else {
        panic!("one series of model calls");
    };
    assert_eq!(duration.attributes, chat);
    assert_eq!(duration.count, 2);
    assert_eq!(duration.explicit_bounds, DURATION_BUCKETS);

    assert_eq!(metrics.get("gen_ai.execute_tool.duration").unit, "s");
    let [tool] = &metrics.histogram("gen_ai.execute_tool.duration")[..] else {
        panic!("one series of tool calls");
    };
    assert_eq!(
        tool.attributes,
        pairs(&[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "add"),
            ("gen_ai.tool.type", "function"),
        ])
    );
    assert_eq!(tool.count, 1);
    assert_eq!(tool.explicit_bounds, DURATION_BUCKETS);

    // Input and output tokens, one series each, in the recommended
    // buckets: 100 in (64, 256], 5000 in (4096, 16384]; 20 and 30 in
    // (16, 64].
    assert_eq!(metrics.get("gen_ai.client.token.usage").unit, "{token}");
    let usage = metrics.histogram("gen_ai.client.token.usage");
    let of = |kind: &str| {
        let mut attributes = chat.clone();
        attributes.insert(("gen_ai.token.type".into(), kind.into()));
        usage
            .iter()
            .find(|point| point.attributes == attributes)
            .unwrap_or_else(|| panic!("no {kind} tokens in {usage:?}"))
    };
    let (input, output) = (of("input"), of("output"));
    assert_eq!(usage.len(), 2);
    assert_eq!(input.explicit_bounds, TOKEN_BUCKETS);
    assert_eq!((input.count, input.sum), (2, 5100.0));
    let mut expected = vec![0; TOKEN_BUCKETS.len() + 1];
    expected[4] = 1;
    expected[7] = 1;
    assert_eq!(input.bucket_counts, expected);
    assert_eq!((output.count, output.sum), (2, 50.0));
    let mut expected = vec![0; TOKEN_BUCKETS.len() + 1];
    expected[3] = 2;
    assert_eq!(output.bucket_counts, expected);

    // The counters, by modality (which a model's usage does not tell).
    let mut by_modality = chat.clone();
    by_modality.insert(("gen_ai.token.modality".into(), "unknown".into()));
    for (name, total) in [
        ("gen_ai.client.inference.usage.input_tokens", 5100),
        ("gen_ai.client.inference.usage.output_tokens", 50),
        ("gen_ai.client.inference.usage.cache_read.input_tokens", 64),
        (
            "gen_ai.client.inference.usage.cache_creation.input_tokens",
            32,
        ),
        ("gen_ai.client.inference.usage.reasoning.output_tokens", 8),
    ] {
        assert_eq!(metrics.get(name).unit, "{token}", "{name}");
        assert_eq!(
            metrics.counter(name),
            [(by_modality.clone(), total)],
            "{name}"
        );
    }
}

#[tokio::test]
async fn the_trace_layer_records_the_conventions_metrics_on_its_meter() {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

    let _serial = serial().await;
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let meter = provider.meter("toolstack");
    // A failing tool call: its duration carries `error.type`.
    let failing = Toolbox::new()
        .tool(tool::from_fn("boom", |_: serde_json::Value| async move {
            Err::<String, _>(ToolError::new(ErrorKind::Unavailable, "down"))
        }))
        .layer(TraceLayer::new().meter(meter.clone()));
    // No subscriber: an own meter is enough for the call to be measured.
    let result = failing
        .clone()
        .oneshot(ToolRequest::new("boom", "{}"))
        .await;
    assert_eq!(
        result.map(|_| ()).unwrap_err().kind(),
        ErrorKind::Unavailable,
        "failed before answering: the call's future fails"
    );
    provider.force_flush().unwrap();

    let exported = exporter.get_finished_metrics().unwrap();
    let names: Vec<String> = exported
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .map(|m| m.name().to_owned())
        .collect();
    assert_eq!(names, ["gen_ai.execute_tool.duration"]);
    let point = format!("{exported:?}");
    assert!(point.contains("error.type"), "{point}");
    assert!(point.contains("unavailable"), "{point}");
    let _ = provider.shutdown();
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
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
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
    assert_eq!(
        runtime.block_on(run(&agent_with_usage())),
        StopReason::Finished
    );
    // Sends what is queued and measured, then shuts down.
    drop(guard);

    let (exports, metrics): (Vec<_>, Vec<_>) = collector
        .requests
        .try_iter()
        .partition(|(path, _, _)| path == "/v1/traces");
    assert!(!exports.is_empty(), "no spans reached the collector");
    // Cumulative: the last export has every measurement.
    let (path, content_type, body) = metrics.last().expect("no metrics reached the collector");
    assert_eq!(path, "/v1/metrics");
    assert_eq!(content_type, "application/x-protobuf");
    check_metrics(&Metrics::decode(body));

    let mut names = Vec::new();
    for (_, content_type, body) in &exports {
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
