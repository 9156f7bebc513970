//! [`EventRecord`]: an [`AgentEvent`] as JSON, for a run's events to
//! travel between processes and back, losing nothing a reader looks at.
//!
//! The types that already have a lossless serde form travel in it (a
//! message, a tool call, usage, a decision and who made it, a guardrail's
//! report, a progress report, media and resources). Three do not, and
//! have a form here:
//!
//! * a tool output's JSON item: `ToolOutput`'s own serde form reads the
//!   value back through a `serde_json::Value` (its spacing lost, its keys
//!   reordered without `preserve_order`); here it is kept as the exact
//!   JSON text, embedded raw;
//! * a [`ToolError`]: its kind (as [`ErrorKind::as_str`](crate::ErrorKind::as_str)
//!   names it, read back by [`ToolError::from_model_json`]), the timeout's
//!   phase, the rate limit's retry-after to the nanosecond, the message,
//!   whether it is retryable and the retry-after when they differ from the
//!   kind's, and its source as text (a source is any error type: it comes
//!   back as an error whose text is the original's);
//! * a [`ToolResult`] (its own serde form is MCP's, without the error) and a
//!   [`ToolCost`] (its cost in nano-dollars).
//!
//! Every enum here is externally tagged (`{"text_delta": {...}}`): a JSON
//! item's raw text can only be read back inside such a form.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{AgentDone, AgentEvent, StopReason, ToolCost};
use crate::approval::{DecidedBy, Decision};
use crate::guardrail::GuardrailTriggered;
use crate::model::{Cost, Message, ToolCall, Usage};
use crate::output::{Json, Media, Resource};
use crate::{ErrorKind, Progress, ToolError, ToolOutput, ToolResult};

/// An [`AgentEvent`] in a serializable form: what a run's event log
/// ([`RunEvents`](super::RunEvents)) stores. JSON is its wire form; a
/// record read back gives the event it was made from
/// ([`into_event`](Self::into_event)) — the same in every field, but for
/// a [`ToolError`]'s source, which comes back as its text.
///
/// ```
/// use toolstack::agent::run_events::EventRecord;
/// use toolstack::agent::AgentEvent;
///
/// let record = EventRecord::from(&AgentEvent::TextDelta("Hello".into()));
/// let json = serde_json::to_string(&record).unwrap();
/// assert_eq!(json, r#"{"text_delta":{"text":"Hello"}}"#);
/// let back: EventRecord = serde_json::from_str(&json).unwrap();
/// assert!(matches!(back.into_event(), AgentEvent::TextDelta(text) if text == "Hello"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventRecord(Record);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    TextDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    ToolCallStarted {
        index: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        name: String,
    },
    ToolCallInputDelta {
        index: u32,
        arguments: String,
    },
    ToolCall {
        call: ToolCall,
    },
    ToolOutput {
        call_id: String,
        output: OutputRecord,
    },
    Progress {
        call_id: String,
        progress: Progress,
    },
    ApprovalRequested {
        call_id: String,
        name: String,
        arguments: String,
        automatic: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    AwaitingApproval {
        call_ids: Vec<String>,
    },
    ApprovalDecided {
        call_id: String,
        name: String,
        decision: Decision,
        by: DecidedBy,
    },
    ToolResult {
        call_id: String,
        name: String,
        result: ResultRecord,
    },
    TurnDiscarded {
        error: ErrorRecord,
    },
    Compacted {
        messages_before: usize,
        messages_after: usize,
        tokens_before: u64,
        tokens_after: u64,
    },
    ToolsLoaded {
        call_id: String,
        names: Vec<String>,
    },
    GuardrailTriggered {
        triggered: GuardrailTriggered,
    },
    Output {
        value: serde_json::Value,
    },
    Error {
        error: ErrorRecord,
    },
    Done(Box<DoneRecord>),
}

/// A [`ToolOutput`], its JSON items as their exact text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutputRecord {
    Text {
        text: String,
    },
    Json {
        #[serde(deserialize_with = "exact_json")]
        value: Json,
    },
    Structured {
        #[serde(deserialize_with = "exact_json")]
        value: Json,
    },
    Image(Media),
    Audio(Media),
    Resource(Resource),
    Progress(Progress),
}

/// A [`ToolResult`]: its items, whether it failed, and the error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ResultRecord {
    content: Vec<OutputRecord>,
    is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorRecord>,
}

