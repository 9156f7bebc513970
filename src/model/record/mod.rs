//! Model traffic recorded once and replayed in tests: [`RecordLayer`]
//! writes each request and the answer's deltas, with the time between
//! them, to a JSON Lines file; [`ReplayModel`] answers from such a file.
//!
//! ```text
//! {"format":"toolstack-model-recording","version":1}
//! {"digest":"…","request":{"model":…,"messages":[…],"tools":[…]},"steps":[{"after_us":1520,"type":"text","text":"Hel"},…]}
//! ```
//!
//! * **What is written**: the request's model name, messages and tools
//!   (name, description, input schema), its tool choice, typed answer's
//!   schema and output limit (`max_tokens`) when set — what a model is
//!   sent, nothing else: not its extensions (the caller's identity), and
//!   no API key, which is not part of a request (the client holds it).
//!   Recording sits above the HTTP client, so no header is written.
//! * **The digest** is SHA-256 of that request's JSON (field order fixed
//!   by the types, so the same request gives the same digest): it is what
//!   a replay matches.
//! * **One line per exchange**, appended whole once the answer ends (or
//!   is dropped, then marked `"complete": false`), so lines of concurrent
//!   calls never interleave; the first line names the format and its
//!   version.
//!
//! [`ReplayModel::open`] reads a recording: a truncated or corrupt line is
//! [`ReplayError::Corrupt`] naming the line, a recording of a newer format
//! is [`ReplayError::NewerFormat`] naming both versions. It answers in
//! order ([`Order::InOrder`], the default: the n-th call gets the n-th
//! exchange, which must match) or by match ([`Order::ByMatch`]: the first
//! exchange not yet replayed whose digest matches), with the recorded
//! timing ([`Pace::Recorded`]) or at once ([`Pace::Fast`], the default). A
//! request that was not recorded fails the call as
//! [`ErrorKind::NotFound`](crate::ErrorKind::NotFound), naming the nearest
//! recorded request and the first lines where they differ — a changed
//! prompt fails the test with a diff.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::model::record::{RecordLayer, ReplayModel};
//! use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = std::env::temp_dir().join(format!("toolstack-doc-{}.jsonl", std::process::id()));
//! let model = ScriptedModel::new([Turn::new().text("Hello!")]);
//! let recording = RecordLayer::create(&file)?.layer(model);
//! let request = || ChatRequest::new(vec![Message::user("hi")]);
//! let live: Vec<_> = recording.oneshot(request()).await?.collect().await;
//!
//! let replay = ReplayModel::open(&file)?;
//! let replayed: Vec<_> = replay.clone().oneshot(request()).await?.collect().await;
//! assert_eq!(live, replayed);
//!
//! // A request that was not recorded names the nearest one, and how it differs.
//! let other = ChatRequest::new(vec![Message::user("hello")]);
//! let err = replay.oneshot(other).await.unwrap_err();
//! assert!(err.message().contains(r#"-       "content": "hi""#), "{err}");
//! # std::fs::remove_file(&file)?;
//! # Ok(()) }
//! ```

mod recorder;
mod replay;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{ChatRequest, FinishReason, ModelDelta, ReasoningDelta, ToolCallDelta, Usage};
use crate::ToolError;

pub use recorder::{RecordLayer, Recorded, Recorder};
pub use replay::{Order, Pace, ReplayModel, ReplayStream};

/// The format's name, on a recording's first line.
pub const FORMAT: &str = "toolstack-model-recording";

/// The format's version this library writes and reads.
pub const VERSION: u32 = 1;

/// The largest recording [`ReplayModel::open`] reads, in bytes.
pub const MAX_RECORDING_BYTES: u64 = 256 << 20;

/// The first line of a recording.
#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
}

/// One recorded call: the request, its digest, the answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Exchange {
    pub(crate) digest: String,
    pub(crate) request: Value,
    pub(crate) steps: Vec<TimedItem>,
    /// `false` when the answer was dropped before its end.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub(crate) complete: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// One item of an answer, with the time since the one before.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TimedItem {
    pub(crate) after_us: u64,
    #[serde(flatten)]
    pub(crate) item: Item,
}

/// An item, in the recording's own form (kept apart from [`ModelDelta`],
/// so that the format does not move with it).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Item {
    Text {
        text: String,
    },
    /// A reasoning piece: its text, a block's signature, or a withheld
    /// block's data.
    Reasoning {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redacted: Option<String>,
    },
    ToolCall {
        index: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        arguments: String,
    },
    Finish {
        reason: FinishReason,
    },
    Usage {
        usage: Usage,
    },
    Model {
        model: String,
    },
    /// The error the answer ended with, in its model-facing form.
    Error {
        error: Value,
    },
}

