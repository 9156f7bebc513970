//! Schemas inferred from argument types, and the OpenAI strict-mode form.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use toolstack::{schema_for, strict_schema, tool, Describe, ToolError, ToolInfo};

/// Book a trip.
#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Trip {
    /// Who travels.
    traveller: Person,
    /// Stops, in order.
    stops: Vec<Stop>,
    /// Seat class; economy when left out.
    class: Option<Class>,
    notes: Option<String>,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Person {
    name: String,
    age: Option<u8>,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Stop {
    city: String,
    nights: u32,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Class {
    Economy,
    Business,
}

/// Follows every `$ref` in `schema`, failing if one does not resolve.
fn assert_refs_resolve(root: &Value, node: &Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get("$ref") {
                let target = r.strip_prefix('#').expect("local ref");
                assert!(root.pointer(target).is_some(), "unresolved $ref {r}");
            }
            map.values().for_each(|v| assert_refs_resolve(root, v));
        }
        Value::Array(items) => items.iter().for_each(|v| assert_refs_resolve(root, v)),
        _ => {}
    }
}

#[test]
fn nested_types_keep_their_definitions() {
    let schema = schema_for::<Trip>();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["description"], "Book a trip.");
    let defs = schema["$defs"].as_object().expect("$defs");
    for name in ["Person", "Stop", "Class"] {
        assert!(defs.contains_key(name), "missing definition {name}");
    }
    assert_refs_resolve(&schema, &schema);
    assert_eq!(
        schema["properties"]["traveller"]["description"],
        "Who travels."
    );
}

#[test]
fn option_fields_are_not_required_and_enums_are_enums() {
    let schema = schema_for::<Trip>();
    assert_eq!(schema["required"], json!(["traveller", "stops"]));
    assert_eq!(schema["$defs"]["Person"]["required"], json!(["name"]));
    assert_eq!(
        schema["$defs"]["Class"]["enum"],
        json!(["economy", "business"])
    );
    assert_eq!(schema["$defs"]["Class"]["type"], "string");
}

#[test]
fn strict_mode_requires_everything_and_makes_optional_nullable() {
    let strict = strict_schema(&schema_for::<Trip>());
    assert!(strict.get("$schema").is_none());
    assert_eq!(
        strict["required"],
        json!(["traveller", "stops", "class", "notes"])
    );
    assert_eq!(strict["additionalProperties"], json!(false));
    assert_eq!(
        strict["properties"]["notes"]["type"],
        json!(["string", "null"])
    );
    // An optional reference becomes an alternative with null.
    let class = &strict["properties"]["class"];
    let alts = class["anyOf"]
        .as_array()
        .expect("anyOf for an optional $ref");
    assert!(alts.contains(&json!({"type": "null"})));
    // Nested objects in $defs are strict too.
    let person = &strict["$defs"]["Person"];
    assert_eq!(person["required"], json!(["name", "age"]));
    assert_eq!(person["additionalProperties"], json!(false));
    assert_eq!(
        person["properties"]["age"]["type"],
        json!(["integer", "null"])
    );
    let stop = &strict["$defs"]["Stop"];
    assert_eq!(stop["additionalProperties"], json!(false));
    assert_refs_resolve(&strict, &strict);
}

#[test]
fn strict_mode_leaves_the_original_untouched() {
    let info = ToolInfo::new("trip").with_input_schema_for::<Trip>();
    let before = info.input_schema().clone();
    let _ = info.strict_input_schema();
    assert_eq!(info.input_schema(), &before);
}

#[test]
fn openai_function_form() {
    let t = tool::from_fn("trip", |_: Trip| async { Ok::<_, ToolError>("booked") })
        .with_description("Books a trip");
    let f = t.info().to_openai_function(true);
    assert_eq!(f["type"], "function");
    assert_eq!(f["function"]["name"], "trip");
    assert_eq!(f["function"]["description"], "Books a trip");
    assert_eq!(f["function"]["strict"], true);
    assert_eq!(f["function"]["parameters"]["additionalProperties"], false);
    let loose = t.info().to_openai_function(false);
    assert!(loose["function"].get("strict").is_none());
    assert_eq!(
        loose["function"]["parameters"]["required"],
        json!(["traveller", "stops"])
    );
}

#[test]
fn tool_info_serializes_in_mcp_shape() {
    let info = ToolInfo::new("trip")
        .with_description("Books a trip")
        .with_input_schema(json!({"type": "object"}))
        .with_annotations(toolstack::ToolAnnotations::new().read_only());
    let v = serde_json::to_value(&info).unwrap();
    assert_eq!(
        v,
        json!({
            "name": "trip",
            "description": "Books a trip",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true}
        })
    );
    let back: ToolInfo = serde_json::from_value(v).unwrap();
    assert_eq!(back, info);
}