/// A [`ToolError`]: what its public accessors tell, its source as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ErrorRecord {
    /// As [`ErrorKind::as_str`] names it.
    kind: String,
    /// A timeout's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<String>,
    /// A rate limit's own retry-after (the kind's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limited_for: Option<Duration>,
    message: String,
    /// Whether it is retryable, when that is not the kind's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retryable: Option<bool>,
    /// When to try again, when that is not the kind's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after: Option<Duration>,
    /// The source's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
}

/// An [`AgentDone`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DoneRecord {
    messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    steps: usize,
    stop: StopReason,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_costs: Vec<CostRecord>,
    /// Absent for `None`; present (`null` too) for `Some`, so that a typed
    /// answer of `null` is not read back as none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    output: Option<serde_json::Value>,
}

/// A [`ToolCost`], its cost in nano-dollars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CostRecord {
    call_id: String,
    name: String,
    result_bytes: usize,
    tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost_nanos: Option<u64>,
    measured: bool,
}

/// Reads a JSON value as its exact text (a `Json`'s own deserializer goes
/// through a `serde_json::Value`).
fn exact_json<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
    let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
    Ok(Json::from_json_text(Box::<str>::from(raw).into_string()))
}

/// A field that is there is `Some`, even when it is `null`.
fn present_value<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

impl From<&AgentEvent> for EventRecord {
    fn from(event: &AgentEvent) -> Self {
        EventRecord(match event {
            AgentEvent::TextDelta(text) => Record::TextDelta { text: text.clone() },
            AgentEvent::ReasoningDelta(text) => Record::ReasoningDelta { text: text.clone() },
            AgentEvent::ToolCallStarted { index, id, name } => Record::ToolCallStarted {
                index: *index,
                id: id.clone(),
                name: name.clone(),
            },
            AgentEvent::ToolCallInputDelta { index, arguments } => Record::ToolCallInputDelta {
                index: *index,
                arguments: arguments.clone(),
            },
            AgentEvent::ToolCall(call) => Record::ToolCall { call: call.clone() },
            AgentEvent::ToolOutput { call_id, output } => Record::ToolOutput {
                call_id: call_id.clone(),
                output: OutputRecord::from(output),
            },
            AgentEvent::Progress { call_id, progress } => Record::Progress {
                call_id: call_id.clone(),
                progress: progress.clone(),
            },
            AgentEvent::ApprovalRequested {
                call_id,
                name,
                arguments,
                automatic,
                reason,
            } => Record::ApprovalRequested {
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
                automatic: *automatic,
                reason: reason.clone(),
            },
            AgentEvent::AwaitingApproval { call_ids } => Record::AwaitingApproval {
                call_ids: call_ids.clone(),
            },
            AgentEvent::ApprovalDecided {
                call_id,
                name,
                decision,
                by,
            } => Record::ApprovalDecided {
                call_id: call_id.clone(),
                name: name.clone(),
                decision: decision.clone(),
                by: by.clone(),
            },
            AgentEvent::ToolResult {
                call_id,
                name,
                result,
            } => Record::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                result: ResultRecord::from(result),
            },
            AgentEvent::TurnDiscarded { error } => Record::TurnDiscarded {
                error: ErrorRecord::from(error),
            },
            AgentEvent::Compacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            } => Record::Compacted {
                messages_before: *messages_before,
                messages_after: *messages_after,
                tokens_before: *tokens_before,
                tokens_after: *tokens_after,
            },
            AgentEvent::ToolsLoaded { call_id, names } => Record::ToolsLoaded {
                call_id: call_id.clone(),
                names: names.clone(),
            },
            AgentEvent::GuardrailTriggered(triggered) => Record::GuardrailTriggered {
                triggered: triggered.clone(),
            },
            AgentEvent::Output(value) => Record::Output {
                value: value.clone(),
            },
            AgentEvent::Error(error) => Record::Error {
                error: ErrorRecord::from(error),
            },
            AgentEvent::Done(done) => Record::Done(Box::new(DoneRecord::from(done))),
        })
    }
}

