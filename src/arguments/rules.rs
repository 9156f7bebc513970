//! The rules for a tool call's argument text — empty means `{}`, the
//! arguments are a JSON object, at most so many bytes, nested at most
//! [`MAX_DEPTH`] deep — and the messages every reader refuses text with.

use serde_json::{Map, Value};

use crate::ToolError;

/// The deepest nesting of arrays and objects that argument text may have,
/// the arguments object included: one under serde_json's recursion limit
/// (128), which every parse of argument text in toolstack runs under.
pub const MAX_DEPTH: usize = 127;

/// Argument text longer than this (in bytes) is refused before it is
/// parsed, unless a tool sets its own limit (with
/// [`FnTool::max_argument_bytes`](crate::FnTool::max_argument_bytes)).
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// The text a decoder reads: `{}` for empty text, and an early refusal of
/// text that cannot be an object (an array, a string, a number, …) — the
/// two rules checked before any parse. A decoder of its own type
/// (`serde_json::from_str`) reports what is left, through [`not_json_in`].
#[inline]
pub fn prepare(text: &str) -> Result<&str, ToolError> {
    let text = or_empty_object(text);
    check_object_start(text)?;
    Ok(text)
}

/// Checks the rules without building a value (JSON syntax included), and
/// gives the text a decoder should read (`{}` for empty text).
pub fn check(text: &str) -> Result<&str, ToolError> {
    let text = prepare(text)?;
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|err| not_json_in(text, err))?;
    Ok(text)
}

/// The arguments as a JSON value, read by the first rule (empty is `{}`);
/// text that is not JSON is refused with the rules' messages. The second
/// rule (an object) is left to the reader: a schema, or
/// [`parse_object`].
pub fn parse(text: &str) -> Result<Value, ToolError> {
    let text = or_empty_object(text);
    serde_json::from_str(text).map_err(|err| not_json_in(text, err))
}

/// The argument text with rule 1 applied: `"{}"` for empty text or text of
/// JSON's whitespace only (space, tab, line feed, carriage return), the
/// text itself otherwise.
#[inline]
pub fn or_empty_object(text: &str) -> &str {
    if text.trim_ascii().is_empty() {
        "{}"
    } else {
        text
    }
}

/// Rule 2, checked on the first significant byte: `Ok` for text that
/// starts like an object (or like nothing JSON has, which the parser that
/// follows reports with its position), without parsing; for text that
/// starts like another value, the text is parsed to tell the error — "must
/// be a JSON object, got a number" for `42`, "not valid JSON" for `12abc`.
///
/// Empty text is not checked here; apply [`or_empty_object`] first.
pub fn check_object_start(text: &str) -> Result<(), ToolError> {
    let start = text.trim_ascii_start();
    let found = match start.as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "a number",
        Some(0x80..) => return check_unicode_space(start),
        _ => return Ok(()),
    };
    // The first byte only guesses: `not json` is not null, nor `12abc` a
    // number. On this path — a refusal — the text is read whole, to name
    // what it is, or say it is not JSON.
    match serde_json::from_str::<serde::de::IgnoredAny>(start) {
        Ok(_) => Err(not_an_object(found)),
        Err(err) => Err(not_json_in(start, err)),
    }
}

/// The error for `text`, which does not parse as JSON: as [`not_json`],
/// but naming whitespace JSON does not allow (a no-break space) when the
/// text starts with it, where the parser would only say "expected value".
pub fn not_json_in(text: &str, err: serde_json::Error) -> ToolError {
    match check_unicode_space(text.trim_ascii_start()) {
        Err(space) => space.with_source(err),
        Ok(()) => not_json(err),
    }
}

/// Whitespace JSON does not allow, where a parser would only say "expected
/// value": text that looks blank but is not `{}`.
fn check_unicode_space(text: &str) -> Result<(), ToolError> {
    match text.chars().next() {
        Some(c) if c.is_whitespace() => Err(ToolError::invalid_arguments(format!(
            "arguments are not valid JSON: U+{:04X} is not whitespace JSON allows \
             (only space, tab, line feed and carriage return are)",
            u32::from(c)
        ))),
        _ => Ok(()),
    }
}

/// Both rules, with a full parse: the arguments as a JSON object (rule 1
/// gives an empty map).
pub fn parse_object(text: &str) -> Result<Map<String, Value>, ToolError> {
    let text = or_empty_object(text);
    check_object_start(text)?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(not_an_object(kind_of(&other))),
        Err(err) => Err(not_json_in(text, err)),
    }
}

/// The size rule: `Ok` for argument text of at most `limit` bytes, else
/// the error that names the tool and the limit (*"arguments are 2000000
/// bytes; the limit for `search` is 1048576 bytes"*). Checked before any
/// parse.
#[inline]
pub fn check_size(text: &str, tool: &str, limit: usize) -> Result<(), ToolError> {
    if text.len() <= limit {
        return Ok(());
    }
    Err(too_large(text.len(), tool, limit))
}

/// The error for arguments of `len` bytes, over the `limit` of `tool`.
pub fn too_large(len: usize, tool: &str, limit: usize) -> ToolError {
    ToolError::invalid_arguments(format!(
        "arguments are {len} bytes; the limit for `{tool}` is {limit} bytes"
    ))
}

/// The error for argument text that does not parse as JSON (or nests
/// deeper than [`MAX_DEPTH`]).
pub fn not_json(err: serde_json::Error) -> ToolError {
    let message = if is_too_deep(&err) {
        format!(
            "arguments are nested too deeply: at most {MAX_DEPTH} levels of arrays and objects \
             ({err})"
        )
    } else {
        format!("arguments are not valid JSON: {err}")
    };
    ToolError::invalid_arguments(message).with_source(err)
}

/// Whether `err` is serde_json's recursion limit, which it reports as a
/// syntax error with no code of its own to match.
pub(crate) fn is_too_deep(err: &serde_json::Error) -> bool {
    err.is_syntax() && err.to_string().starts_with("recursion limit exceeded")
}

/// Whether `err`, from one of these readers, refuses text for its nesting
/// (deeper than [`MAX_DEPTH`]) rather than for not being JSON: for a reader
/// that takes text that is not JSON as text.
pub(crate) fn refuses_depth(err: &ToolError) -> bool {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<serde_json::Error>())
        .is_some_and(is_too_deep)
}

/// The error for arguments that are JSON but not an object; `found` names
/// what they are instead ("an array", "a string", …).
pub fn not_an_object(found: &str) -> ToolError {
    ToolError::invalid_arguments(format!("arguments must be a JSON object, got {found}"))
}

/// What a JSON value is, for a message ("an array", "null", …).
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
