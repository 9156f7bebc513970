//! The rules for a tool call's argument text, in one place.
//!
//! A model (or an MCP client, or an HTTP caller) sends a tool's arguments
//! as JSON text. Everything in toolstack that reads that text — the typed
//! tools' decoder, the validation layer, the HTTP endpoint, the MCP client
//! and agent-as-tool — follows the same two rules, with the same messages:
//!
//! 1. **Empty means `{}`.** Some models send `""` (or whitespace) for a tool
//!    without parameters; it is read as an empty object.
//! 2. **The arguments are a JSON object.** MCP and OpenAI both say so; an
//!    array, a string, a number, a boolean or `null` is refused with
//!    *"arguments must be a JSON object, got an array"*, and text that is not
//!    JSON with *"arguments are not valid JSON: …"*.
//!
//! ```
//! use toolstack::arguments;
//!
//! assert_eq!(arguments::or_empty_object("  "), "{}");
//! assert!(arguments::parse_object(r#"{"a":1}"#).is_ok());
//!
//! let err = arguments::parse_object("[1, 2]").unwrap_err();
//! assert_eq!(err.message(), "arguments must be a JSON object, got an array");
//! let err = arguments::parse_object("{oops").unwrap_err();
//! assert!(err.message().starts_with("arguments are not valid JSON: "), "{err}");
//! ```

use serde_json::{Map, Value};

use crate::ToolError;

/// The argument text with rule 1 applied: `"{}"` for empty or all-whitespace
/// text, the text itself otherwise.
#[inline]
pub fn or_empty_object(text: &str) -> &str {
    if text.trim_ascii().is_empty() {
        "{}"
    } else {
        text
    }
}

/// Rule 2, checked on the first significant byte without parsing: the
/// error for text that is JSON but not an object, or `Ok` for text that
/// starts like an object (or is not JSON at all, which the parser that
/// follows reports with its position).
///
/// Empty text is not checked here; apply [`or_empty_object`] first.
pub fn check_object_start(text: &str) -> Result<(), ToolError> {
    let found = match text.trim_ascii_start().as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "a number",
        _ => return Ok(()),
    };
    Err(not_an_object(found))
}

/// Both rules, with a full parse: the arguments as a JSON object (rule 1
/// gives an empty map).
pub fn parse_object(text: &str) -> Result<Map<String, Value>, ToolError> {
    let text = or_empty_object(text);
    check_object_start(text)?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(not_an_object(kind_of(&other))),
        Err(err) => Err(not_json(err)),
    }
}

/// The error for argument text that does not parse as JSON.
pub fn not_json(err: serde_json::Error) -> ToolError {
    ToolError::invalid_arguments(format!("arguments are not valid JSON: {err}")).with_source(err)
}

/// The error for arguments that are JSON but not an object; `found` names
/// what they are instead ("an array", "a string", …).
pub fn not_an_object(found: &str) -> ToolError {
    ToolError::invalid_arguments(format!("arguments must be a JSON object, got {found}"))
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
