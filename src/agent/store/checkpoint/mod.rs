//! The state of a run: [`Checkpoint`] — its history, the calls of the
//! step in flight and their states, its counts, its status — and the one
//! function that changes it, [`Checkpoint::apply`], which folds a
//! [`Record`] in. The records (`record`), the stored journal they are
//! read from (`journal`: its head, and the borrowed view a store loads
//! through) and the snapshot the state is written as (`snapshot`) are
//! this module's children: they name its types; it names theirs only to
//! fold them in and to re-export them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::agent::StopReason;
use crate::approval::{ApprovalRequest, DecidedBy, Decision};
use crate::model::{Message, ToolCall, Usage};
use crate::output::Media;

mod journal;
mod record;
mod snapshot;

pub use self::journal::{Head, Journal, JOURNAL_FORMAT};
pub use self::record::{Record, MAX_RECORD_BYTES};
pub use self::snapshot::CHECKPOINT_FORMAT;

/// A run's state: the fold of its journal's records, and what a snapshot
/// stores (a whole checkpoint, as runs were stored before the journal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run's id.
    pub run_id: String,
    /// Whether it runs, waits for a decision, or ended.
    #[serde(flatten)]
    pub status: RunStatus,
    /// The conversation so far (the current step's results not yet in
    /// it), shared: a model request holds it without a copy.
    pub messages: Arc<Vec<Message>>,
    /// The calls of the tool step in flight, in the model's order; empty
    /// between steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step: Vec<CallRecord>,
    /// Tokens used so far, if any model call reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Model turns taken.
    pub steps: usize,
    /// Tool calls made.
    pub tool_calls: usize,
    /// The process running it, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// When it was written, in milliseconds since the Unix epoch.
    pub saved_at_ms: u64,
    /// The deferred tools a tool search loaded, in the order they were
    /// loaded: the model is shown them for the rest of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded_tools: Vec<String>,
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RunStatus {
    /// A process runs it (see [`Checkpoint::holder`]).
    Running,
    /// Suspended until a person decides the calls waiting for approval;
    /// held by nobody.
    Waiting,
    /// The run ended.
    Done {
        /// Why.
        stop: StopReason,
    },
}

impl RunStatus {
    /// `running`, `waiting` or `done`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Done { .. } => "done",
        }
    }
}

/// The process holding a running run, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The process's id in the store (random for each agent given a store,
    /// unless set with `Agent::process_id`).
    pub process: String,
    /// The lease: past this (ms since the Unix epoch) without a new
    /// checkpoint, another process may take the run over.
    pub until_ms: u64,
}

/// One tool call of the step in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call, as the model made it.
    pub call: ToolCall,
    /// How far it got.
    #[serde(flatten)]
    pub state: CallState,
}

/// How far a tool call got. What a resumed run does with each state is
/// the point of storing it:
///
/// | state | on resume |
/// |---|---|
/// | `Planned` | runs (it never started) |
/// | `WaitingApproval` | asks again — or takes the decision the resume brings; the tool never started |
/// | `Started`, `Decided` with allow or modify | runs again only if the tool is idempotent or read-only; otherwise the model reads an `interrupted` result |
/// | `Decided` with a denial | denied again (the tool never runs) |
/// | `Finished` | not run: the stored result is used |
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CallState {
    /// Not started.
    Planned,
    /// Handed to the toolbox: it may have run.
    Started,
    /// Waits for a decision; the tool has not started.
    WaitingApproval {
        /// What was asked.
        request: ApprovalRequest,
    },
    /// Decided; with an allow, the tool may have started since.
    Decided {
        /// The decision.
        decision: Decision,
        /// Who decided (a name, in checkpoints of earlier versions).
        by: DecidedBy,
    },
    /// Ended: what the model reads.
    Finished {
        /// The result's text.
        text: String,
        /// Whether it was an error.
        is_error: bool,
        /// The images it returned (left out when none, so a checkpoint
        /// written before they were kept reads as it did).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Media>,
    },
}

impl CallState {
    /// The end of a call that returned `result`: what the model reads of
    /// it, as [`Message::tool_result`] has it (its text, whether it
    /// failed, its images).
    pub(crate) fn finished(result: &crate::ToolResult) -> Self {
        match Message::tool_result(String::new(), result) {
            Message::Tool {
                content,
                is_error,
                images,
                ..
            } => CallState::Finished {
                text: content,
                is_error,
                images,
            },
            // `tool_result` makes a tool message; this is only defence.
            _ => CallState::Finished {
                text: result.text(),
                is_error: result.is_error,
                images: Vec::new(),
            },
        }
    }

