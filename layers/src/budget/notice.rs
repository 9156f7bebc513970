//! [`Cut`]: what a budget cut, where the whole output went ([`Kept`]), and
//! the default notice that says both to the model.

use std::ops::Range;
use std::time::Duration;

use super::read_tool::{DEFAULT_PAGE_BYTES, READ_TOOL_NAME};
use super::BYTES_PER_TOKEN;
use crate::text::{duration_words, thousands};

/// What a [`Budget`](super::Budget) cut from one call's output.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cut {
    /// Items cut whole, and text items cut in part.
    pub items: usize,
    /// Bytes cut.
    pub bytes: usize,
    /// The budget in items, if it has one.
    pub max_items: Option<usize>,
    /// The budget in bytes, if it has one.
    pub max_bytes: Option<usize>,
    /// Where the whole output went, when the budget keeps outputs
    /// ([`BudgetLayer::keep`](super::BudgetLayer::keep)); `None` when it
    /// does not.
    pub kept: Option<Kept>,
}

/// Whether the whole output of a cut call was kept for the model to read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kept {
    /// It is in the store, under a handle.
    Stored(KeptOutput),
    /// The store failed (the reason, for the notice and the logs): what
    /// was cut is lost.
    Failed(String),
}

/// A cut call's output, kept in an [`OutputStore`](super::OutputStore).
///
/// Offsets count bytes of the whole output as a model reads it: the
/// items' texts joined by newlines.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptOutput {
    /// What [`read_tool_result`](super::read_tool_result) is called with.
    pub handle: String,
    /// The part the model did not read (between the head and the tail).
    pub omitted: Range<usize>,
    /// How many bytes of the output are kept: all of them, unless the
    /// output was larger than the store keeps of one
    /// ([`max_output_bytes`](super::OutputStore::max_output_bytes)).
    pub kept_bytes: usize,
    /// The whole output's length.
    pub output_bytes: usize,
    /// How long it is kept.
    pub ttl: Duration,
}

impl KeptOutput {
    /// Whether the store's cap cut the kept copy short.
    pub fn is_truncated(&self) -> bool {
        self.kept_bytes < self.output_bytes
    }
}

impl Cut {
    /// The budget, in words: `50 items`, `8,000 bytes (≈ 2,000 tokens)`.
    pub fn budget(&self) -> String {
        let bytes = self.max_bytes.map(|b| {
            format!(
                "{} bytes (≈ {} tokens)",
                thousands(b),
                thousands(b / BYTES_PER_TOKEN)
            )
        });
        let items = self.max_items.map(|i| format!("{} items", thousands(i)));
        match (items, bytes) {
            (Some(i), Some(b)) => format!("{i} or {b}"),
            (Some(i), None) => i,
            (None, Some(b)) => b,
            (None, None) => "none".into(),
        }
    }
}

/// The default notice.
pub(super) fn default_notice(cut: &Cut) -> String {
    let what = format!(
        "[… {} items ({} bytes) omitted here: the output was over its budget of {}.",
        thousands(cut.items),
        thousands(cut.bytes),
        cut.budget()
    );
    match &cut.kept {
        None => format!("{what} Ask for less — narrow the query, filter, or ask for a page.]"),
        Some(Kept::Failed(_)) => format!(
            "{what} The whole output could not be kept for reading (its store failed): \
             ask for less — narrow the query, filter, or ask for a page.]"
        ),
        Some(Kept::Stored(kept)) => {
            let which = if kept.is_truncated() {
                format!(
                    "Its first {} bytes (of {}; the most the store keeps of one output) are kept",
                    thousands(kept.kept_bytes),
                    thousands(kept.output_bytes)
                )
            } else {
                format!(
                    "The whole output ({} bytes) is kept",
                    thousands(kept.output_bytes)
                )
            };
            format!(
                "{what} {which} for {}: to read the omitted part (bytes {} to {}), call {READ_TOOL_NAME} \
                 with {{\"handle\":\"{}\",\"offset\":{}}} (up to {} bytes a call; each answer says \
                 where the next page starts).]",
                duration_words(kept.ttl),
                thousands(kept.omitted.start),
                thousands(kept.omitted.end),
                kept.handle,
                kept.omitted.start,
                thousands(DEFAULT_PAGE_BYTES),
            )
        }
    }
}
