//! The call path's no-copy promises (issue 12): a request references
//! `&'static str`s and moves `String`s in, a JSON output stays the text it
//! was serialized to, and a collected one-item result hands that text over
//! without a copy.

use futures_util::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use toolstack::{tool, Json, ToolError, ToolOutput, ToolRequest, ToolResult, Toolbox};
use tower::ServiceExt;

#[derive(Deserialize, schemars::JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

#[derive(Serialize)]
struct Sum {
    sum: f64,
}

const ARGS: &str = r#"{"a": 1.5, "b": 2.25}"#;

#[test]
fn a_request_references_static_text_and_moves_owned_text() {
    let request = ToolRequest::new("add", ARGS).with_id("call_1");
    assert_eq!(request.arguments().as_ptr(), ARGS.as_ptr());
    assert_eq!(request.name().as_ptr(), "add".as_ptr());

    let owned = String::from(ARGS);
    let at = owned.as_ptr();
    let request = ToolRequest::new("add".to_owned(), owned);
    assert_eq!(request.arguments().as_ptr(), at);
    // A clone shares the text.
    assert_eq!(request.clone().arguments().as_ptr(), at);
}

#[test]
fn a_typed_output_is_its_json_text_and_the_model_gets_that_text_uncopied() {
    let add = tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(Sum { sum: a + b })
    });
    let toolbox = Toolbox::new().tool(add);
    let mut items: Vec<_> = toolbox
        .clone()
        .oneshot(ToolRequest::new("add", ARGS))
        .now_or_never()
        .unwrap()
        .unwrap()
        .collect::<Vec<_>>()
        .now_or_never()
        .unwrap();
    let item = items.pop().unwrap().unwrap();
    let json = item.as_json().expect("a JSON item");
    assert_eq!(json.as_str(), r#"{"sum":3.75}"#);
    assert_eq!(json.value(), serde_json::json!({"sum": 3.75}));

    let at = json.as_str().as_ptr();
    let mut result = ToolResult::default();
    result.push(item);
    assert_eq!(result.content.len(), 1);
    assert_eq!(
        result.structured_content(),
        Some(serde_json::json!({"sum": 3.75}))
    );
    let text = result.into_text();
    assert_eq!(text, r#"{"sum":3.75}"#);
    assert_eq!(
        text.as_ptr(),
        at,
        "the one item's text is moved, not copied"
    );
}

#[test]
fn several_items_keep_their_order_and_several_json_items_are_an_array() {
    let mut result = ToolResult::default();
    result.push(ToolOutput::text("rows:"));
    result.push(ToolOutput::progress(toolstack::Progress::new(1.0)));
    result.push(ToolOutput::json(serde_json::json!([1, 2])));
    result.push(ToolOutput::to_json(&Sum { sum: 3.0 }).unwrap());
    assert_eq!(
        result.content.len(),
        3,
        "progress is not part of the result"
    );
    assert_eq!(result.text(), "rows:\n[1,2]\n{\"sum\":3.0}");
    assert_eq!(
        result.structured_content(),
        Some(serde_json::json!([[1, 2], {"sum": 3.0}]))
    );
    assert_eq!(
        serde_json::to_string(&result).unwrap(),
        concat!(
            r#"{"content":[{"type":"text","text":"rows:"},{"type":"text","text":"[1,2]"},"#,
            r#"{"type":"text","text":"{\"sum\":3.0}"}],"structuredContent":[[1,2],{"sum":3.0}],"isError":false}"#
        )
    );
    let items: Vec<ToolOutput> = result.content.into_iter().collect();
    assert_eq!(items[0].as_text(), Some("rows:"));
    assert_eq!(items[2].as_json().map(Json::as_str), Some(r#"{"sum":3.0}"#));
}

#[test]
fn json_text_too_deep_to_read_back_is_a_string_not_a_panic() {
    let json: Json = serde_json::from_str::<serde_json::Value>("1")
        .unwrap()
        .into();
    assert_eq!(json.value(), serde_json::json!(1));
    // A `Json` made by serializing a deep value parses back only so far.
    let value = (0..200).fold(serde_json::json!([]), |inner, _| serde_json::json!([inner]));
    let json = Json::from(value);
    assert!(json.as_str().starts_with("[[[["));
    assert!(json.value().is_string());
}

#[test]
fn items_are_small_enough_to_move_cheaply() {
    assert!(std::mem::size_of::<ToolOutput>() <= 32);
    assert!(std::mem::size_of::<toolstack::ToolItem>() <= 32);
    assert!(std::mem::size_of::<ToolRequest>() <= 24);
}
