//! The rules for a tool call's argument text, in one place.
//!
//! A model (or an MCP client, or an HTTP caller) sends a tool's arguments
//! as JSON text. Everything in toolstack that reads that text — the typed
//! tools' decoder, the HTTP endpoint, the MCP client, agent-as-tool, and
//! the validation, repair and cache layers — follows the same two rules,
//! with the same messages:
//!
//! 1. **Empty means `{}`.** Some models send `""` (or whitespace) for a tool
//!    without parameters; it is read as an empty object.
//! 2. **The arguments are a JSON object.** MCP and OpenAI both say so; an
//!    array, a string, a number, a boolean or `null` is refused with
//!    *"arguments must be a JSON object, got an array"*, and text that is not
//!    JSON with *"arguments are not valid JSON: …"*.
//!
//! Whitespace is JSON's: space, tab, line feed, carriage return. Text of
//! other whitespace only — a no-break space, say — is not empty, so it is
//! not `{}`: it is refused as not JSON, naming the character
//! (*"arguments are not valid JSON: U+00A0 is not whitespace JSON
//! allows…"*).
//!
//! **Bounds.** Argument text is refused before it is parsed when it is
//! longer than a limit ([`DEFAULT_MAX_ARGUMENT_BYTES`], 1 MiB, unless a
//! tool sets its own; the HTTP body limit, the MCP server's argument limit
//! and the validation layer's are the same by default). Nesting is bounded by serde_json's recursion limit of
//! 128: arrays and objects nested deeper than [`MAX_DEPTH`] (127 levels,
//! the arguments object included) are refused with *"arguments are nested
//! too deeply …"*, an
//! [`InvalidArguments`](crate::ErrorKind::InvalidArguments) error, never a
//! stack overflow.
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
//! // Not named by its first byte: `12abc` is not a number.
//! let err = arguments::check("12abc").unwrap_err();
//! assert!(err.message().starts_with("arguments are not valid JSON: "), "{err}");
//! ```
//!
//! **Read once.** On its way to a tool a call's text may meet several
//! readers: the HTTP endpoint checks it, a repair layer asks whether it
//! keeps the rules, a validation layer needs its value for the schema, a
//! cache its value for the key. What the first of them finds is kept with
//! the text, in the request: [`checked`] and [`parsed`] read a request's
//! text the way [`check`] and [`parse`] read any text, but a text already
//! checked is not checked again, and the value a reader parsed is lent to
//! the next one (a retry's second attempt included: a request's clones
//! hold the same text, and share what was found about it). The findings
//! belong to the text: [`ToolRequest::set_arguments`] starts a new text
//! with nothing found, so a layer that rewrites the text never leaves a
//! stale verdict behind, and nothing outside these readers can record one.
//!
//! A typed tool still reads the text itself: serde's reading of the text is
//! its contract (a duplicate field is refused, a `RawValue` borrows the
//! text, the messages point at a line and column), which a value read back
//! would not keep. The value a layer parsed is let go when a typed tool's
//! function starts, unless a clone of the request (a retry's) still holds
//! the text.
//!
//! ```
//! use toolstack::{arguments, ToolRequest};
//!
//! let request = ToolRequest::new("search", r#"{"q": "tower"}"#);
//! let first: *const serde_json::Value = arguments::parsed(&request).unwrap();
//! let retry = request.clone();
//! // The same value, not parsed again.
//! assert!(std::ptr::eq(first, arguments::parsed(&retry).unwrap()));
//! assert_eq!(arguments::checked(&retry).unwrap(), r#"{"q": "tower"}"#);
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::{ToolError, ToolRequest};

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