impl EventRecord {
    /// The event this record was made from.
    pub fn into_event(self) -> AgentEvent {
        match self.0 {
            Record::TextDelta { text } => AgentEvent::TextDelta(text),
            Record::ReasoningDelta { text } => AgentEvent::ReasoningDelta(text),
            Record::ToolCallStarted { index, id, name } => {
                AgentEvent::ToolCallStarted { index, id, name }
            }
            Record::ToolCallInputDelta { index, arguments } => {
                AgentEvent::ToolCallInputDelta { index, arguments }
            }
            Record::ToolCall { call } => AgentEvent::ToolCall(call),
            Record::ToolOutput { call_id, output } => AgentEvent::ToolOutput {
                call_id,
                output: output.into_output(),
            },
            Record::Progress { call_id, progress } => AgentEvent::Progress { call_id, progress },
            Record::ApprovalRequested {
                call_id,
                name,
                arguments,
                automatic,
                reason,
            } => AgentEvent::ApprovalRequested {
                call_id,
                name,
                arguments,
                automatic,
                reason,
            },
            Record::AwaitingApproval { call_ids } => AgentEvent::AwaitingApproval { call_ids },
            Record::ApprovalDecided {
                call_id,
                name,
                decision,
                by,
            } => AgentEvent::ApprovalDecided {
                call_id,
                name,
                decision,
                by,
            },
            Record::ToolResult {
                call_id,
                name,
                result,
            } => AgentEvent::ToolResult {
                call_id,
                name,
                result: result.into_result(),
            },
            Record::TurnDiscarded { error } => AgentEvent::TurnDiscarded {
                error: error.into_error(),
            },
            Record::Compacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            } => AgentEvent::Compacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            },
            Record::ToolsLoaded { call_id, names } => AgentEvent::ToolsLoaded { call_id, names },
            Record::GuardrailTriggered { triggered } => AgentEvent::GuardrailTriggered(triggered),
            Record::Output { value } => AgentEvent::Output(value),
            Record::Error { error } => AgentEvent::Error(error.into_error()),
            Record::Done(done) => AgentEvent::Done(done.into_done()),
        }
    }

    /// The variant's name as the JSON tags it (`text_delta`,
    /// `tool_result`, `done`, …): for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match &self.0 {
            Record::TextDelta { .. } => "text_delta",
            Record::ReasoningDelta { .. } => "reasoning_delta",
            Record::ToolCallStarted { .. } => "tool_call_started",
            Record::ToolCallInputDelta { .. } => "tool_call_input_delta",
            Record::ToolCall { .. } => "tool_call",
            Record::ToolOutput { .. } => "tool_output",
            Record::Progress { .. } => "progress",
            Record::ApprovalRequested { .. } => "approval_requested",
            Record::AwaitingApproval { .. } => "awaiting_approval",
            Record::ApprovalDecided { .. } => "approval_decided",
            Record::ToolResult { .. } => "tool_result",
            Record::TurnDiscarded { .. } => "turn_discarded",
            Record::Compacted { .. } => "compacted",
            Record::ToolsLoaded { .. } => "tools_loaded",
            Record::GuardrailTriggered { .. } => "guardrail_triggered",
            Record::Output { .. } => "output",
            Record::Error { .. } => "error",
            Record::Done(_) => "done",
        }
    }
}

impl From<AgentEvent> for EventRecord {
    fn from(event: AgentEvent) -> Self {
        EventRecord::from(&event)
    }
}

impl From<EventRecord> for AgentEvent {
    fn from(record: EventRecord) -> Self {
        record.into_event()
    }
}

impl From<&ToolOutput> for OutputRecord {
    fn from(output: &ToolOutput) -> Self {
        match output {
            ToolOutput::Text { text } => OutputRecord::Text { text: text.clone() },
            ToolOutput::Json { value } => OutputRecord::Json {
                value: value.clone(),
            },
            ToolOutput::Structured { value } => OutputRecord::Structured {
                value: value.clone(),
            },
            ToolOutput::Image(media) => OutputRecord::Image((**media).clone()),
            ToolOutput::Audio(media) => OutputRecord::Audio((**media).clone()),
            ToolOutput::Resource(resource) => OutputRecord::Resource((**resource).clone()),
            ToolOutput::Progress(progress) => OutputRecord::Progress((**progress).clone()),
        }
    }
}

impl OutputRecord {
    fn into_output(self) -> ToolOutput {
        match self {
            OutputRecord::Text { text } => ToolOutput::Text { text },
            OutputRecord::Json { value } => ToolOutput::Json { value },
            OutputRecord::Structured { value } => ToolOutput::Structured { value },
            OutputRecord::Image(media) => ToolOutput::Image(Box::new(media)),
            OutputRecord::Audio(media) => ToolOutput::Audio(Box::new(media)),
            OutputRecord::Resource(resource) => ToolOutput::Resource(Box::new(resource)),
            OutputRecord::Progress(progress) => ToolOutput::Progress(Box::new(progress)),
        }
    }
}

