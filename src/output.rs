//! [`ToolOutput`]: one item of a tool's response stream.
//!
//! A tool answers with a stream of these: text, structured JSON, content
//! blocks (image, audio, embedded resource — enough to map one-to-one onto
//! MCP's `ContentBlock`) and progress reports. A single-value tool answers
//! with a stream of one item.
//!
//! ```
//! use toolstack::{Progress, ToolOutput};
//!
//! let items = vec![
//!     ToolOutput::progress(Progress::new(1.0).total(2.0).message("halfway")),
//!     ToolOutput::text("done"),
//!     ToolOutput::json(serde_json::json!({"rows": 2})),
//! ];
//! assert!(items[0].is_progress());
//! assert_eq!(items[1].as_text(), Some("done"));
//! ```

use serde::{Deserialize, Serialize};

/// One item of a tool's response stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolOutput {
    /// A piece of text.
    Text {
        /// The text.
        text: String,
    },
    /// A structured JSON value (MCP `structuredContent`).
    Json {
        /// The value.
        value: serde_json::Value,
    },
    /// An image, base64-encoded.
    Image(Media),
    /// An audio clip, base64-encoded.
    Audio(Media),
    /// An embedded resource.
    Resource(Resource),
    /// A progress report; not part of the tool's result.
    Progress(Progress),
}

impl ToolOutput {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Text { text: text.into() }
    }

    /// A structured JSON item.
    pub fn json(value: serde_json::Value) -> Self {
        ToolOutput::Json { value }
    }

    /// An image item from base64 data and a mime type such as `image/png`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ToolOutput::Image(Media {
            data: data.into(),
            mime_type: mime_type.into(),
        })
    }

    /// An audio item from base64 data and a mime type such as `audio/wav`.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ToolOutput::Audio(Media {
            data: data.into(),
            mime_type: mime_type.into(),
        })
    }

    /// An embedded resource item.
    pub fn resource(resource: Resource) -> Self {
        ToolOutput::Resource(resource)
    }

    /// A progress item.
    pub fn progress(progress: Progress) -> Self {
        ToolOutput::Progress(progress)
    }

    /// The text, if this is a text item.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ToolOutput::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The value, if this is a structured JSON item.
    pub fn as_json(&self) -> Option<&serde_json::Value> {
        match self {
            ToolOutput::Json { value } => Some(value),
            _ => None,
        }
    }

    /// The report, if this is a progress item.
    pub fn as_progress(&self) -> Option<&Progress> {
        match self {
            ToolOutput::Progress(p) => Some(p),
            _ => None,
        }
    }

    /// Whether this is a progress item (transient, not part of the result).
    pub fn is_progress(&self) -> bool {
        matches!(self, ToolOutput::Progress(_))
    }

    /// An estimate of the item's size in bytes (text, data, JSON text), for
    /// output limits and logs.
    pub fn byte_len(&self) -> usize {
        match self {
            ToolOutput::Text { text } => text.len(),
            ToolOutput::Json { value } => json_len(value),
            ToolOutput::Image(m) | ToolOutput::Audio(m) => m.data.len(),
            ToolOutput::Resource(r) => {
                r.uri.len()
                    + r.text.as_ref().map_or(0, String::len)
                    + r.blob.as_ref().map_or(0, String::len)
            }
            ToolOutput::Progress(p) => p.message.as_ref().map_or(0, String::len),
        }
    }
}

fn json_len(value: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    // Writing a Value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::Text { text }
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::text(text)
    }
}

impl From<serde_json::Value> for ToolOutput {
    fn from(value: serde_json::Value) -> Self {
        ToolOutput::Json { value }
    }
}

impl From<Progress> for ToolOutput {
    fn from(p: Progress) -> Self {
        ToolOutput::Progress(p)
    }
}

/// Base64-encoded binary content with its mime type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    /// The base64-encoded bytes.
    pub data: String,
    /// The mime type, e.g. `image/png`.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

/// A resource embedded in the output: a URI with text or base64 contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// The resource's URI.
    pub uri: String,
    /// The mime type, if known.
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64-encoded binary contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl Resource {
    /// A text resource.
    pub fn text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Resource {
            uri: uri.into(),
            mime_type: None,
            text: Some(text.into()),
            blob: None,
        }
    }

    /// A binary resource with base64 contents.
    pub fn blob(uri: impl Into<String>, blob: impl Into<String>) -> Self {
        Resource {
            uri: uri.into(),
            mime_type: None,
            text: None,
            blob: Some(blob.into()),
        }
    }

    /// Sets the mime type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// A progress report: how far, out of how much, and a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Progress so far; increases with each report.
    pub progress: f64,
    /// The total, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// A human-readable message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Progress {
    /// A report of `progress` with no total and no message.
    pub fn new(progress: f64) -> Self {
        Progress {
            progress,
            total: None,
            message: None,
        }
    }

    /// Sets the total.
    pub fn total(mut self, total: f64) -> Self {
        self.total = Some(total);
        self
    }

    /// Sets the message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}
