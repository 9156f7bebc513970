//! [`ToolRequest`]: one call of a tool, as the model asked for it.
//!
//! The arguments are kept exactly as the model sent them (raw JSON text);
//! a tool parses them once, into its own argument type. Per-call data that
//! is not part of the arguments — the caller's identity, options, a deadline
//! — travels in [`http::Extensions`], as it does in an HTTP request.
//!
//! ```
//! use toolstack::ToolRequest;
//!
//! #[derive(Clone, Debug, PartialEq)]
//! struct Caller(&'static str);
//!
//! let req = ToolRequest::new("add", r#"{"a":1,"b":2}"#)
//!     .with_id("call_1")
//!     .with_extension(Caller("alice"));
//! let retry = req.clone(); // cheap: shared strings, small extension map
//! assert_eq!(retry.name(), "add");
//! assert_eq!(retry.arguments(), r#"{"a":1,"b":2}"#);
//! assert_eq!(retry.extensions().get::<Caller>(), Some(&Caller("alice")));
//! ```

use std::fmt;
use std::sync::Arc;

use http::Extensions;

// A shared empty id, so that a request without one costs no allocation.
static EMPTY_ID: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));

/// One call of a tool: call id, tool name, raw JSON arguments, extensions.
///
/// Cloning shares the strings (reference-counted) and clones the extension
/// map, so a retry layer can keep a copy of each request.
#[derive(Clone, Default)]
pub struct ToolRequest {
    id: Arc<str>,
    name: Arc<str>,
    arguments: Arc<str>,
    extensions: Extensions,
}

impl ToolRequest {
    /// A request to call `name` with `arguments` (JSON text) and an empty id.
    pub fn new(name: impl Into<Arc<str>>, arguments: impl Into<Arc<str>>) -> Self {
        ToolRequest {
            id: EMPTY_ID.clone(),
            name: name.into(),
            arguments: arguments.into(),
            extensions: Extensions::new(),
        }
    }

    /// Sets the call id (the model's `tool_call_id`).
    pub fn with_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.id = id.into();
        self
    }

    /// Inserts a per-call value into the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The call id, empty when the caller gave none.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The call id as a shared string.
    pub fn id_shared(&self) -> &Arc<str> {
        &self.id
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's name as a shared string.
    pub fn name_shared(&self) -> &Arc<str> {
        &self.name
    }

    /// The arguments exactly as sent (JSON text, possibly malformed).
    pub fn arguments(&self) -> &str {
        &self.arguments
    }

    /// The arguments as a shared string.
    pub fn arguments_shared(&self) -> &Arc<str> {
        &self.arguments
    }

    /// Per-call data.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// Per-call data, mutably (a layer may add to it).
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// Replaces the arguments.
    pub fn set_arguments(&mut self, arguments: impl Into<Arc<str>>) {
        self.arguments = arguments.into();
    }

    /// Replaces the tool's name (e.g. to route an alias).
    pub fn set_name(&mut self, name: impl Into<Arc<str>>) {
        self.name = name.into();
    }

    /// Splits the request into its parts.
    pub fn into_parts(self) -> RequestParts {
        RequestParts {
            id: self.id,
            name: self.name,
            arguments: self.arguments,
            extensions: self.extensions,
        }
    }
}

/// The parts of a [`ToolRequest`], owned.
#[derive(Clone, Debug, Default)]
pub struct RequestParts {
    /// The call id.
    pub id: Arc<str>,
    /// The tool's name.
    pub name: Arc<str>,
    /// The raw JSON arguments.
    pub arguments: Arc<str>,
    /// Per-call data.
    pub extensions: Extensions,
}

impl From<RequestParts> for ToolRequest {
    fn from(p: RequestParts) -> Self {
        ToolRequest {
            id: p.id,
            name: p.name,
            arguments: p.arguments,
            extensions: p.extensions,
        }
    }
}

impl fmt::Debug for ToolRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRequest")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("arguments", &self.arguments)
            .field("extensions", &self.extensions)
            .finish()
    }
}
