//! What an agent run streams: [`AgentEvent`]s, ending in one
//! [`AgentEvent::Done`] with its [`AgentDone`] and [`StopReason`].

use crate::model::{Message, ToolCall, Usage};
use crate::{Progress, ToolError, ToolOutput, ToolResult};

/// What an agent run streams, as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AgentEvent {
    /// Text from the model.
    TextDelta(String),
    /// Reasoning text from the model, as it thinks before it answers
    /// (Anthropic's extended thinking). A block's signature is not streamed:
    /// the assistant message keeps it, for the next request.
    ReasoningDelta(String),
    /// The model started writing a tool call (for a UI that shows the
    /// arguments being written).
    ToolCallStarted {
        /// The call's index in this model answer.
        index: u32,
        /// The call id, if the first fragment carried it.
        id: Option<String>,
        /// The tool name so far.
        name: String,
    },
    /// More argument text of a call being written.
    ToolCallInputDelta {
        /// The call's index in this model answer.
        index: u32,
        /// The new argument text.
        arguments: String,
    },
    /// A complete tool call, about to run.
    ToolCall(ToolCall),
    /// One item streamed by a running tool.
    ToolOutput {
        /// The call it belongs to.
        call_id: String,
        /// The item.
        output: ToolOutput,
    },
    /// Progress reported by a running tool.
    Progress {
        /// The call it belongs to.
        call_id: String,
        /// The report.
        progress: Progress,
    },
    /// A call waits for approval (the approval layer of
    /// `toolstack-layers` asked); a UI shows it and lets a person answer.
    ApprovalRequested {
        /// The call.
        call_id: String,
        /// The tool.
        name: String,
        /// Its arguments, as the model wrote them.
        arguments: String,
        /// Whether a policy decided it at once (an
        /// [`ApprovalDecided`](Self::ApprovalDecided) follows): nobody is
        /// asked, a UI shows the decision.
        automatic: bool,
        /// The policy's words: why it is asked, or why it was decided so.
        reason: Option<String>,
    },
    /// Every tool call of the step still running waits for a decision
    /// ([`ApprovalRequested`](Self::ApprovalRequested) before): nothing
    /// more happens in this run until one is made. A front end that takes
    /// the person's answer in a later request (the AI SDK's chat protocol
    /// does, [`http::ai_sdk`](crate::http::ai_sdk)) ends its response here and
    /// keeps the run for that answer.
    AwaitingApproval {
        /// The calls waiting, in the order they asked.
        call_ids: Vec<String>,
    },
    /// The call's approval was decided.
    ApprovalDecided {
        /// The call.
        call_id: String,
        /// The tool.
        name: String,
        /// What was decided.
        decision: crate::approval::Decision,
        /// Who decided.
        by: crate::approval::DecidedBy,
    },
    /// A tool call finished; this is what the model will read.
    ToolResult {
        /// The call.
        call_id: String,
        /// The tool name.
        name: String,
        /// The collected result (`is_error` for failures).
        result: ToolResult,
    },
    /// The model's answer broke off with a retryable error after it had
    /// begun to stream, and the model is asked again
    /// ([`Agent::retry_model_turns`](super::Agent::retry_model_turns)). The text and tool-call input
    /// streamed since the last tool step (or the run's start) were that
    /// answer's: forget them (a UI removes the half-written text). None of
    /// its tool calls ran, and it is not in the conversation.
    TurnDiscarded {
        /// What broke the answer off.
        error: ToolError,
    },
    /// The history was compacted before a model call (the agent's
    /// [`compaction`](super::Agent::compaction)): it passed the context
    /// budget, or the model's endpoint refused it for its length.
    Compacted {
        /// Messages before and after.
        messages_before: usize,
        /// Messages after (a strategy may also shorten messages in place).
        messages_after: usize,
        /// The history's estimated tokens before and after
        /// ([`estimate_tokens`](super::compaction::estimate_tokens)).
        tokens_before: u64,
        /// After.
        tokens_after: u64,
    },
    /// A tool search ([`SEARCH_TOOLS`](super::SEARCH_TOOLS)) loaded deferred
    /// tools: the model is shown them from its next call on, for the rest
    /// of the run.
    ToolsLoaded {
        /// The search's call.
        call_id: String,
        /// The tools loaded (those it found that were not loaded before),
        /// best match first.
        names: Vec<String>,
    },
    /// A guardrail refused, redacted or raised on a tool call or a model
    /// call (the guardrail layer of `toolstack-layers` said so); a raise
    /// ends the run ([`StopReason::Guardrail`]).
    GuardrailTriggered(crate::guardrail::GuardrailTriggered),
    /// The run's typed answer, decoded and final
    /// ([`Agent::output`](super::Agent::output)); the run ends after it.
    Output(serde_json::Value),
    /// The model failed; the run ends.
    Error(ToolError),
    /// The run ended.
    Done(AgentDone),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct AgentDone {
    /// The whole conversation, the new messages included.
    pub messages: Vec<Message>,
    /// Tokens used by the model calls that reported usage (discarded
    /// answers included); `None` when none did — not the same as zero.
    pub usage: Option<Usage>,
    /// Model turns taken; a turn asked again after a fault
    /// ([`Agent::retry_model_turns`](super::Agent::retry_model_turns)) counts once.
    pub steps: usize,
    /// Why the run stopped.
    pub stop: StopReason,
    /// What each tool call's result cost when a model call read it, in
    /// the order they were read: the tokens it added to the next prompt
    /// and, with [`Agent::prices`](super::Agent::prices), their price. A
    /// result no model call read (the run stopped first) has none.
    pub tool_costs: Vec<ToolCost>,
    /// The typed answer, when the agent asks for one
    /// ([`Agent::output`](super::Agent::output)) and the run ended with it.
    pub output: Option<serde_json::Value>,
}

