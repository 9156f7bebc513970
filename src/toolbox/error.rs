//! The toolbox's errors: a duplicate tool, a refused name or prefix.

use std::fmt;
use std::sync::Arc;

/// A tool of this name is already in the toolbox.
#[derive(Debug, Clone)]
pub struct DuplicateTool {
    name: Arc<str>,
    clash: Clash,
}

/// What was being done when the names clashed, for the message.
#[derive(Debug, Clone)]
pub(super) enum Clash {
    Insert,
    Merge,
    Nest(Arc<str>),
    Rename(Arc<str>),
}

impl DuplicateTool {
    pub(super) fn new(name: Arc<str>, clash: Clash) -> Self {
        DuplicateTool { name, clash }
    }

    /// The duplicated name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for DuplicateTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match &self.clash {
            Clash::Insert => write!(f, "a tool named `{name}` is already in the toolbox"),
            Clash::Merge => write!(
                f,
                "cannot merge the toolboxes: both have a tool named `{name}`"
            ),
            Clash::Nest(prefix) => write!(
                f,
                "cannot nest under `{prefix}`: a tool named `{name}` is already in the toolbox"
            ),
            Clash::Rename(from) => write!(
                f,
                "cannot rename `{from}` to `{name}`: a tool named `{name}` is already in the toolbox"
            ),
        }
    }
}

impl std::error::Error for DuplicateTool {}

/// Why a toolbox could not be nested, prefixed or renamed as asked; the
/// toolbox is left as it was.
#[derive(Debug, Clone)]
pub struct ToolboxError {
    pub(super) kind: ToolboxErrorKind,
    pub(super) name: Arc<str>,
    pub(super) message: String,
}

/// What a [`ToolboxError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolboxErrorKind {
    /// The name is already taken.
    Duplicate,
    /// There is no tool of that name.
    UnknownTool,
    /// The name or prefix is not a valid tool name.
    InvalidName,
}

impl ToolboxError {
    pub(super) fn invalid_name(name: impl Into<Arc<str>>, message: String) -> Self {
        ToolboxError {
            kind: ToolboxErrorKind::InvalidName,
            name: name.into(),
            message,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ToolboxErrorKind {
        self.kind
    }

    /// The name at fault: the taken name, the missing tool, or the invalid
    /// name or prefix.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl From<DuplicateTool> for ToolboxError {
    fn from(err: DuplicateTool) -> Self {
        ToolboxError {
            kind: ToolboxErrorKind::Duplicate,
            message: err.to_string(),
            name: err.name,
        }
    }
}

impl fmt::Display for ToolboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolboxError {}