    /// `planned`, `started`, `waiting_approval`, `decided` or `finished`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallState::Planned => "planned",
            CallState::Started => "started",
            CallState::WaitingApproval { .. } => "waiting_approval",
            CallState::Decided { .. } => "decided",
            CallState::Finished { .. } => "finished",
        }
    }
}

impl Checkpoint {
    /// An empty running run: what a new run's first records apply to.
    pub fn new(run_id: impl Into<String>) -> Self {
        Checkpoint {
            run_id: run_id.into(),
            status: RunStatus::Running,
            messages: Arc::default(),
            step: Vec::new(),
            usage: None,
            steps: 0,
            tool_calls: 0,
            holder: None,
            saved_at_ms: 0,
            loaded_tools: Vec::new(),
        }
    }

    /// Applies one record: the run's state after it.
    pub fn apply(&mut self, record: Record) {
        match record {
            Record::Messages { messages } => Arc::make_mut(&mut self.messages).extend(messages),
            Record::Continued { message } => {
                let messages = Arc::make_mut(&mut self.messages);
                match messages.last_mut() {
                    Some(last @ Message::Assistant { .. }) => continued(last, message),
                    _ => messages.push(message),
                }
            }
            Record::Step { calls } => self.step = calls.into_iter().map(planned).collect(),
            Record::StepPlanned { ids } => {
                let answered = match self.messages.last() {
                    Some(Message::Assistant { tool_calls, .. }) => tool_calls.as_slice(),
                    _ => &[],
                };
                self.step = answered_calls(answered, ids)
                    .into_iter()
                    .map(planned)
                    .collect();
            }
            Record::Call { id, state } => {
                if let Some(call) = self.step.iter_mut().find(|r| r.call.id == id) {
                    call.state = state;
                }
            }
            Record::StepClosed => {
                let step = std::mem::take(&mut self.step);
                Arc::make_mut(&mut self.messages).extend(step.into_iter().map(closed));
            }
            Record::Counts {
                steps,
                tool_calls,
                usage,
            } => {
                self.steps = steps;
                self.tool_calls = tool_calls;
                self.usage = usage;
            }
            Record::Status { status } => self.status = status,
            Record::Compacted { messages } => self.messages = Arc::new(messages),
            Record::ToolsLoaded { names } => {
                for name in names {
                    if !self.loaded_tools.contains(&name) {
                        self.loaded_tools.push(name);
                    }
                }
            }
        }
    }

    /// Whether another process than `process` holds the run at `now_ms`.
    pub fn held_by_other(&self, process: &str, now_ms: u64) -> bool {
        self.status == RunStatus::Running
            && self
                .holder
                .as_ref()
                .is_some_and(|holder| holder.process != process && holder.until_ms > now_ms)
    }
}

/// A call of a step that begins: not started.
fn planned(call: ToolCall) -> CallRecord {
    CallRecord {
        call,
        state: CallState::Planned,
    }
}

/// The calls of the answer `answered` a step names by `ids`: its last ones
/// (an answer that went on from a paused one has the paused one's calls
/// first). A call the answer does not hold — a journal that lost its
/// answer — keeps its id only, so the step still answers it.
fn answered_calls(answered: &[ToolCall], ids: Vec<String>) -> Vec<ToolCall> {
    let last = &answered[answered.len().saturating_sub(ids.len())..];
    if last.iter().map(|call| &call.id).eq(&ids) {
        return last.to_vec();
    }
    ids.into_iter()
        .map(|id| {
            answered
                .iter()
                .find(|call| call.id == id)
                .cloned()
                .unwrap_or(ToolCall {
                    id,
                    name: String::new(),
                    arguments: String::new(),
                })
        })
        .collect()
}

/// A paused answer, `last`, extended by the rest of it.
fn continued(last: &mut Message, rest: Message) {
    let (
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        },
        Message::Assistant {
            content: more,
            tool_calls: calls,
            reasoning: thoughts,
        },
    ) = (last, rest)
    else {
        return;
    };
    match (content.as_mut(), more) {
        (Some(text), Some(more)) => text.push_str(&more),
        (None, more) => *content = more,
        (Some(_), None) => {}
    }
    reasoning.extend(thoughts);
    tool_calls.extend(calls);
}

/// What a closed step's call adds to the history.
fn closed(record: CallRecord) -> Message {
    match record.state {
        CallState::Finished {
            text,
            is_error,
            images,
        } => Message::Tool {
            tool_call_id: record.call.id,
            content: text,
            is_error,
            images,
        },
        // A step closes once each call has finished; this is defence.
        _ => Message::tool_error(
            record.call.id,
            "not run: the step ended before this call finished",
        ),
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests;
