//! What an MCP operation is on: a [`Target`] (a tool, a prompt, a
//! resource), its name bounded before any span or metric records it.

use std::sync::Arc;

/// The most of a tool's or prompt's name, or of a resource's URI, that a
/// span or a metric records.
const MAX_TARGET_BYTES: usize = 512;

/// What an operation is on, when it is on one thing.
#[derive(Clone, Debug, Default)]
pub(crate) enum Target {
    /// `initialize`, `tools/list`, `ping`…
    #[default]
    None,
    /// `tools/call`: `gen_ai.tool.name`, and the span's name.
    Tool(Arc<str>),
    /// `prompts/get`: `gen_ai.prompt.name`, and the span's name.
    Prompt(Arc<str>),
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`:
    /// `mcp.resource.uri` on the span only. A URI is too many values for
    /// a span name or a metric's attribute (the conventions keep it out of
    /// both).
    Resource(Arc<str>),
}

impl Target {
    /// `tools/call` of `name`.
    pub(crate) fn tool(name: &str) -> Self {
        Target::Tool(bounded(name))
    }

    /// `prompts/get` of `name`.
    pub(crate) fn prompt(name: &str) -> Self {
        Target::Prompt(bounded(name))
    }

    /// An operation on the resource at `uri`.
    pub(crate) fn resource(uri: &str) -> Self {
        Target::Resource(bounded(uri))
    }

    /// What names the span after the method: a tool's or a prompt's name.
    pub(super) fn name(&self) -> Option<&str> {
        match self {
            Target::Tool(name) | Target::Prompt(name) => Some(name),
            Target::None | Target::Resource(_) => None,
        }
    }

    pub(super) fn tool_name(&self) -> Option<&str> {
        match self {
            Target::Tool(name) => Some(name),
            _ => None,
        }
    }

    pub(super) fn prompt_name(&self) -> Option<&str> {
        match self {
            Target::Prompt(name) => Some(name),
            _ => None,
        }
    }

    pub(super) fn resource_uri(&self) -> Option<&str> {
        match self {
            Target::Resource(uri) => Some(uri),
            _ => None,
        }
    }
}

/// A name or URI the peer sent, cut (on a character boundary) to
/// [`MAX_TARGET_BYTES`]: spans and metrics never hold more of it.
fn bounded(text: &str) -> Arc<str> {
    if text.len() <= MAX_TARGET_BYTES {
        return Arc::from(text);
    }
    Arc::from(&text[..text.floor_char_boundary(MAX_TARGET_BYTES)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_recorded_within_bounds() {
        let long = "é".repeat(400);
        let Target::Resource(uri) = Target::resource(&long) else {
            unreachable!()
        };
        assert!(uri.len() <= MAX_TARGET_BYTES && long.starts_with(&*uri));
        assert_eq!(uri.len(), MAX_TARGET_BYTES);
        assert_eq!(Target::prompt("greet").name(), Some("greet"));
        assert_eq!(Target::resource("file:///a").name(), None);
        assert_eq!(Target::tool("add").tool_name(), Some("add"));
    }
}
