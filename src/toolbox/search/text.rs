//! What a tool is indexed by: its text for the ranking by words, and the
//! text its meaning is embedded from.

use crate::ToolInfo;

/// How much more a word of the tool's name counts than one of its
/// description (the name is repeated in the indexed text).
const NAME_WEIGHT: usize = 2;

/// What a tool is embedded by: its name (words split), then its
/// description — what it does, as a sentence model reads best.
pub(super) fn meaning_text(info: &ToolInfo) -> String {
    let name = info.name().replace(['_', '-', '.'], " ");
    match info.description() {
        Some(description) => format!("{name}: {description}"),
        None => name,
    }
}

/// What a tool is indexed by: its name (weighted), description, and its
/// parameters' names and descriptions.
pub(super) fn document(info: &ToolInfo) -> String {
    let mut text = String::new();
    for _ in 0..NAME_WEIGHT {
        text.push_str(info.name());
        text.push(' ');
    }
    if let Some(description) = info.description() {
        text.push_str(description);
        text.push(' ');
    }
    if let Some(properties) = info
        .input_schema()
        .get("properties")
        .and_then(|p| p.as_object())
    {
        for (name, property) in properties {
            text.push_str(name);
            text.push(' ');
            if let Some(description) = property.get("description").and_then(|d| d.as_str()) {
                text.push_str(description);
                text.push(' ');
            }
        }
    }
    text
}