impl Item {
    pub(crate) fn of(item: &Result<ModelDelta, ToolError>) -> Item {
        match item {
            Ok(ModelDelta::Text(text)) => Item::Text { text: text.clone() },
            Ok(ModelDelta::Reasoning(piece)) => {
                let (mut text, mut signature, mut redacted) = (None, None, None);
                match piece {
                    ReasoningDelta::Text(t) => text = Some(t.clone()),
                    ReasoningDelta::Signature(s) => signature = Some(s.clone()),
                    ReasoningDelta::Redacted(d) => redacted = Some(d.clone()),
                }
                Item::Reasoning {
                    text,
                    signature,
                    redacted,
                }
            }
            Ok(ModelDelta::ToolCall(call)) => Item::ToolCall {
                index: call.index,
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
            Ok(ModelDelta::Finish(reason)) => Item::Finish {
                reason: reason.clone(),
            },
            Ok(ModelDelta::Usage(usage)) => Item::Usage { usage: *usage },
            Ok(ModelDelta::Model(model)) => Item::Model {
                model: model.clone(),
            },
            Err(err) => Item::Error {
                error: err.to_model_json(),
            },
        }
    }

    pub(crate) fn to_delta(&self) -> Result<ModelDelta, ToolError> {
        Ok(match self {
            Item::Text { text } => ModelDelta::Text(text.clone()),
            Item::Reasoning {
                text,
                signature,
                redacted,
            } => ModelDelta::Reasoning(match (text, signature, redacted) {
                (_, Some(signature), _) => ReasoningDelta::Signature(signature.clone()),
                (_, _, Some(data)) => ReasoningDelta::Redacted(data.clone()),
                (text, _, _) => ReasoningDelta::Text(text.clone().unwrap_or_default()),
            }),
            Item::ToolCall {
                index,
                id,
                name,
                arguments,
            } => ModelDelta::ToolCall(ToolCallDelta {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            }),
            Item::Finish { reason } => ModelDelta::Finish(reason.clone()),
            Item::Usage { usage } => ModelDelta::Usage(*usage),
            Item::Model { model } => ModelDelta::Model(model.clone()),
            Item::Error { error } => {
                return Err(ToolError::from_model_json(error)
                    .unwrap_or_else(|| ToolError::failed(format!("a recorded error: {error}"))))
            }
        })
    }
}

/// What a request is, as recorded and matched: the model asked for, the
/// messages, the tools (name, description, input schema), and the tool
/// choice, the typed answer's schema and the output limit when set.
pub(crate) fn normalised(request: &ChatRequest) -> Value {
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|info| {
            serde_json::json!({
                "name": info.name(),
                "description": info.description(),
                "input_schema": info.input_schema(),
            })
        })
        .collect();
    let mut normalised = serde_json::json!({
        "model": request.model.as_deref(),
        "messages": &*request.messages,
        "tools": tools,
    });
    // Recorded only when set, so that a recording of a request without
    // them matches as it always did.
    if request.tool_choice != crate::model::ToolChoice::Auto {
        normalised["tool_choice"] = request.tool_choice.as_str().into();
    }
    if let Some(output) = &request.output {
        normalised["output"] =
            serde_json::json!({"name": &*output.name, "schema": &*output.schema});
    }
    // A lower limit can end the answer sooner: another request.
    if let Some(max_tokens) = request.max_tokens {
        normalised["max_tokens"] = max_tokens.into();
    }
    normalised
}

/// The digest of a normalised request.
pub(crate) fn digest(request: &Value) -> String {
    let digest = Sha256::digest(request.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a recording cannot be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The file is larger than [`MAX_RECORDING_BYTES`].
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// A line is not a recording's: truncated, corrupt, or not this format.
    Corrupt {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The recording is of a newer format than this library reads.
    NewerFormat {
        /// The recording's version.
        found: u32,
        /// The newest this library reads.
        supported: u32,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Io(err) => write!(f, "the recording could not be read: {err}"),
            ReplayError::TooLarge { bytes } => write!(
                f,
                "the recording has {bytes} bytes; at most {MAX_RECORDING_BYTES} are read"
            ),
            ReplayError::Corrupt { line, why } => {
                write!(f, "line {line} of the recording is not readable: {why}")
            }
            ReplayError::NewerFormat { found, supported } => write!(
                f,
                "the recording is of format version {found}; this library reads up to version {supported}"
            ),
        }
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<std::io::Error> for ReplayError {
    fn from(err: std::io::Error) -> Self {
        ReplayError::Io(err)
    }
}