/// [`check`] for a request's text, once per text: a text that a reader
/// before found to keep the rules (an HTTP endpoint, a layer above, an
/// earlier attempt) is not parsed again, and one found to keep them here is
/// not parsed by the next reader that asks. The same answers and messages
/// as [`check`].
#[inline]
pub fn checked(request: &ToolRequest) -> Result<&str, ToolError> {
    let text = request.arguments();
    let findings = request.findings();
    if findings.checked.load(Ordering::Relaxed) {
        return Ok(or_empty_object(text));
    }
    match findings.value.get().map(|value| &**value) {
        // JSON already: of the rules, only the second is left to look at,
        // and `check` would name what the text is by its first byte, as
        // `kind_of` names the value.
        Some(Value::Object(_)) => {}
        Some(other) => return Err(not_an_object(kind_of(other))),
        None => {
            check(text)?;
        }
    }
    findings.checked.store(true, Ordering::Relaxed);
    Ok(or_empty_object(text))
}

/// [`parse`] for a request's text, once per text: the value is kept with
/// the request (and shared by its clones), so the next reader of the same
/// text — a cache below a validation, a retry's second attempt — gets it
/// without parsing again. The same answers and messages as [`parse`]; as
/// with it, the second rule (an object) is left to the reader.
pub fn parsed(request: &ToolRequest) -> Result<&Value, ToolError> {
    let findings = request.findings();
    if let Some(value) = findings.value.get() {
        return Ok(value);
    }
    let value = parse(request.arguments())?;
    // Another clone may have parsed the same text meanwhile: either value
    // is the text's.
    Ok(findings.value.get_or_init(|| Box::new(value)))
}

/// The value a reader already parsed from a request's text, if any: for a
/// reader that would rather parse the text itself than have the value kept.
#[cfg(any(feature = "mcp", test))]
pub(crate) fn parsed_already(request: &ToolRequest) -> Option<&Value> {
    request.findings().value.get().map(|value| &**value)
}

/// What the readers found about one argument text, kept with it in its
/// request; a new text starts with nothing found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    // The text keeps the rules and is JSON: `check` passed.
    checked: AtomicBool,
    // The text's value, as `parse` read it. Boxed: a request that no
    // reader parses (most) carries a pointer, not a `Value` (72 bytes with
    // `preserve_order`), in every open call.
    value: OnceLock<Box<Value>>,
}

impl Findings {
    /// Lets go of the value (the typed tool that reads the text itself has
    /// no use for it), keeping the verdict.
    pub(crate) fn forget_value(&mut self) {
        self.value.take();
    }
}

impl Clone for Findings {
    fn clone(&self) -> Self {
        Findings {
            checked: AtomicBool::new(self.checked.load(Ordering::Relaxed)),
            value: self.value.clone(),
        }
    }
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

/// `value` in its canonical JSON form, as JavaScript's `canonicalJSON`
/// writes it: object keys sorted by UTF-16 code units, no spaces, numbers
/// as `Number.prototype.toString` writes them (`2.0` is `2`). The one form
/// toolstack compares and hashes arguments by: the result cache's key, the
/// approval signature's digest (which the AI SDK computes the same way).
///
/// ```
/// let value = serde_json::json!({"b": [1, 2.0], "a": {"z": null, "y": "x"}});
/// assert_eq!(toolstack::arguments::canonical(&value), r#"{"a":{"y":"x","z":null},"b":[1,2]}"#);
/// ```
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    canonical_into(value, &mut out);
    out
}

/// [`canonical`], appended to `out`.
pub fn canonical_into(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_into(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_into(item, out);
            }
            out.push(']');
        }
        Value::Number(number) => match number.as_f64() {
            Some(float) if number.is_f64() => out.push_str(&js_number(float)),
            // An integer JavaScript holds exactly is written as it is;
            // a larger one is the double it becomes.
            _ => match (number.as_i64(), number.as_u64()) {
                (Some(int), _) if int.unsigned_abs() <= 1 << 53 => out.push_str(&int.to_string()),
                (_, Some(int)) if int <= 1 << 53 => out.push_str(&int.to_string()),
                _ => out.push_str(&js_number(number.as_f64().unwrap_or(f64::NAN))),
            },
        },
        other => out.push_str(&other.to_string()),
    }
}

