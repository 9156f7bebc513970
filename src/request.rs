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
//! let retry = req.clone(); // cheap: an atomic increment (and the extension map)
//! assert_eq!(retry.id(), "call_1");
//! assert_eq!(retry.name(), "add");
//! assert_eq!(retry.arguments(), r#"{"a":1,"b":2}"#);
//! assert_eq!(retry.extensions().get::<Caller>(), Some(&Caller("alice")));
//! ```

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::Extensions;

use crate::arguments::Findings;
use crate::ToolInfo;

/// One call of a tool: call id, tool name, raw JSON arguments, extensions.
///
/// Building one costs **one allocation**: the id, name and arguments share
/// one reference-counted block, into which owned `String`s are moved and
/// `&'static str`s are referenced, never copied. Cloning (as a retry layer
/// does for every call) costs one atomic increment plus a clone of the
/// extension map, which is free when empty.
#[derive(Clone, Default)]
pub struct ToolRequest {
    call: Arc<Parts>,
    info: Option<Arc<ToolInfo>>,
    extensions: Extensions,
}

/// What a request shares between its clones: the id, the name and the
/// argument text, in one allocation.
#[derive(Clone, Default)]
pub(crate) struct Parts {
    pub(crate) id: Cow<'static, str>,
    pub(crate) name: Cow<'static, str>,
    pub(crate) arguments: Cow<'static, str>,
    // What the argument readers found about `arguments` (see
    // `arguments::checked`): shared by the clones, which hold the same text.
    pub(crate) findings: Findings,
}

impl ToolRequest {
    /// A request to call `name` with `arguments` (JSON text) and an empty id.
    ///
    /// Owned `String`s are moved in and `&'static str`s referenced: neither
    /// is copied. (A borrowed `&str` that is not `'static` needs a
    /// `.to_owned()`.)
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        arguments: impl Into<Cow<'static, str>>,
    ) -> Self {
        ToolRequest {
            call: Arc::new(Parts {
                id: Cow::Borrowed(""),
                name: name.into(),
                arguments: arguments.into(),
                findings: Findings::default(),
            }),
            info: None,
            extensions: Extensions::new(),
        }
    }

    /// Sets the call id (the model's `tool_call_id`).
    pub fn with_id(mut self, id: impl Into<Cow<'static, str>>) -> Self {
        Arc::make_mut(&mut self.call).id = id.into();
        self
    }

    /// Inserts a per-call value into the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The call id, empty when the caller gave none.
    pub fn id(&self) -> &str {
        &self.call.id
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.call.name
    }

    /// The arguments exactly as sent (JSON text, possibly malformed).
    pub fn arguments(&self) -> &str {
        &self.call.arguments
    }

    /// The description of the tool this request was dispatched to, set by
    /// the [`BoxTool`](crate::BoxTool) (and so the [`Toolbox`](crate::Toolbox))
    /// that called it; `None` for a request that has not been through one.
    ///
    /// Layers that need to know the tool — retry asks whether it is
    /// idempotent, validation checks the arguments against its schema —
    /// read it here, so any tower layer can sit between them and the
    /// toolbox without having to forward a description.
    pub fn info(&self) -> Option<&ToolInfo> {
        self.info.as_deref()
    }

    /// The shared description of the dispatched tool (see [`info`](Self::info)).
    pub fn info_shared(&self) -> Option<&Arc<ToolInfo>> {
        self.info.as_ref()
    }

    /// Sets the description of the tool this request goes to (what a
    /// [`BoxTool`](crate::BoxTool) does when it is called).
    pub fn set_info(&mut self, info: Arc<ToolInfo>) {
        self.info = Some(info);
    }

    /// Per-call data.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// Per-call data, mutably (a layer may add to it).
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// Replaces the arguments; what the [argument
    /// readers](crate::arguments::checked) found about the old text goes
    /// with it.
    pub fn set_arguments(&mut self, arguments: impl Into<Cow<'static, str>>) {
        let call = Arc::make_mut(&mut self.call);
        call.arguments = arguments.into();
        call.findings = Findings::default();
    }

    /// Replaces the tool's name (e.g. to route an alias).
    pub fn set_name(&mut self, name: impl Into<Cow<'static, str>>) {
        Arc::make_mut(&mut self.call).name = name.into();
    }

    /// What the argument readers found about the text.
    pub(crate) fn findings(&self) -> &Findings {
        &self.call.findings
    }

    /// The call's shared data and extensions, for a tool that has read its
    /// arguments: a value a layer parsed from them is let go here, unless a
    /// clone of the request still holds the text.
    pub(crate) fn into_parts(self) -> (Arc<Parts>, Extensions) {
        let mut call = self.call;
        if let Some(parts) = Arc::get_mut(&mut call) {
            parts.findings.forget_value();
        }
        (call, self.extensions)
    }
}

impl fmt::Debug for ToolRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRequest")
            .field("id", &self.call.id)
            .field("name", &self.call.name)
            .field("arguments", &self.call.arguments)
            .field("info", &self.info.as_ref().map(|i| i.name()))
            .field("extensions", &self.extensions)
            .finish()
    }
}
