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
        .oneshot(ToolRequest::new("order", args.to_owned()))
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
    assert_eq!(toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES, 1 << 20);
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

#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
    Kelvin,
}

#[allow(dead_code)]
#[derive(Debug, Deserialize, JsonSchema)]
struct Reading {
    unit: Unit,
    history: Option<Vec<Unit>>,
}

async fn reading_error(args: &str) -> ToolError {
    let t = tool::from_fn("read", |_: Reading| async { Ok::<_, ToolError>("ok") });
    t.oneshot(ToolRequest::new("read", args.to_owned()))
        .await
        .expect_err("bad arguments must fail the call")
}

#[tokio::test]
async fn an_enum_given_a_number_null_or_an_array_names_the_field_and_the_allowed_values() {
    for (args, path, found) in [
        (r#"{"unit": 42}"#, "unit", "got `42`"),
        (r#"{"unit": null}"#, "unit", "got `null`"),
        (r#"{"unit": ["celsius"]}"#, "unit", "got an array"),
        (r#"{"unit": true}"#, "unit", "got `true`"),
        (
            r#"{"unit": "kelvin", "history": ["celsius", 7]}"#,
            "history[1]",
            "got `7`",
        ),
    ] {
        let err = reading_error(args).await;
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{args}");
        assert_eq!(
            err.message(),
            format!(
                "invalid value at `{path}`: {found}, expected one of `celsius`, `fahrenheit`, `kelvin`"
            ),
            "{args}"
        );
    }
    // A string that is no variant was always named well by serde.
    let err = reading_error(r#"{"unit": "rankine"}"#).await;
    assert!(
        err.message()
            .starts_with("invalid value at `unit`: unknown variant `rankine`"),
        "{err}"
    );
    // Text that is not JSON is still said to be so.
    let err = reading_error(r#"{"unit": celsius}"#).await;
    assert!(
        err.message().starts_with("arguments are not valid JSON"),
        "{err}"
    );
}

#[tokio::test]
async fn arguments_of_no_break_spaces_are_refused_as_not_json_naming_the_character() {
    for args in ["\u{a0}", "\u{a0}\u{a0} ", " \u{2003}"] {
        let (err, calls) = error_for(args).await;
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{args:?}");
        assert!(
            err.message()
                .starts_with("arguments are not valid JSON: U+")
                && err.message().contains("is not whitespace JSON allows"),
            "{args:?}: {err}"
        );
        assert_eq!(calls, 0);
    }
    let (err, _) = error_for("\u{a0}").await;
    assert!(err.message().contains("U+00A0"), "{err}");
    // JSON's own whitespace alone still reads as `{}`.
    for args in ["", " ", "\t\r\n "] {
        let (err, _) = error_for(args).await;
        assert!(
            err.message().contains("missing field `item`"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(toolstack::arguments::or_empty_object("\u{a0}"), "\u{a0}");
    assert!(toolstack::arguments::parse_object("\u{a0}").is_err());
}

fn nested(depth: usize) -> String {
    // `depth` levels of arrays and objects, the arguments object included.
    format!(
        r#"{{"v":{}{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

#[tokio::test]
async fn deeply_nested_arguments_are_a_typed_error_not_a_stack_overflow() {
    let t = tool::from_fn("echo", |v: serde_json::Value| async move {
        Ok::<_, ToolError>(v)
    });
    let max = toolstack::arguments::MAX_DEPTH;
    assert_eq!(max, 127);
    let ok = t
        .clone()
        .oneshot(ToolRequest::new("echo", nested(max)))
        .await;
    assert!(ok.is_ok(), "{max} levels are allowed");
    for depth in [max + 1, 10_000, 500_000] {
        let err = t
            .clone()
            .oneshot(ToolRequest::new("echo", nested(depth)))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{depth}");
        assert!(
            err.message()
                .starts_with("arguments are nested too deeply: at most 127 levels"),
            "{depth}: {err}"
        );
    }
    // The same through the argument rules themselves (the MCP client's and
    // the HTTP router's reader).
    let err = toolstack::arguments::parse_object(&nested(1000)).unwrap_err();
    assert!(err.message().contains("nested too deeply"), "{err}");
}

fn specialist() -> toolstack::agent::AgentTool<toolstack::model::ScriptedModel> {
    use toolstack::model::{ScriptedModel, Turn};
    let agent = toolstack::agent::Agent::new(
        ScriptedModel::new([Turn::new().text("answered")]),
        Toolbox::new(),
    );
    toolstack::agent::AgentTool::new("ask", "Asks a specialist.", agent)
}

async fn ask(args: &str) -> Result<String, ToolError> {
    let stream = specialist()
        .oneshot(ToolRequest::new("ask", args.to_owned()))
        .await?;
    Ok(toolstack::ToolResult::collect(stream).await.text())
}

#[tokio::test]
async fn an_agent_tool_refuses_a_message_that_is_not_a_string() {
    for (args, got) in [
        (r#"{"message": 42}"#, "a number"),
        (r#"{"message": null}"#, "null"),
        (r#"{"message": ["hi"]}"#, "an array"),
        (r#"{"message": {"text": "hi"}}"#, "an object"),
    ] {
        let err = ask(args).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{args}");
        assert_eq!(
            err.message(),
            format!("`message` must be a string (what to ask the agent), got {got}"),
            "{args}"
        );
    }
}

#[tokio::test]
async fn an_agent_tool_refuses_an_object_without_a_message_and_takes_plain_text() {
    for args in [r#"{"question": "hi"}"#, "{}", "", "  "] {
        let err = ask(args).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{args:?}");
        assert!(
            err.message().starts_with("`message` is required"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(ask(r#"{"message": "hi"}"#).await.unwrap(), "answered");
    assert_eq!(ask("what is 2+3?").await.unwrap(), "answered");
    assert_eq!(ask(r#""quoted""#).await.unwrap(), "answered");
    // Broken JSON is plain text, as before; too big is refused unread.
    assert_eq!(ask(r#"{"message": "hi""#).await.unwrap(), "answered");
    let big = "x".repeat(toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES + 1);
    let err = ask(&big).await.unwrap_err();
    assert!(
        err.message()
            .contains("the limit for `ask` is 1048576 bytes"),
        "{err}"
    );
}
