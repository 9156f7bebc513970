//! [`ToolResult`]: a finished response stream, collected for the model's
//! history or for an MCP `CallToolResult`.
//!
//! Progress items are transient and left out; structured JSON items become
//! the structured content (and a text copy, for clients that only read
//! text); an error — at the start or after some items — sets `is_error` and
//! adds the model-facing error text, so nothing that was emitted is lost.
//!
//! ```
//! use futures_util::stream;
//! use toolstack::{ToolError, ToolOutput, ToolResult};
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let items = stream::iter(vec![
//!     Ok(ToolOutput::text("partial")),
//!     Err(ToolError::failed("disk full")),
//! ]);
//! let result = ToolResult::collect(items).await;
//! assert!(result.is_error);
//! assert_eq!(result.text(), "partial\n{\"error\":\"disk full\",\"kind\":\"failed\"}");
//! # }).unwrap();
//! ```

use futures_core::Stream;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::{ToolError, ToolOutput};

/// A collected tool response.
///
/// It serializes in MCP's `CallToolResult` shape, the one the HTTP
/// endpoint's `result` event carries:
///
/// ```
/// use toolstack::{ToolOutput, ToolResult};
///
/// let mut result = ToolResult::default();
/// result.push(ToolOutput::json(serde_json::json!(3)));
/// assert_eq!(
///     serde_json::to_string(&result).unwrap(),
///     r#"{"content":[{"type":"text","text":"3"}],"structuredContent":3,"isError":false}"#,
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The content items in order (no progress; JSON items as text copies).
    pub content: Vec<ToolOutput>,
    /// The structured output: the JSON item, or an array when there were
    /// several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<serde_json::Value>,
    /// Whether the call ended in an error.
    #[serde(default)]
    pub is_error: bool,
    /// The error that ended the call, if any.
    #[serde(skip)]
    pub error: Option<ToolError>,
    // How many JSON items went into `structured_content`, to tell several
    // gathered items from one item that is itself an array.
    #[serde(skip)]
    json_items: usize,
}

impl ToolResult {
    /// Collects a whole response stream. The first error ends collection.
    pub async fn collect<S>(stream: S) -> ToolResult
    where
        S: Stream<Item = Result<ToolOutput, ToolError>>,
    {
        let mut stream = std::pin::pin!(stream);
        let mut result = ToolResult::default();
        while let Some(item) = stream.next().await {
            match item {
                Ok(output) => result.push(output),
                Err(err) => {
                    result.push_error(err);
                    break;
                }
            }
        }
        result
    }

    /// The result of a call that failed before producing anything.
    pub fn from_error(err: ToolError) -> ToolResult {
        let mut result = ToolResult::default();
        result.push_error(err);
        result
    }

    /// Adds one stream item (progress is ignored).
    pub fn push(&mut self, output: ToolOutput) {
        match output {
            ToolOutput::Progress(_) => {}
            ToolOutput::Json { value } => {
                self.content.push(ToolOutput::text(value.to_string()));
                self.json_items += 1;
                self.structured_content = Some(match self.structured_content.take() {
                    None => value,
                    Some(serde_json::Value::Array(mut many)) if self.json_items > 2 => {
                        many.push(value);
                        serde_json::Value::Array(many)
                    }
                    Some(first) => serde_json::Value::Array(vec![first, value]),
                });
            }
            other => self.content.push(other),
        }
    }

    /// Records the error that ended the call.
    pub fn push_error(&mut self, err: ToolError) {
        self.content
            .push(ToolOutput::text(err.to_model_json().to_string()));
        self.is_error = true;
        self.error = Some(err);
    }

    /// The text the model reads as the tool message, taking the result:
    /// [`text`](Self::text) without a copy when there is one text item.
    pub fn into_text(mut self) -> String {
        if let [ToolOutput::Text { .. }] = self.content.as_slice() {
            if let Some(ToolOutput::Text { text }) = self.content.pop() {
                return text;
            }
        }
        self.text()
    }

    /// All text content joined by newlines: what a model reads as the tool
    /// message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for item in &self.content {
            let piece = match item {
                ToolOutput::Text { text } => text.as_str(),
                ToolOutput::Image(m) => m.mime_type.as_str(),
                ToolOutput::Audio(m) => m.mime_type.as_str(),
                ToolOutput::Resource(r) => r.text.as_deref().unwrap_or(&r.uri),
                _ => continue,
            };
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(piece);
        }
        out
    }
}
