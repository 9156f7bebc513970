//! The seed's demo tools (`toolstack_demo::tools`, the ones
//! `examples/tour.rs` shows), through a toolbox: schemas and outputs.

use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::json;
use toolstack::{ErrorKind, ToolOutput, ToolRequest, ToolResult, Toolbox};
use toolstack_demo::tools as seed;
use tower::ServiceExt;

fn toolbox() -> Toolbox {
    Toolbox::new()
        .tool(seed::weather())
        .tool(seed::calculator())
        .tool(seed::clock(|| {
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        }))
        .tool(seed::read_lines())
        .tool(seed::count())
}

async fn call(name: &str, args: &str) -> ToolResult {
    match toolbox()
        .oneshot(ToolRequest::new(name.to_owned(), args.to_owned()))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        Err(err) => ToolResult::from_error(err),
    }
}

#[tokio::test]
async fn weather_schema_requires_city_and_offers_units() {
    let tb = toolbox();
    let info = tb.get("get_weather").unwrap().info();
    let schema = info.input_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["required"], json!(["city"]));
    assert_eq!(
        schema["properties"]["city"]["description"],
        "The city, e.g. \"Paris\"."
    );
    // The enum is a definition, reached by a $ref that resolves in-schema.
    let unit = &schema["properties"]["unit"];
    let reference = unit["anyOf"][0]["$ref"]
        .as_str()
        .or(unit["$ref"].as_str())
        .expect("unit refers to a definition");
    let target = schema
        .pointer(reference.trim_start_matches('#'))
        .expect("the $ref resolves inside the schema");
    assert_eq!(target["enum"], json!(["celsius", "fahrenheit"]));
    assert!(info.annotations().is_idempotent());
    assert!(info.output_schema().is_some());
}

#[tokio::test]
async fn weather_answers_in_the_requested_unit() {
    let r = call("get_weather", r#"{"city":"Paris"}"#).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        r.structured_content(),
        Some(json!({"city":"Paris","temperature":18.0,"unit":"celsius","conditions":"cloudy"}))
    );
    let r = call("get_weather", r#"{"city":"paris","unit":"fahrenheit"}"#).await;
    assert_eq!(r.structured_content().unwrap()["temperature"], json!(64.4));
}

#[tokio::test]
async fn weather_unknown_city_is_a_failure_listing_known_cities() {
    let r = call("get_weather", r#"{"city":"Atlantis"}"#).await;
    assert!(r.is_error);
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(err.message().contains("unknown city `Atlantis`"));
    assert!(err.message().contains("Paris"));
}

#[tokio::test]
async fn weather_unknown_unit_names_the_field_and_the_choices() {
    let r = call("get_weather", r#"{"city":"Paris","unit":"kelvin"}"#).await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("`unit`"), "{}", err.message());
    assert!(err.message().contains("celsius"), "{}", err.message());
}

#[tokio::test]
async fn calculator_computes_every_operation() {
    for (args, expected) in [
        (r#"{"operation":"add","a":2,"b":3}"#, 5.0),
        (r#"{"operation":"subtract","a":2,"b":3}"#, -1.0),
        (r#"{"operation":"multiply","a":2,"b":3}"#, 6.0),
        (r#"{"operation":"divide","a":3,"b":2}"#, 1.5),
        (r#"{"operation":"sqrt","a":16}"#, 4.0),
        (r#"{"operation":"power","a":2,"b":10}"#, 1024.0),
    ] {
        let r = call("calculator", args).await;
        assert_eq!(r.structured_content(), Some(json!(expected)), "{args}");
    }
}

#[tokio::test]
async fn calculator_refuses_division_by_zero_and_negative_roots() {
    let r = call("calculator", r#"{"operation":"divide","a":1,"b":0}"#).await;
    assert_eq!(r.error.unwrap().message(), "division by zero");
    let r = call("calculator", r#"{"operation":"sqrt","a":-4}"#).await;
    assert!(r.error.unwrap().message().contains("negative"));
    let r = call("calculator", r#"{"operation":"add","a":1}"#).await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("`b`"));
}

#[tokio::test]
async fn calculator_schema_lists_operations() {
    let tb = toolbox();
    let schema = tb.get("calculator").unwrap().info().input_schema().clone();
    let op = &schema["properties"]["operation"]["$ref"];
    let def = schema
        .pointer(op.as_str().unwrap().trim_start_matches('#'))
        .unwrap();
    assert_eq!(
        def["enum"],
        json!(["add", "subtract", "multiply", "divide", "sqrt", "power"])
    );
    assert_eq!(schema["required"], json!(["operation", "a"]));
}

#[tokio::test]
async fn clock_uses_its_hand_written_schema_and_offsets() {
    let tb = toolbox();
    let schema = tb.get("current_time").unwrap().info().input_schema();
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(schema["required"], json!(["timezone"]));
    let r = call("current_time", r#"{"timezone":"UTC"}"#).await;
    assert_eq!(r.text(), "2023-11-14T22:13:20+00:00");
    let r = call("current_time", r#"{"timezone":"+02:00"}"#).await;
    assert_eq!(r.text(), "2023-11-15T00:13:20+02:00");
    let r = call("current_time", r#"{"timezone":"-05:30"}"#).await;
    assert_eq!(r.text(), "2023-11-14T16:43:20-05:30");
}

#[tokio::test]
async fn clock_refuses_an_invalid_timezone() {
    let r = call("current_time", r#"{"timezone":"Mars/Olympus"}"#).await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("invalid timezone `Mars/Olympus`"));
}

#[tokio::test]
async fn read_lines_streams_each_line_as_an_item() {
    let dir = std::env::temp_dir().join(format!("toolstack-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("three.txt");
    std::fs::write(&path, "alpha\nbeta\ngamma\n").unwrap();
    let args = json!({ "path": path }).to_string();
    let stream = toolbox()
        .oneshot(ToolRequest::new("read_lines", args))
        .await
        .unwrap();
    let items: Vec<ToolOutput> = stream.map(Result::unwrap).collect().await;
    assert_eq!(
        items,
        vec![
            ToolOutput::text("alpha"),
            ToolOutput::text("beta"),
            ToolOutput::text("gamma")
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn read_lines_missing_file_is_a_failure_naming_the_path() {
    let r = call("read_lines", r#"{"path":"/nonexistent/toolstack.txt"}"#).await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(err.message().contains("/nonexistent/toolstack.txt"));
}

#[tokio::test(start_paused = true)]
async fn count_interleaves_progress_before_each_number() {
    let stream = toolbox()
        .oneshot(ToolRequest::new("count", r#"{"to":3,"delay_ms":100}"#))
        .await
        .unwrap();
    let items: Vec<ToolOutput> = stream.map(Result::unwrap).collect().await;
    assert_eq!(items.len(), 6);
    for (i, pair) in items.chunks(2).enumerate() {
        let p = pair[0].as_progress().expect("progress first");
        assert_eq!(p.progress, (i + 1) as f64);
        assert_eq!(p.total, Some(3.0));
        assert_eq!(
            pair[1].as_json().map(toolstack::Json::value),
            Some(json!(i + 1))
        );
    }
    let result = ToolResult::collect(
        toolbox()
            .oneshot(ToolRequest::new("count", r#"{"to":2}"#))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(result.structured_content(), Some(json!([1, 2])));
}