impl From<&ToolResult> for ResultRecord {
    fn from(result: &ToolResult) -> Self {
        ResultRecord {
            content: result.content.iter().map(OutputRecord::from).collect(),
            is_error: result.is_error,
            error: result.error.as_ref().map(ErrorRecord::from),
        }
    }
}

impl ResultRecord {
    fn into_result(self) -> ToolResult {
        ToolResult {
            content: self
                .content
                .into_iter()
                .map(OutputRecord::into_output)
                .collect::<Vec<_>>()
                .into(),
            is_error: self.is_error,
            error: self.error.map(ErrorRecord::into_error),
        }
    }
}

/// A rate limit's own retry-after, if the kind is one.
fn limited_for(kind: ErrorKind) -> Option<Duration> {
    match kind {
        ErrorKind::RateLimited { retry_after } => retry_after,
        _ => None,
    }
}

impl From<&ToolError> for ErrorRecord {
    fn from(error: &ToolError) -> Self {
        let kind = error.kind();
        ErrorRecord {
            kind: kind.as_str().to_owned(),
            phase: match kind {
                ErrorKind::Timeout { phase } => Some(phase.as_str().to_owned()),
                _ => None,
            },
            limited_for: limited_for(kind),
            message: error.message().to_owned(),
            retryable: (error.is_retryable() != kind.is_retryable())
                .then_some(error.is_retryable()),
            retry_after: error
                .retry_after()
                .filter(|after| Some(*after) != limited_for(kind)),
            source: std::error::Error::source(error).map(ToString::to_string),
        }
    }
}

impl ErrorRecord {
    fn into_error(self) -> ToolError {
        // The kind's names have one home: the model-facing form's reader
        // (an unknown kind, from a newer writer, reads as `failed`).
        let mut shape = serde_json::Map::new();
        shape.insert("error".into(), serde_json::Value::String(String::new()));
        shape.insert("kind".into(), serde_json::Value::String(self.kind));
        if let Some(phase) = self.phase {
            shape.insert("phase".into(), serde_json::Value::String(phase));
        }
        let kind = match ToolError::from_model_json(&serde_json::Value::Object(shape))
            .map_or(ErrorKind::Failed, |read| read.kind())
        {
            ErrorKind::RateLimited { .. } => ErrorKind::RateLimited {
                retry_after: self.limited_for,
            },
            kind => kind,
        };
        let mut error = ToolError::new(kind, self.message);
        if let Some(retryable) = self.retryable {
            error = error.with_retryable(retryable);
        }
        if let Some(after) = self.retry_after {
            error = error.with_retry_after(after);
        }
        if let Some(source) = self.source {
            error = error.with_source(source);
        }
        error
    }
}

impl From<&AgentDone> for DoneRecord {
    fn from(done: &AgentDone) -> Self {
        DoneRecord {
            messages: done.messages.clone(),
            usage: done.usage,
            steps: done.steps,
            stop: done.stop,
            tool_costs: done.tool_costs.iter().map(CostRecord::from).collect(),
            output: done.output.clone(),
        }
    }
}

impl DoneRecord {
    fn into_done(self) -> AgentDone {
        AgentDone {
            messages: self.messages,
            usage: self.usage,
            steps: self.steps,
            stop: self.stop,
            tool_costs: self
                .tool_costs
                .into_iter()
                .map(CostRecord::into_cost)
                .collect(),
            output: self.output,
        }
    }
}

impl From<&ToolCost> for CostRecord {
    fn from(cost: &ToolCost) -> Self {
        CostRecord {
            call_id: cost.call_id.clone(),
            name: cost.name.clone(),
            result_bytes: cost.result_bytes,
            tokens: cost.tokens,
            cost_nanos: cost.cost.map(Cost::as_nanos),
            measured: cost.measured,
        }
    }
}

impl CostRecord {
    fn into_cost(self) -> ToolCost {
        ToolCost {
            call_id: self.call_id,
            name: self.name,
            result_bytes: self.result_bytes,
            tokens: self.tokens,
            cost: self.cost_nanos.map(Cost::from_nanos),
            measured: self.measured,
        }
    }
}

#[cfg(test)]
mod tests;
