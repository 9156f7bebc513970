//! Validate: arguments are checked against the input schema before the
//! call; a mismatch names each JSON pointer and what was expected, and the
//! tool is not called.
#![cfg(feature = "validate")]

use crate::support;

use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use support::CountClones;
use toolstack::{
    tool, BoxTool, Describe, ErrorKind, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest,
    Toolbox,
};
use toolstack_layers::validate::{Validate, ValidateLayer, ValidationError};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

fn forecast_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"]
                }
            }
        },
        "required": ["city"],
        "additionalProperties": false
    })
}

type Echo = stream::Iter<std::array::IntoIter<ToolItem, 1>>;

/// A tool that echoes its raw arguments and counts its calls.
fn echo(calls: &Arc<AtomicUsize>) -> tool::RawTool<impl Fn(ToolRequest) -> Echo + Clone> {
    let calls = calls.clone();
    tool::raw(
        ToolInfo::new("forecast").with_input_schema(forecast_schema()),
        move |req| {
            calls.fetch_add(1, Ordering::SeqCst);
            stream::iter([Ok(ToolOutput::text(req.arguments()))])
        },
    )
}

async fn call_echo(arguments: &str) -> (Result<String, ToolError>, usize) {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ValidateLayer::new().layer_on(echo(&calls));
    let result = match svc
        .oneshot(ToolRequest::new("forecast", arguments.to_owned()))
        .await
    {
        Ok(s) => {
            let items: Vec<_> = s.collect().await;
            Ok(items[0].as_ref().unwrap().as_text().unwrap().to_owned())
        }
        Err(e) => Err(e),
    };
    (result, calls.load(Ordering::SeqCst))
}

/// `Layer::layer`, named so the tests read left to right, erased into a
/// [`BoxTool`] as a toolbox would hold it: its calls carry the tool's
/// description, which the layer validates against.
trait LayerOn {
    fn layer_on<S>(&self, s: S) -> BoxTool
    where
        S: Describe + Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: futures_util::Stream<Item = ToolItem> + Send + 'static;
}

impl LayerOn for ValidateLayer {
    fn layer_on<S>(&self, s: S) -> BoxTool
    where
        S: Describe + Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: futures_util::Stream<Item = ToolItem> + Send + 'static,
    {
        let info = s.info().clone();
        BoxTool::with_info(info, tower_layer::Layer::layer(self, s))
    }
}

fn violations(err: &ToolError) -> &ValidationError {
    err.source()
        .and_then(|s| s.downcast_ref::<ValidationError>())
        .expect("the source is a ValidationError")
}

#[tokio::test]
async fn valid_arguments_reach_the_tool_unchanged() {
    let args = r#"{ "city": "Paris",  "days": 3, "items": [{"name": "a"}] }"#;
    let (result, calls) = call_echo(args).await;
    assert_eq!(result.unwrap(), args);
    assert_eq!(calls, 1);
}