/// What one tool call's result cost: the tokens it added to the prompt of
/// the model call that read it next ([`AgentDone::tool_costs`]).
///
/// Measured when both that call and the one that asked for the tool
/// reported usage: the growth of the prompt between the two, less the
/// assistant's answer (its completion tokens, reasoning excluded, which
/// the history does not keep), split between the step's results in
/// proportion to their length. Otherwise an estimate of four bytes a
/// token (`measured` is then `false`). A result is in every later prompt
/// too (usually cached); this is what it added once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCost {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The length of its result, in bytes, as the model read it.
    pub result_bytes: usize,
    /// The prompt tokens its result added.
    pub tokens: u64,
    /// What those tokens cost, at the model's price for (uncached)
    /// prompt tokens; `None` without [`Agent::prices`](super::Agent::prices)
    /// or a price for the model.
    pub cost: Option<crate::model::Cost>,
    /// Whether `tokens` is measured from the endpoint's usage reports
    /// (else estimated from the result's length).
    pub measured: bool,
}

/// Why a run stopped. Serializes as [`as_str`](Self::as_str) spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered without calling a tool.
    Finished,
    /// The run reached its limit of model calls.
    MaxSteps,
    /// The model asked for more tool calls than the run allows.
    MaxToolCalls,
    /// The model call failed (see the [`AgentEvent::Error`] before).
    ModelError,
    /// The model's last answer was cut off at its token limit
    /// (`finish_reason: "length"`): the last assistant message is
    /// incomplete. Tool calls in it were not run — their arguments may be
    /// cut too —, each answered with a refusal so the history stays
    /// well-formed.
    Length,
    /// The model's last answer was stopped by a content filter
    /// (`finish_reason: "content_filter"`); as with
    /// [`Length`](Self::Length), its tool calls were not run.
    ContentFilter,
    /// A checkpoint of the run could not be saved — the store did not
    /// answer, or another process took the run over — and the agent is set
    /// to stop then ([`OnStoreError::Fail`](super::OnStoreError::Fail), the
    /// default; see the [`AgentEvent::Error`] before).
    StoreFailed,
    /// A guardrail raised on a tool call or a model call (see the
    /// [`AgentEvent::GuardrailTriggered`] before): the run ends after the
    /// step in which it did.
    Guardrail,
    /// A spend limit (tokens or cost, per run, caller or window) refused
    /// the next model call before it was made, or cut an answer mid-stream
    /// (the spend limit layer of `toolstack-layers`; the
    /// [`AgentEvent::Error`] before names the limit and what was spent). A
    /// cut answer's text and reasoning so far are kept in the history, its
    /// text followed by `[the rest of this answer was cut by a spend limit:
    /// …]`; the calls it had begun are not run.
    SpendLimit,
    /// The history could not be compacted and the agent is set to stop
    /// then ([`OnCompactionError::Stop`](super::compaction::OnCompactionError::Stop);
    /// the [`AgentEvent::Error`] before says why).
    CompactionFailed,
    /// The typed answer did not decode after the retries the agent allows
    /// ([`Agent::output_retries`](super::Agent::output_retries); the
    /// [`AgentEvent::Error`] before names the field).
    OutputInvalid,
    /// The step's tool choice or active tools named a tool the caller may
    /// not use, or required a call when no tool was offered: refused
    /// before the model call (the [`AgentEvent::Error`] before says which).
    InvalidToolChoice,
}

impl StopReason {
    /// The reason in snake case (`finished`, `max_steps`, …), as spans
    /// record it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Finished => "finished",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxToolCalls => "max_tool_calls",
            StopReason::ModelError => "model_error",
            StopReason::Length => "length",
            StopReason::ContentFilter => "content_filter",
            StopReason::StoreFailed => "store_failed",
            StopReason::Guardrail => "guardrail",
            StopReason::SpendLimit => "spend_limit",
            StopReason::CompactionFailed => "compaction_failed",
            StopReason::OutputInvalid => "output_invalid",
            StopReason::InvalidToolChoice => "invalid_tool_choice",
        }
    }
}
