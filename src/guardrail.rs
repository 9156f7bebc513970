//! The vocabulary of guardrails: what a check looked at ([`Target`]), what
//! it made of it ([`Action`]), and where a UI hears of it
//! ([`GuardrailEvents`], [`GuardrailTriggered`]).
//!
//! The guardrail layer of `toolstack-layers` checks; an
//! [`Agent`](crate::agent::Agent) puts a [`GuardrailEvents`] in the
//! extensions of each call it makes (model and tools) and streams what it
//! hears as
//! [`AgentEvent::GuardrailTriggered`](crate::agent::AgentEvent::GuardrailTriggered).
//! A guardrail that [raises](Action::Raised) ends the run with
//! [`StopReason::Guardrail`](crate::agent::StopReason::Guardrail).

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// What a guardrail checks. Serializes as [`as_str`](Self::as_str) spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Target {
    /// A tool call's arguments, before the tool is called.
    ToolCall,
    /// A tool's output, item by item as it streams.
    ToolResult,
    /// What a model is sent: the user's and the tools' messages.
    LlmInput,
    /// A model's answer, text delta by text delta as it streams.
    LlmOutput,
}

impl Target {
    /// `tool_call`, `tool_result`, `llm_input` or `llm_output`: the span's
    /// `gen_ai.guardrail.target`.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::ToolCall => "tool_call",
            Target::ToolResult => "tool_result",
            Target::LlmInput => "llm_input",
            Target::LlmOutput => "llm_output",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a guardrail did when it found something. Serializes as
/// [`as_str`](Self::as_str) spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// The call was refused (the tool or the model was not called), or the
    /// output was cut there and replaced with the reason.
    Rejected,
    /// The content was replaced and the call went on.
    Redacted,
    /// The call ended with an [`ErrorKind::Guardrail`](crate::ErrorKind::Guardrail)
    /// error, and an agent's run ends with it.
    Raised,
    /// The check itself failed (it panicked, timed out or returned an
    /// error) and the guardrail refused the call for it, as it is set to.
    Failed,
}

impl Action {
    /// `rejected`, `redacted`, `raised` or `failed`: the span's
    /// `gen_ai.guardrail.decision`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Rejected => "rejected",
            Action::Redacted => "redacted",
            Action::Raised => "raised",
            Action::Failed => "failed",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A guardrail that did something other than allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GuardrailTriggered {
    /// The guardrail's name.
    pub guardrail: String,
    /// What it checked.
    pub target: Target,
    /// The tool's name, or the model's (empty when the request names none).
    pub name: String,
    /// The tool call's id; `None` for a model call.
    pub call_id: Option<String>,
    /// What it did.
    pub action: Action,
    /// Why, as the check said.
    pub reason: String,
}

impl GuardrailTriggered {
    /// What `guardrail` did to the call of `name` (with `call_id`, for a
    /// tool), and why.
    pub fn new(
        guardrail: impl Into<String>,
        target: Target,
        name: impl Into<String>,
        call_id: Option<String>,
        action: Action,
        reason: impl Into<String>,
    ) -> Self {
        GuardrailTriggered {
            guardrail: guardrail.into(),
            target,
            name: name.into(),
            call_id,
            action,
            reason: reason.into(),
        }
    }
}

type Sink = Arc<dyn Fn(GuardrailTriggered) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where a guardrail layer tells what it did: put one in a call's
/// extensions (an agent does) and each [`GuardrailTriggered`] goes to it,
/// before the call goes on.
#[derive(Clone)]
pub struct GuardrailEvents {
    sink: Sink,
}

impl GuardrailEvents {
    /// Events go to `sink`.
    pub fn new<F, Fut>(sink: F) -> Self
    where
        F: Fn(GuardrailTriggered) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        GuardrailEvents {
            sink: Arc::new(move |event| Box::pin(sink(event))),
        }
    }

    /// Sends `event`.
    pub async fn send(&self, event: GuardrailTriggered) {
        (self.sink)(event).await
    }
}

impl fmt::Debug for GuardrailEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardrailEvents").finish_non_exhaustive()
    }
}
