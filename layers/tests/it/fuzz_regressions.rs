//! Inputs the fuzz targets in `fuzz/` found, each pinned as an ordinary
//! test on stable. See `fuzz/README.md`.
#![cfg(feature = "validate")]

use futures_util::FutureExt;
use serde_json::json;
use toolstack::{tool, ErrorKind, ToolInfo, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::validate::ValidateLayer;
use tower::ServiceExt;

/// `fuzz/fuzz_targets/validate.rs`, minimised: a schema with
/// `unevaluatedProperties` and an applicator that refers back to the root.
/// jsonschema 0.61.2 (the newest) leaks such a schema's compiled validator
/// (a reference cycle through its `Arc<OnceLock>` of pending nodes), which
/// LeakSanitizer reports; a stable test cannot see the leak, so this pins
/// what toolstack does with it: the schema compiles and is enforced. The
/// layer compiles a tool's schema once and keeps it, so the leak is once
/// per `Validate` and tool, not once per call.
#[test]
fn a_schema_jsonschema_leaks_on_compiling_is_still_enforced() {
    let schema = json!({
        "unevaluatedProperties": {"type": "integer"},
        "anyOf": [{"f": ""}, {"$ref": ""}],
    });
    let info = ToolInfo::new("raw").with_input_schema(schema);
    let raw = tool::raw(info, |_| futures_util::stream::empty());
    let tools = Toolbox::new().layered(raw, ValidateLayer::new());
    let call = |arguments: &str| {
        tools
            .clone()
            .oneshot(ToolRequest::new("raw", arguments.to_owned()))
            .now_or_never()
            .expect("ready")
    };

    for _ in 0..3 {
        let stream = call(r#"{"n": 1}"#).expect("valid arguments");
        let result = ToolResult::collect(stream).now_or_never().expect("ready");
        assert!(!result.is_error, "{result:?}");
    }
    let err = call(r#"{"n": "one"}"#).expect_err("a string where an integer is due");
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("Unevaluated"), "{}", err.message());
    // The minimised input's argument text.
    let err = call("{a").expect_err("not JSON");
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
}

/// `fuzz/fuzz_targets/repair.rs`: an empty code fence (its body on the
/// info string's line) was "repaired" into empty text, which is no JSON
/// object. Now nothing is repaired.
#[test]
fn an_empty_fence_is_not_repaired_into_empty_text() {
    use toolstack_layers::repair::repair;
    assert_eq!(repair("```jso{\"\" \"\"}\n```"), None);
    assert_eq!(repair("```\n```"), None);
    // A fence with an object in it still is.
    let (fixed, rules) = repair("```json\n{\"a\": 1}\n```").unwrap();
    assert_eq!((fixed.as_str(), rules), ("{\"a\": 1}", vec!["fence"]));
}
