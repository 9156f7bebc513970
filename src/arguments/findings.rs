//! Read once: [`checked`] and [`parsed`] read a request's argument text as
//! [`check`] and [`parse`] read any text, and keep what they found with
//! the text ([`Findings`]), for the next reader and the request's clones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use serde_json::Value;

use super::rules::{check, kind_of, not_an_object, or_empty_object, parse};
use crate::{ToolError, ToolRequest};

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

#[cfg(test)]
mod tests {
    use super::*;

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
