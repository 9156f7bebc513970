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
//! belong to the text: [`ToolRequest::set_arguments`](crate::ToolRequest::set_arguments) starts a new text
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
//!
//! * `rules`: the two rules, the size bound, and their messages;
//! * `findings`: what the readers found about a request's text, read once;
//! * `canonical`: the one JSON form arguments are compared and hashed by.

mod canonical;
mod findings;
mod rules;

pub use canonical::{canonical, canonical_into};
#[cfg(any(feature = "mcp", test))]
pub(crate) use findings::parsed_already;
pub(crate) use findings::Findings;
pub use findings::{checked, parsed};
pub use rules::{
    check, check_object_start, check_size, not_an_object, not_json, not_json_in, or_empty_object,
    parse, parse_object, prepare, too_large, DEFAULT_MAX_ARGUMENT_BYTES, MAX_DEPTH,
};
pub(crate) use rules::{is_too_deep, kind_of, refuses_depth};
