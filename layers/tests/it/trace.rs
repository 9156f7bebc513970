//! The trace layer: one span per call covering its whole stream, with the
//! GenAI attributes, and exactly one terminal report per call.

use crate::support;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{stream, StreamExt};
use support::{scripted, texts, Scripted, Step};
use toolstack::{tool, ToolError, ToolInfo, ToolOutput, ToolRequest, ToolStream};
use toolstack_layers::trace::{OnEnd, StreamSummary, TraceLayer};
use tower::{Layer, Service, ServiceExt};
use tracing::Span;

use support::capture::Capture;

const OPENED: &str = "tool call opened";
const ENDED: &str = "tool call ended";
const FAILED: &str = "tool call failed";
const DROPPED: &str = "tool call dropped before its end";

fn request() -> ToolRequest {
    ToolRequest::new("scripted", "{}").with_id("call_7")
}

/// A tool whose response future fails with `err`.
fn failing_tool(
    err: ToolError,
) -> impl Service<
    ToolRequest,
    Response = ToolStream,
    Error = ToolError,
    Future = impl std::future::Future<Output = Result<ToolStream, ToolError>>,
> + Clone {
    tower::service_fn(move |_: ToolRequest| {
        let err = err.clone();
        async move { Err::<ToolStream, _>(err) }
    })
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_span_is_named_execute_tool_with_the_gen_ai_attributes() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc = TraceLayer::new().layer(Scripted::new(vec![vec![Step::Text(1, "a")]]));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    texts(stream).await;

    let span = capture.tool_span();
    let field = |name: &str| span.fields.get(name).map(String::as_str);
    assert_eq!(field("otel.name"), Some("execute_tool scripted"));
    assert_eq!(field("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(field("gen_ai.tool.name"), Some("scripted"));
    assert_eq!(field("gen_ai.tool.call.id"), Some("call_7"));
    assert_eq!(field("error.type"), None, "no error, no error.type");
    assert_eq!(field("otel.status_code"), None);
    assert_eq!(capture.events_with(OPENED).len(), 1);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_reports_end_of_stream_with_item_count() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc = TraceLayer::new().layer(Scripted::new(vec![vec![
        Step::Text(1, "a"),
        Step::Text(1, "bb"),
        Step::Text(1, "ccc"),
    ]]));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    texts(stream).await;

    let ended = capture.events_with(ENDED);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].field("items"), Some("3"));
    assert_eq!(ended[0].field("bytes"), Some("6"));
    assert_eq!(ended[0].field("outcome"), Some("completed"));
    assert!(ended[0].field("duration_ms").is_some());
    assert!(ended[0].parent.is_some(), "reported inside the span");
    assert!(capture.events_with(DROPPED).is_empty());
    assert!(capture.events_with(FAILED).is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_records_error_type_on_failure_of_a_stream_item() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc = TraceLayer::new().layer(Scripted::new(vec![vec![
        Step::Text(1, "a"),
        Step::Fail(1, ToolError::invalid_arguments("no city")),
    ]]));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["a", "ERR(invalid_arguments)"]);

    let span = capture.tool_span();
    assert_eq!(
        span.fields.get("error.type").map(String::as_str),
        Some("invalid_arguments")
    );
    assert_eq!(
        span.fields.get("otel.status_code").map(String::as_str),
        Some("ERROR")
    );
    let failed = capture.events_with(FAILED);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].level, tracing::Level::WARN);
    assert_eq!(failed[0].field("error.type"), Some("invalid_arguments"));
    assert_eq!(failed[0].field("error.message"), Some("no city"));
    let ended = capture.events_with(ENDED);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].field("outcome"), Some("failed"));
    assert_eq!(ended[0].field("items"), Some("1"));
    assert!(capture.events_with(DROPPED).is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_records_error_type_on_failure_of_the_response_future() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc = TraceLayer::new().layer(failing_tool(ToolError::not_found("no such tool")));
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .expect_err("the call fails");
    assert_eq!(err.kind().as_str(), "not_found");

    let span = capture.tool_span();
    assert_eq!(
        span.fields.get("error.type").map(String::as_str),
        Some("not_found")
    );
    assert_eq!(
        span.fields.get("otel.status_code").map(String::as_str),
        Some("ERROR")
    );
    assert_eq!(capture.events_with(FAILED).len(), 1);
    let ended = capture.events_with(ENDED);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].field("outcome"), Some("failed"));
    assert_eq!(ended[0].field("items"), Some("0"));
    assert!(capture.events_with(OPENED).is_empty());
    assert!(capture.events_with(DROPPED).is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_reports_early_drop_as_cancelled() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc =
        TraceLayer::new().layer(Scripted::new(vec![vec![Step::Text(1, "a"), Step::Hang]]));
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    drop(stream);

    let dropped = capture.events_with(DROPPED);
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].field("outcome"), Some("cancelled"));
    assert_eq!(dropped[0].field("items"), Some("1"));
    assert!(dropped[0].parent.is_some(), "reported inside the span");
    assert!(capture.events_with(ENDED).is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_reports_a_dropped_response_future_as_cancelled() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc =
        TraceLayer::new().layer(Scripted::new(vec![vec![Step::Text(1, "a")]]).open_after(100));
    let future = svc.ready().await.unwrap().call(request());
    let timed_out = tokio::time::timeout(Duration::from_millis(10), future).await;
    assert!(timed_out.is_err());

    let dropped = capture.events_with(DROPPED);
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].field("outcome"), Some("cancelled"));
    assert_eq!(dropped[0].field("items"), Some("0"));
    assert!(capture.events_with(ENDED).is_empty());
    assert!(capture.events_with(OPENED).is_empty());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_error_then_drop_is_not_an_early_drop() {
    let capture = Capture::default();
    let _guard = capture.install();
    let mut svc = TraceLayer::new().layer(Scripted::new(vec![vec![
        Step::Text(1, "a"),
        Step::Fail(1, ToolError::failed("boom")),
        Step::Hang,
    ]]));
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.next().await.unwrap().is_err());
    drop(stream);

    assert!(capture.events_with(DROPPED).is_empty());
    let ended = capture.events_with(ENDED);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].field("outcome"), Some("failed"));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_records_arguments_only_when_opted_in_and_truncated() {
    let arguments = r#"{"city":"Zürich"}"#;
    // `ü` takes bytes 10 and 11: a cut at 11 falls back to 10.
    for (layer, expected) in [
        (TraceLayer::new(), None),
        (
            TraceLayer::new().record_arguments(11),
            Some(r#"{"city":"Z…"#),
        ),
        (TraceLayer::new().record_arguments(100), Some(arguments)),
    ] {
        let capture = Capture::default();
        let _guard = capture.install();
        let mut svc = layer.layer(Scripted::new(vec![vec![Step::Text(1, "a")]]));
        let req = ToolRequest::new("scripted", arguments);
        let stream = svc.ready().await.unwrap().call(req).await.unwrap();
        texts(stream).await;

        let span = capture.tool_span();
        assert_eq!(
            span.fields
                .get("gen_ai.tool.call.arguments")
                .map(String::as_str),
            expected
        );
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_records_output_only_when_opted_in_and_truncated() {
    let json_tool = || {
        tower::service_fn(|_: ToolRequest| async {
            Ok::<_, ToolError>(ToolStream::new(stream::iter([
                Ok(ToolOutput::text("héllo ")),
                Ok(ToolOutput::json(serde_json::json!({"rows": [1, 2, 3]}))),
            ])))
        })
    };
    for (layer, expected) in [
        (TraceLayer::new(), None),
        (
            TraceLayer::new().record_output(100),
            Some(r#"héllo {"rows":[1,2,3]}"#),
        ),
        // `é` takes bytes 1 and 2.
        (TraceLayer::new().record_output(2), Some("h…")),
        (TraceLayer::new().record_output(12), Some(r#"héllo {"row…"#)),
    ] {
        let capture = Capture::default();
        let _guard = capture.install();
        let mut svc = layer.layer(json_tool());
        let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
        assert_eq!(stream.count().await, 2);

        let span = capture.tool_span();
        assert_eq!(
            span.fields
                .get("gen_ai.tool.call.result")
                .map(String::as_str),
            expected
        );
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_span_is_entered_while_the_tool_runs() {
    let capture = Capture::default();
    let _guard = capture.install();
    let chatty = tower::service_fn(|_: ToolRequest| {
        tracing::info!(at = "call");
        async {
            tracing::info!(at = "future");
            let items = stream::once(async {
                tracing::info!(at = "stream");
                Ok(ToolOutput::text("x"))
            });
            Ok::<_, ToolError>(ToolStream::new(items))
        }
    });
    let mut svc = TraceLayer::new().layer(chatty);
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(texts(stream).await, ["x"]);

    let spans = capture.spans();
    let events = capture.events();
    for at in ["call", "future", "stream"] {
        let event = events
            .iter()
            .find(|e| e.field("at") == Some(at))
            .unwrap_or_else(|| panic!("no event at {at}"));
        let parent = event.parent.map(|i| spans[i].name);
        assert_eq!(parent, Some("execute_tool"), "event at {at}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_calls_custom_closures_and_unit_turns_a_hook_off() {
    let capture = Capture::default();
    let _guard = capture.install();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (on_end_log, on_failure_log, on_drop_log) = (log.clone(), log.clone(), log.clone());
    let layer = TraceLayer::new()
        .make_span_with(|req: &ToolRequest| tracing::info_span!("custom", tool = req.name()))
        .on_open(())
        .on_end(move |summary: &StreamSummary, _: &Span| {
            on_end_log.lock().unwrap().push(format!(
                "end {} {}",
                summary.outcome(),
                summary.items()
            ));
        })
        .on_failure(move |err: &ToolError, _: Duration, _: &Span| {
            on_failure_log
                .lock()
                .unwrap()
                .push(format!("failure {}", err.kind()));
        })
        .on_early_drop(move |summary: &StreamSummary, _: &Span| {
            on_drop_log
                .lock()
                .unwrap()
                .push(format!("drop {}", summary.outcome()));
        });
    let mut svc = layer.layer(Scripted::new(vec![
        vec![Step::Text(1, "a"), Step::Fail(1, ToolError::failed("x"))],
        vec![Step::Text(1, "a"), Step::Hang],
    ]));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    texts(stream).await;
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    stream.next().await;
    drop(stream);

    assert_eq!(
        *log.lock().unwrap(),
        ["failure failed", "end failed 1", "drop cancelled"]
    );
    assert!(capture.events_with(OPENED).is_empty(), "on_open(()) is off");
    assert!(capture.events_with(ENDED).is_empty());
    let spans = capture.spans();
    assert_eq!(spans.len(), 2);
    assert!(spans.iter().all(|s| s.name == "custom"));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn trace_passes_items_through_unchanged() {
    let dropped = Arc::new(AtomicBool::new(false));
    let steps = vec![
        Step::Text(1, "a"),
        Step::Text(1, "b"),
        Step::Fail(1, ToolError::new(toolstack::ErrorKind::Denied, "no")),
    ];
    let plain = texts(scripted(steps.clone(), dropped.clone())).await;
    let mut svc = TraceLayer::new().layer(Scripted::new(vec![steps]));
    let traced = texts(svc.ready().await.unwrap().call(request()).await.unwrap()).await;
    assert_eq!(traced, plain);
}

/// An [`OnEnd`] that reports itself disabled but keeps the summaries.
#[derive(Clone, Default)]
struct Quiet(Arc<Mutex<Vec<StreamSummary>>>);

impl<R> OnEnd<R> for Quiet {
    fn on_end(&mut self, summary: &StreamSummary, _: &Span) {
        self.0.lock().unwrap().push(*summary);
    }

    fn is_enabled(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_passes_through_untouched_when_nothing_listens() {
    // Nothing listens on this thread. (A subscriber, even one that never
    // enables anything, is needed: with none, the interest that other
    // tests' subscribers register would let the span through.)
    let _guard = support::logs::set_default(tracing::subscriber::NoSubscriber::default());
    let quiet = Quiet::default();
    let layer = TraceLayer::new()
        .on_open(())
        .on_failure(())
        .on_early_drop(())
        .on_end(quiet.clone());
    let mut svc = layer.layer(Scripted::new(vec![vec![
        Step::Text(5, "abc"),
        Step::Text(5, "de"),
    ]]));
    let stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.span().is_disabled());
    texts(stream).await;

    // No span was made and no hook is asked: a hook that says it is not
    // enabled is never called (so no clock is read and no item sized).
    assert!(quiet.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_traced_tool_in_a_toolbox_still_sees_its_description_in_the_request() {
    // No layer forwards a description: the toolbox puts it in the request.
    let t = tool::raw(
        ToolInfo::new("noop").with_description("does nothing"),
        |req| {
            let seen = req.info().and_then(|i| i.description()).map(str::to_owned);
            futures_util::stream::iter([Ok(ToolOutput::text(format!("{seen:?}")))])
        },
    );
    let toolbox = toolstack::Toolbox::new().layered(t, TraceLayer::new());
    assert_eq!(toolbox.infos().next().unwrap().name(), "noop");
    let items = texts(
        toolbox
            .oneshot(ToolRequest::new("noop", "{}"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(items, ["Some(\"does nothing\")"]);
}
