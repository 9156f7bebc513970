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
///
/// Small enough to move cheaply through every layer (32 bytes): text and
/// JSON inline, the rare and larger variants boxed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolOutput {
    /// A piece of text.
    Text {
        /// The text.
        text: String,
    },
    /// A structured JSON value (MCP `structuredContent`), kept as the JSON
    /// text it was serialized to: see [`Json`].
    Json {
        /// The value.
        value: Json,
    },
    /// The structured form of a result whose other items the model reads
    /// already (an MCP server's `structuredContent` beside its content
    /// blocks): for programs that ask for it
    /// ([`ToolResult::structured_content`](crate::ToolResult::structured_content),
    /// MCP's `structuredContent`), never read by the model, so that it
    /// reads each result once.
    Structured {
        /// The value.
        value: Json,
    },
    /// An image, base64-encoded.
    Image(Box<Media>),
    /// An audio clip, base64-encoded.
    Audio(Box<Media>),
    /// An embedded resource.
    Resource(Box<Resource>),
    /// A progress report; not part of the tool's result.
    Progress(Box<Progress>),
}

impl ToolOutput {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput::Text { text: text.into() }
    }

    /// A structured JSON item from a JSON value.
    pub fn json(value: impl Into<Json>) -> Self {
        ToolOutput::Json {
            value: value.into(),
        }
    }

    /// A structured JSON item from any serializable value, serialized once
    /// to its JSON text (no `serde_json::Value` tree is built).
    pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        Json::to_json(value).map(|value| ToolOutput::Json { value })
    }

    /// An image item from base64 data and a mime type such as `image/png`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ToolOutput::Image(Box::new(Media {
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// An audio item from base64 data and a mime type such as `audio/wav`.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        ToolOutput::Audio(Box::new(Media {
            data: data.into(),
            mime_type: mime_type.into(),
        }))
    }

    /// An embedded resource item.
    pub fn resource(resource: Resource) -> Self {
        ToolOutput::Resource(Box::new(resource))
    }

    /// A progress item.
    pub fn progress(progress: Progress) -> Self {
        ToolOutput::Progress(Box::new(progress))
    }

    /// The text, if this is a text item.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ToolOutput::Text { text } => Some(text),
            _ => None,
        }
    }

    /// The structured form of a result, for programs only (see
    /// [`ToolOutput::Structured`]).
    pub fn structured(value: impl Into<Json>) -> Self {
        ToolOutput::Structured {
            value: value.into(),
        }
    }

    /// The JSON, if this is a structured JSON item (one the model reads,
    /// or one for programs only).
    pub fn as_json(&self) -> Option<&Json> {
        match self {
            ToolOutput::Json { value } | ToolOutput::Structured { value } => Some(value),
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

    /// The item's size in bytes (text, data, JSON text), for output limits
    /// and logs; a field read for every variant.
    pub fn byte_len(&self) -> usize {
        match self {
            ToolOutput::Text { text } => text.len(),
            ToolOutput::Json { value } | ToolOutput::Structured { value } => value.as_str().len(),
            ToolOutput::Image(m) | ToolOutput::Audio(m) => m.data.len(),
            ToolOutput::Resource(r) => {
                r.uri.len()
                    + r.text.as_ref().map_or(0, String::len)
                    + r.blob.as_ref().map_or(0, String::len)
            }
            ToolOutput::Progress(p) => p.message.as_ref().map_or(0, String::len),
        }
    }

    /// What a model reads of the item in a tool message: a text as it is,
    /// JSON as its JSON text, an image or audio clip as its MIME type, a
    /// resource as its text (else its URI); `None` for progress, which is
    /// not part of the result, and for a [`Structured`](ToolOutput::Structured)
    /// item, which is the result again, for programs.
    pub fn model_text(&self) -> Option<&str> {
        Some(match self {
            ToolOutput::Text { text } => text.as_str(),
            ToolOutput::Json { value } => value.as_str(),
            ToolOutput::Image(m) | ToolOutput::Audio(m) => m.mime_type.as_str(),
            ToolOutput::Resource(r) => r.text.as_deref().unwrap_or(&r.uri),
            ToolOutput::Progress(_) | ToolOutput::Structured { .. } => return None,
        })
    }
}

/// A JSON value as its compact JSON text.
///
/// A tool's structured output is serialized once, when it is produced, and
/// stays text on its way: the model reads text, the HTTP endpoint writes
/// text, MCP's `content` carries text. Only a consumer that wants a tree —
/// MCP's `structuredContent`, a test — parses it, with [`Json::value`] or
/// [`Json::parse`].
///
/// The text is always valid JSON: every constructor serializes.
///
/// ```
/// use toolstack::Json;
///
/// #[derive(serde::Serialize)]
/// struct Sum { sum: f64 }
///
/// let json = Json::to_json(&Sum { sum: 3.75 }).unwrap();
/// assert_eq!(json.as_str(), r#"{"sum":3.75}"#);
/// assert_eq!(json.value(), serde_json::json!({"sum": 3.75}));
/// assert_eq!(Json::from(serde_json::json!([1, 2])).as_str(), "[1,2]");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Json(String);

impl Json {
    /// Serializes `value` to its JSON text.
    pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<Json, serde_json::Error> {
        serde_json::to_string(value).map(Json)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Parses the text into a `T`.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The value as a `serde_json::Value` tree (parsed on each call).
    ///
    /// A value nested deeper than serde_json reads back (128 levels) comes
    /// back as a JSON string of its text, never as a panic.
    pub fn value(&self) -> serde_json::Value {
        self.parse()
            .unwrap_or_else(|_| serde_json::Value::String(self.0.clone()))
    }

    /// Text known to be valid JSON (as the output of a serializer is).
    pub(crate) fn from_json_text(text: String) -> Json {
        Json(text)
    }
}

impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Self {
        Json::from(&value)
    }
}

impl From<&serde_json::Value> for Json {
    fn from(value: &serde_json::Value) -> Self {
        // serde_json's writer, not `Display` (which grows a `String` from
        // empty through the formatter); a `Value` always serializes.
        Json(serde_json::to_string(value).unwrap_or_else(|_| value.to_string()))
    }
}

impl PartialEq<serde_json::Value> for Json {
    /// Equal when the text parses to `other`.
    fn eq(&self, other: &serde_json::Value) -> bool {
        self.parse::<serde_json::Value>()
            .is_ok_and(|value| value == *other)
    }
}

impl std::fmt::Debug for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Display for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Written as the JSON it holds (embedded raw by serde_json; other
/// serializers get the parsed value).
impl Serialize for Json {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(S::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// Read from any JSON value.
impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Json::from)
    }
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
        ToolOutput::json(value)
    }
}

impl From<Json> for ToolOutput {
    fn from(value: Json) -> Self {
        ToolOutput::Json { value }
    }
}

impl From<Progress> for ToolOutput {
    fn from(p: Progress) -> Self {
        ToolOutput::progress(p)
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
