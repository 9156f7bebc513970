//! Bad input never panics and never reaches the function: each case is a
//! typed `InvalidArguments` (or `NotFound`) error that names the problem.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::{tool, ErrorKind, ToolError, ToolRequest, Toolbox};
use tower::ServiceExt;

#[allow(dead_code)] // the fields exist to be decoded
#[derive(Debug, Deserialize, JsonSchema)]
struct Order {
    item: String,
    quantity: u32,
    address: Address,
    tags: Option<Vec<String>>,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
struct Address {
    street: String,
    zip: String,
}

fn toolbox(calls: Arc<AtomicUsize>) -> Toolbox {
    let order = tool::from_fn("order", move |o: Order| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(format!("{} x{}", o.item, o.quantity)) }
    })
    .max_argument_bytes(256);
    Toolbox::new().tool(order)
}

async fn error_for(args: &str) -> (ToolError, usize) {
    let calls = Arc::new(AtomicUsize::new(0));
    let err = toolbox(calls.clone())
        .oneshot(ToolRequest::new("order", args))
        .await
        .expect_err("bad arguments must fail the call");
    (err, calls.load(Ordering::SeqCst))
}

const GOOD: &str = r#"{"item":"tea","quantity":2,"address":{"street":"1 Main","zip":"01"}}"#;

#[tokio::test]
async fn good_arguments_reach_the_function() {
    let calls = Arc::new(AtomicUsize::new(0));
    let stream = toolbox(calls.clone())
        .oneshot(ToolRequest::new("order", GOOD))
        .await
        .unwrap();
    let r = toolstack::ToolResult::collect(stream).await;
    assert_eq!(r.text(), "tea x2");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn malformed_json_is_invalid_arguments() {
    let (err, calls) = error_for(r#"{"item":"tea","quantity":2"#).await;
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message().starts_with("arguments are not valid JSON"),
        "{err}"
    );
    assert_eq!(calls, 0);
    let (err, _) = error_for("{item: tea}").await;
    assert!(err.message().contains("not valid JSON"), "{err}");
}

#[tokio::test]
async fn non_object_arguments_say_what_was_sent() {
    for (args, kind) in [
        ("[1,2]", "an array"),
        ("\"tea\"", "a string"),
        ("42", "a number"),
        ("null", "null"),
        ("true", "a boolean"),
    ] {
        let (err, calls) = error_for(args).await;
        assert_eq!(err.kind(), ErrorKind::InvalidArguments);
        assert_eq!(
            err.message(),
            format!("arguments must be a JSON object, got {kind}")
        );
        assert_eq!(calls, 0);
    }
}

#[tokio::test]
async fn wrong_type_names_the_field_path() {
    let (err, _) =
        error_for(r#"{"item":"tea","quantity":"two","address":{"street":"1 Main","zip":"01"}}"#)
            .await;
    assert!(
        err.message().starts_with("invalid value at `quantity`"),
        "{err}"
    );
    assert!(err.message().contains("expected u32"), "{err}");

    let (err, _) =
        error_for(r#"{"item":"tea","quantity":1,"address":{"street":"1 Main","zip":7}}"#).await;
    assert!(
        err.message().starts_with("invalid value at `address.zip`"),
        "{err}"
    );

    let (err, _) = error_for(
        r#"{"item":"tea","quantity":1,"address":{"street":"x","zip":"1"},"tags":["a",3]}"#,
    )
    .await;
    assert!(
        err.message().starts_with("invalid value at `tags[1]`"),
        "{err}"
    );

    let (err, _) =
        error_for(r#"{"item":"tea","quantity":-1,"address":{"street":"x","zip":"1"}}"#).await;
    assert!(err.message().contains("`quantity`"), "{err}");
}

#[tokio::test]
async fn missing_required_fields_are_named() {
    let (err, calls) = error_for(r#"{"item":"tea","address":{"street":"x","zip":"1"}}"#).await;
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("missing field `quantity`"), "{err}");
    assert_eq!(calls, 0);
    let (err, _) = error_for(r#"{"item":"tea","quantity":1,"address":{"street":"x"}}"#).await;
    assert!(err.message().contains("`address`"), "{err}");
    assert!(err.message().contains("missing field `zip`"), "{err}");
}

#[tokio::test]
async fn empty_arguments_read_as_an_empty_object() {
    let (err, _) = error_for("   ").await;
    assert!(err.message().contains("missing field `item`"), "{err}");
}

#[tokio::test]
async fn oversized_arguments_are_refused_before_decoding() {
    let big = format!(
        r#"{{"item":"{}","quantity":1,"address":{{"street":"x","zip":"1"}}}}"#,
        "t".repeat(300)
    );
    let (err, calls) = error_for(&big).await;
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(
        err.message().contains("the limit for `order` is 256 bytes"),
        "{err}"
    );
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn default_argument_limit_is_one_mebibyte() {
    assert_eq!(tool::DEFAULT_MAX_ARGUMENT_BYTES, 1 << 20);
    let t = tool::from_fn("echo", |v: serde_json::Value| async move {
        Ok::<_, ToolError>(v)
    });
    let big = format!("{{\"s\":\"{}\"}}", "x".repeat(1 << 20));
    let err = t.oneshot(ToolRequest::new("echo", big)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
}

#[tokio::test]
async fn unknown_tool_is_not_found_and_lists_the_tools() {
    let err = toolbox(Arc::default())
        .oneshot(ToolRequest::new("ordr", GOOD))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.message(),
        "unknown tool `ordr`; did you mean `order`? available tools: order"
    );
    assert_eq!(
        err.to_model_json(),
        serde_json::json!({"error": err.message(), "kind": "not_found"})
    );
}