#[tokio::test]
async fn a_wrong_type_names_the_pointer_and_the_expected_type() {
    let (result, calls) = call_echo(r#"{"city": "Paris", "days": "x"}"#).await;
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert_eq!(
        err.message(),
        r#"invalid arguments: /days: "x" is not of type "integer""#
    );
    let v = &violations(&err).violations()[0];
    assert_eq!(v.pointer(), "/days");
    assert_eq!(v.keyword(), "type");
    assert_eq!(v.schema_path(), "/properties/days/type");
    assert_eq!(v.message(), r#""x" is not of type "integer""#);
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn a_missing_required_field_is_reported_at_the_root() {
    let (result, calls) = call_echo(r#"{"days": 2}"#).await;
    let err = result.unwrap_err();
    assert_eq!(
        err.message(),
        r#"invalid arguments: (root): "city" is a required property"#
    );
    let v = &violations(&err).violations()[0];
    assert_eq!(v.pointer(), "");
    assert_eq!(v.keyword(), "required");
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn empty_arguments_are_read_as_an_empty_object() {
    let (result, _) = call_echo("  ").await;
    assert_eq!(
        result.unwrap_err().message(),
        r#"invalid arguments: (root): "city" is a required property"#
    );
}

#[tokio::test]
async fn every_violation_is_listed_on_its_own_line() {
    let (result, calls) = call_echo(r#"{"days": 0, "items": [{"name": "a"}, {"name": 5}]}"#).await;
    let err = result.unwrap_err();
    let lines: Vec<&str> = err.message().lines().collect();
    assert_eq!(lines[0], "invalid arguments:");
    let mut rest = lines[1..].to_vec();
    rest.sort_unstable();
    assert_eq!(
        rest,
        [
            r#"(root): "city" is a required property"#,
            "/days: 0 is less than the minimum of 1",
            r#"/items/1/name: 5 is not of type "string""#,
        ]
    );
    let mut pointers: Vec<&str> = violations(&err)
        .violations()
        .iter()
        .map(|v| v.pointer())
        .collect();
    pointers.sort_unstable();
    assert_eq!(pointers, ["", "/days", "/items/1/name"]);
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn an_unexpected_property_is_named() {
    let (result, calls) = call_echo(r#"{"city": "Paris", "colour": "red"}"#).await;
    let err = result.unwrap_err();
    assert_eq!(
        err.message(),
        "invalid arguments: (root): Additional properties are not allowed ('colour' was unexpected)"
    );
    assert_eq!(
        violations(&err).violations()[0].keyword(),
        "additionalProperties"
    );
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn malformed_json_is_invalid_arguments_with_the_parser_message() {
    let (result, calls) = call_echo(r#"{"city": "Par"#).await;
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message()
            .starts_with("arguments are not valid JSON: EOF while parsing"),
        "{}",
        err.message()
    );
    assert!(err
        .source()
        .is_some_and(|s| s.downcast_ref::<serde_json::Error>().is_some()));
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn a_long_list_of_violations_keeps_and_lists_the_first_ten_and_counts_the_rest() {
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let svc = Validate::with_schema(
        service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(stream::empty::<ToolItem>()) }),
        &schema,
    )
    .unwrap();
    let args = serde_json::to_string(&(0..12).collect::<Vec<_>>()).unwrap();
    let err = svc.oneshot(ToolRequest::new("t", args)).await.unwrap_err();
    assert_eq!(err.message().lines().count(), 1 + 10 + 1);
    assert!(err.message().ends_with("… and 2 more"));
    let source = violations(&err);
    assert_eq!(source.violations().len(), 10);
    assert_eq!(source.violations()[9].pointer(), "/9");
    assert_eq!(source.unlisted(), 2);
    assert!(source.to_string().ends_with("; … and 2 more"), "{source}");
}

#[tokio::test]
async fn a_hundred_thousand_violations_format_only_ten() {
    let schema = json!({"type": "array", "items": {"type": "string"}});
    let svc = Validate::with_schema(
        service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(stream::empty::<ToolItem>()) }),
        &schema,
    )
    .unwrap();
    let args = serde_json::to_string(&vec![0; 100_000]).unwrap();
    let err = svc.oneshot(ToolRequest::new("t", args)).await.unwrap_err();
    assert!(
        err.message().ends_with("… and 99990 more"),
        "{}",
        err.message()
    );
    assert_eq!(violations(&err).violations().len(), 10);
}

#[tokio::test]
async fn oversized_arguments_are_refused_before_they_are_parsed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ValidateLayer::new()
        .max_argument_bytes(64)
        .layer_on(echo(&calls));
    // Not even JSON: the size is what it is refused for.
    let args = format!("{{\"city\": \"{}", "x".repeat(100));
    let err = svc
        .clone()
        .oneshot(ToolRequest::new("forecast", args))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert_eq!(
        err.message(),
        "arguments are 110 bytes; the limit for `forecast` is 64 bytes"
    );
    assert!(err.source().is_none(), "nothing was parsed");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // At the limit, it is validated as usual.
    let args = format!(r#"{{"city": "{}"}}"#, "x".repeat(50));
    assert_eq!(args.len(), 62);
    let stream = svc.oneshot(ToolRequest::new("forecast", args)).await;
    assert!(stream.is_ok());
}

#[tokio::test]
async fn the_default_argument_limit_is_the_one_typed_tools_use() {
    let (result, calls) = call_echo(&format!(
        r#"{{"city": "{}"}}"#,
        "x".repeat(toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES)
    ))
    .await;
    let err = result.unwrap_err();
    assert!(
        err.message()
            .ends_with("the limit for `forecast` is 1048576 bytes"),
        "{}",
        err.message()
    );
    assert_eq!(calls, 0);
    let schema = json!({"type": "object"});
    let fixed = Validate::with_schema(
        service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(stream::empty::<ToolItem>()) }),
        &schema,
    )
    .unwrap()
    .max_argument_bytes(2);
    let err = fixed
        .oneshot(ToolRequest::new("t", "{ }"))
        .await
        .unwrap_err();
    assert!(err.message().contains("is 2 bytes"), "{}", err.message());
}

#[tokio::test]
async fn deeply_nested_arguments_are_a_typed_error_not_a_stack_overflow() {
    let args = format!(
        r#"{{"city": "Paris", "items": {}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (result, calls) = call_echo(&args).await;
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message()
            .starts_with("arguments are nested too deeply: at most 127 levels"),
        "{}",
        err.message()
    );
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn no_break_spaces_are_not_json_and_name_the_character() {
    let (result, calls) = call_echo("\u{a0}").await;
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message()
            .starts_with("arguments are not valid JSON: U+00A0 is not whitespace JSON allows"),
        "{}",
        err.message()
    );
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn a_huge_offending_value_is_cut_in_the_message() {
    let big = "é".repeat(1000);
    let (result, _) = call_echo(&json!({"city": "Paris", "days": big}).to_string()).await;
    let err = result.unwrap_err();
    assert!(err.message().len() < 400, "{}", err.message().len());
    assert!(err.message().ends_with('…'));
    assert!(violations(&err).violations()[0].message().len() > 2000);
}

#[tokio::test]
async fn a_violations_message_is_cut_after_four_kilobytes() {
    let big = "x".repeat(100_000);
    let (result, _) = call_echo(&json!({"city": "Paris", "days": big}).to_string()).await;
    let err = result.unwrap_err();
    let message = violations(&err).violations()[0].message();
    assert!(message.len() <= 4096 + '…'.len_utf8(), "{}", message.len());
    assert!(message.starts_with("\"xxx") && message.ends_with('…'));
}

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct WeatherArgs {
    city: String,
    days: Option<u8>,
}

#[tokio::test]
async fn works_for_a_function_tool_in_a_service_builder_and_a_toolbox() {
    let weather = tool::from_fn("weather", |args: WeatherArgs| async move {
        Ok::<_, ToolError>(format!("{} for {} days", args.city, args.days.unwrap_or(1)))
    });
    let tb = Toolbox::new().layered(weather, ServiceBuilder::new().layer(ValidateLayer::new()));
    assert_eq!(tb.infos().next().unwrap().name(), "weather");
    let ok = tb
        .clone()
        .oneshot(ToolRequest::new("weather", r#"{"city":"Oslo","days":2}"#))
        .await
        .unwrap();
    let items: Vec<_> = ok.collect().await;
    assert_eq!(
        items[0].as_ref().unwrap().as_text(),
        Some("Oslo for 2 days")
    );

    let err = tb
        .oneshot(ToolRequest::new(
            "weather",
            r#"{"city":"Oslo","days":"two"}"#,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message()
            .starts_with(r#"invalid arguments: /days: "two" is not of type"#),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn with_schema_validates_an_undescribed_service() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, stream::Empty<ToolItem>>();
    let schema = json!({"type": "object", "required": ["q"]});
    let mut svc = Validate::with_schema(mock, &schema).unwrap();
    handle.allow(1);

    let err = svc
        .ready()
        .await
        .unwrap()
        .call(ToolRequest::new("search", "{}"))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        r#"invalid arguments: (root): "q" is a required property"#
    );

    // The call makes the service ready in its own future: run it.
    let call = tokio::spawn(
        svc.ready()
            .await
            .unwrap()
            .call(ToolRequest::new("search", r#"{"q":"rust"}"#)),
    );
    // Only the valid call reached the service.
    let (req, send) = handle.next_request().await.unwrap();
    assert_eq!(req.arguments(), r#"{"q":"rust"}"#);
    send.send_response(stream::empty());
    assert!(call.await.unwrap().is_ok());
}

#[test]
fn an_invalid_schema_is_a_typed_error() {
    let svc =
        service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(stream::empty::<ToolItem>()) });
    let err = Validate::with_schema(svc, &json!({"type": 5})).unwrap_err();
    assert!(
        err.to_string().starts_with("invalid input schema: "),
        "{err}"
    );

    let info = ToolInfo::new("bad").with_input_schema(json!({"type": "objekt"}));
    let bad = tool::raw(info, |_| stream::empty::<ToolItem>());
    let schema = bad.info().input_schema().clone();
    assert!(Validate::with_schema(bad, &schema).is_err());
}

#[tokio::test]
async fn the_layer_passes_calls_through_when_the_schema_does_not_compile() {
    let info = ToolInfo::new("bad").with_input_schema(json!({"type": "objekt"}));
    let bad = tool::raw(info, |_| stream::iter([Ok(ToolOutput::text("ran"))]));
    let svc = ValidateLayer::new().layer_on(bad);
    let items: Vec<_> = svc
        .oneshot(ToolRequest::new("bad", "[1]"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items[0].as_ref().unwrap().as_text(), Some("ran"));
}

#[tokio::test]
async fn a_clone_keeps_validating_after_the_original_is_dropped() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ValidateLayer::new().layer_on(echo(&calls));
    let copy = svc.clone();
    drop(svc);
    let err = copy
        .oneshot(ToolRequest::new("forecast", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_call_that_carries_no_description_is_refused_not_waved_through() {
    let calls = Arc::new(AtomicUsize::new(0));
    // Called directly, not through a toolbox: nothing to validate against.
    let svc = tower_layer::Layer::layer(&ValidateLayer::new(), echo(&calls));
    let err = svc
        .oneshot(ToolRequest::new("forecast", r#"{"city":"Oslo"}"#))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(!err.is_retryable());
    assert!(
        err.message().starts_with(
            "cannot validate the arguments of `forecast`: the request carries no tool description"
        ),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn one_validate_shared_by_two_tools_checks_each_against_its_own_schema() {
    let number = ToolInfo::new("number").with_input_schema(json!({
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]
    }));
    let text = ToolInfo::new("text").with_input_schema(json!({
        "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]
    }));
    let inner = service_fn(|_: ToolRequest| async {
        Ok::<_, ToolError>(stream::iter([Ok(ToolOutput::text("ran"))]))
    });
    // Clones share the compiled schemas: the first tool's and the others'.
    let shared = tower_layer::Layer::layer(&ValidateLayer::new(), inner);
    let tb = Toolbox::new()
        .boxed(BoxTool::with_info(number, shared.clone()))
        .boxed(BoxTool::with_info(text, shared));
    for _ in 0..2 {
        for (name, good, bad) in [
            ("number", r#"{"x":1}"#, r#"{"x":"a"}"#),
            ("text", r#"{"x":"a"}"#, r#"{"x":1}"#),
        ] {
            let ok = tb.clone().oneshot(ToolRequest::new(name, good)).await;
            assert!(ok.is_ok(), "{name} {good}");
            let err = tb
                .clone()
                .oneshot(ToolRequest::new(name, bad))
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{name} {bad}");
        }
    }
}

#[tokio::test]
async fn validate_clones_the_tool_only_for_a_call_that_has_to_wait() {
    use toolstack_layers::concurrency::ConcurrencyLimitLayer;

    let calls = Arc::new(AtomicUsize::new(0));
    let clones = Arc::new(AtomicUsize::new(0));
    let limited = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(1))
        .service(CountClones {
            inner: echo(&calls),
            clones: clones.clone(),
        });
    let mut svc = Validate::with_schema(limited, &forecast_schema()).unwrap();
    let good = || ToolRequest::new("forecast", r#"{"city":"Oslo"}"#);

    // Bounded: a Validate that held on to a permit would hang here.
    let within = |f| tokio::time::timeout(std::time::Duration::from_secs(5), f);

    // Ready at once: called in place, no clone.
    let call = svc.ready().await.unwrap().call(good());
    let first = within(call).await.expect("opens at once").unwrap();
    assert_eq!(clones.load(Ordering::SeqCst), 0);

    // The one permit is held by `first`'s stream: this call has to wait,
    // so its future takes the waiting handle and the Validate a clone.
    let waiting = svc.ready().await.unwrap().call(good());
    assert_eq!(clones.load(Ordering::SeqCst), 1);
    drop(first);
    let second = within(waiting)
        .await
        .expect("opens once the permit is back")
        .unwrap();
    let items: Vec<_> = second.collect().await;
    assert_eq!(items.len(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
