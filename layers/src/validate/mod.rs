//! Checks a call's arguments against the tool's input schema before the
//! tool runs.
//!
//! [`Validate`] compiles the tool's JSON Schema once (with the
//! [`jsonschema`] crate), checks every call's arguments against it, and
//! answers a call that does not match with an
//! [`ErrorKind::InvalidArguments`](toolstack::ErrorKind::InvalidArguments)
//! error *without calling the tool*. The message lists each violation on a
//! line of its own — the JSON pointer of the offending value and what was
//! expected — so a model can correct its call; the error's source is a
//! [`ValidationError`] holding the same [`Violation`]s for code.
//!
//! ```
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt};
//! use toolstack::{tool, ErrorKind, ToolInfo, ToolRequest, Toolbox};
//! use toolstack_layers::validate::{ValidateLayer, ValidationError};
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let info = ToolInfo::new("forecast").with_input_schema(json!({
//!     "type": "object",
//!     "properties": {"days": {"type": "integer"}},
//!     "required": ["days"]
//! }));
//! let forecast = tool::raw(info, |_| futures_util::stream::empty());
//! let tools = Toolbox::new().layered(forecast, ServiceBuilder::new().layer(ValidateLayer::new()));
//!
//! let err = tools.oneshot(ToolRequest::new("forecast", r#"{"days":"x"}"#)).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::InvalidArguments);
//! assert_eq!(err.message(), r#"invalid arguments: /days: "x" is not of type "integer""#);
//!
//! let source = std::error::Error::source(&err).unwrap();
//! let violations = source.downcast_ref::<ValidationError>().unwrap().violations();
//! assert_eq!(violations[0].pointer(), "/days");
//! # }).unwrap();
//! ```
//!
//! Arguments follow the [argument rules](toolstack::arguments): empty
//! arguments are read as `{}`. The value parsed for the schema is kept
//! with the request ([`arguments::parsed`](toolstack::arguments::parsed)):
//! a layer below that wants it (a cache's key, an agent tool's message, an
//! MCP tool's call) does not parse the text again.
//!
//! **Bounds.** Arguments longer than
//! [`max_argument_bytes`](ValidateLayer::max_argument_bytes) (by default
//! [`DEFAULT_MAX_ARGUMENT_BYTES`](toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES), 1 MiB, the limit typed tools use) are
//! refused before they are parsed; nesting is bounded by serde_json's
//! recursion limit ([`arguments::MAX_DEPTH`](toolstack::arguments::MAX_DEPTH)).
//! Only the first ten violations are kept and formatted (the message
//! counts the rest), each cut after a few kilobytes: jsonschema quotes the
//! offending value, which may be large. (jsonschema 0.61 finds every
//! violation before its iterator yields the first; finding them is linear
//! in the bounded argument size, formatting them is what the cap saves.)
//!
//! A tool whose described schema does not
//! compile is not validated at all (see [`ValidateLayer`]); use
//! [`Validate::with_schema`] to get the [`SchemaError`] instead.

mod error;
mod future;
mod layer;
mod service;

pub use self::error::{SchemaError, ValidationError, Violation};
pub use self::future::ResponseFuture;
pub use self::layer::ValidateLayer;
pub use self::service::Validate;