/// `x` as JavaScript's `Number.prototype.toString` writes it: the
/// shortest digits that read back, in plain notation from 1e-6 to below
/// 1e21, else in exponent notation (`1e+21`, `1.5e-7`).
fn js_number(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    if !x.is_finite() {
        // JSON has none; `JSON.stringify` writes `null`.
        return "null".to_owned();
    }
    let abs = x.abs();
    if (1e-6..1e21).contains(&abs) {
        return format!("{x}");
    }
    let exp = format!("{x:e}");
    match exp.split_once('e') {
        Some((mantissa, power)) if !power.starts_with('-') => format!("{mantissa}e+{power}"),
        _ => exp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_javascript_writes_them() {
        for (x, js) in [
            (1.0, "1"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (2.5e300, "2.5e+300"),
            (-3.75, "-3.75"),
        ] {
            assert_eq!(js_number(x), js, "{x}");
        }
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_spaces() {
        let value: Value =
            serde_json::from_str(r#"{"b": [1, 2.0, {"z": null, "a": "x\ny"}], "a": true}"#)
                .unwrap();
        assert_eq!(
            canonical(&value),
            r#"{"a":true,"b":[1,2,{"a":"x\ny","z":null}]}"#
        );
    }

    fn kept(request: &ToolRequest) -> Option<&Value> {
        parsed_already(request)
    }

    #[test]
    fn a_value_parsed_once_is_lent_to_the_requests_clones_and_dies_with_its_text() {
        let mut request = ToolRequest::new("t", r#"{"a": 1}"#);
        let retry = request.clone();
        let value: *const Value = parsed(&request).unwrap();
        assert!(std::ptr::eq(value, kept(&retry).unwrap()), "shared");

        request.set_arguments(r#"{"a": 2}"#);
        assert_eq!(kept(&request), None, "a new text starts with nothing found");
        assert_eq!(parsed(&request).unwrap()["a"], 2);
        // The clone keeps its own text, and what was found about it.
        assert_eq!(kept(&retry).unwrap()["a"], 1);
    }

    #[test]
    fn a_verdict_is_forgotten_with_its_text() {
        let mut request = ToolRequest::new("t", "{}");
        assert_eq!(checked(&request).unwrap(), "{}");
        request.set_arguments("[1]");
        let err = checked(&request).unwrap_err();
        assert_eq!(
            err.message(),
            "arguments must be a JSON object, got an array"
        );
    }

    #[test]
    fn checked_says_what_check_says_whether_or_not_a_value_was_parsed() {
        for text in [
            "",
            " \n",
            "{}",
            r#"{"a": [1, {"b": null}]}"#,
            "[1, 2]",
            r#""text""#,
            "42",
            "-1",
            "true",
            "false",
            "null",
            "{oops",
            "\u{a0}{}",
        ] {
            let expected = check(text).map_err(|err| err.message().to_owned());
            let fresh = ToolRequest::new("t", text);
            let got = checked(&fresh).map_err(|err| err.message().to_owned());
            assert_eq!(got, expected, "{text:?}, nothing found before");
            // Asked again: the verdict kept (or the check made again).
            let again = checked(&fresh).map_err(|err| err.message().to_owned());
            assert_eq!(again, expected, "{text:?}, asked again");

            let after_parse = ToolRequest::new("t", text);
            let _ = parsed(&after_parse);
            let got = checked(&after_parse).map_err(|err| err.message().to_owned());
            assert_eq!(got, expected, "{text:?}, after a parse");
        }
    }

    #[test]
    fn a_typed_tool_lets_go_of_a_value_nothing_else_holds() {
        let request = ToolRequest::new("t", r#"{"a": 1}"#);
        parsed(&request).unwrap();
        let (parts, _) = request.into_parts();
        assert!(parts.findings.value.get().is_none());

        let request = ToolRequest::new("t", r#"{"a": 1}"#);
        parsed(&request).unwrap();
        let retry = request.clone();
        let (parts, _) = request.into_parts();
        assert!(parts.findings.value.get().is_some(), "a clone holds it");
        drop(retry);
    }
}
