//! The records of a run's journal: [`Record`] — one change to a run's
//! [`Checkpoint`](super::Checkpoint), the size of the change — and its
//! stored form.

use serde::{Deserialize, Serialize};

use crate::agent::store::StoreError;
use crate::model::{Message, ToolCall, Usage};

use super::{CallState, RunStatus};

/// The default bound on one stored record — one message, one tool result:
/// 16 MiB. A run as a whole has no bound: its history is as long as its
/// records are many.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// One change to a run's state, appended to its journal. A run's state is
/// its snapshot (if any) with each record after it applied in order
/// ([`Checkpoint::apply`](super::Checkpoint::apply)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Record {
    /// Messages added to the history: the conversation a run starts
    /// from, a model's answer, the results of calls refused before a step.
    Messages {
        /// The messages, in order.
        messages: Vec<Message>,
    },
    /// A model's answer that goes on from one the provider paused
    /// (Anthropic's `pause_turn`): it extends the history's last message,
    /// the paused answer — the texts joined, the reasoning and the calls
    /// after — so the answer stays one message.
    Continued {
        /// The rest of the answer.
        message: Message,
    },
    /// A tool step begins: its calls, in the model's order, each planned —
    /// written whole, as journals of format 1 wrote it (a newer one writes
    /// [`Record::StepPlanned`]); still read and applied.
    Step {
        /// The calls.
        calls: Vec<ToolCall>,
    },
    /// A tool step begins: the calls of the answer just given (the
    /// history's last message) with these ids, in the model's order, each
    /// planned. The answer holds their names and arguments; the record
    /// names them only, so a call's arguments are stored once. Written
    /// from journal format 2 on.
    StepPlanned {
        /// The calls' ids.
        ids: Vec<String>,
    },
    /// One call of the step in flight got further.
    Call {
        /// The call's id.
        id: String,
        /// Its state now.
        #[serde(flatten)]
        state: CallState,
    },
    /// The step in flight ended: each call's result (its `finished`
    /// state, else "not run") joins the history, in the calls' order.
    StepClosed,
    /// Model turns taken, tool calls made and tokens used so far.
    Counts {
        /// Model turns.
        steps: usize,
        /// Tool calls.
        tool_calls: usize,
        /// Tokens, if any model call reported usage.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The run's status changed.
    Status {
        /// Its status now.
        #[serde(flatten)]
        status: RunStatus,
    },
    /// The history was replaced by a shorter one that stands for it (a
    /// compaction): what the model reads from here on.
    Compacted {
        /// The history now.
        messages: Vec<Message>,
    },
    /// A tool search loaded deferred tools: the model is shown them from
    /// here on.
    ToolsLoaded {
        /// The tools' names, as the model calls them.
        names: Vec<String>,
    },
}

impl Record {
    /// `messages`, `continued`, `step`, `step_planned`, `call`,
    /// `step_closed`, `counts`, `status`, `compacted` or `tools_loaded`.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Messages { .. } => "messages",
            Record::Continued { .. } => "continued",
            Record::Step { .. } => "step",
            Record::StepPlanned { .. } => "step_planned",
            Record::Call { .. } => "call",
            Record::StepClosed => "step_closed",
            Record::Counts { .. } => "counts",
            Record::Status { .. } => "status",
            Record::Compacted { .. } => "compacted",
            Record::ToolsLoaded { .. } => "tools_loaded",
        }
    }

    /// The stored form: JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A record holds strings, numbers and maps of them: it always
        // serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads record `seq` of run `run_id`, at most `limit` bytes.
    pub fn from_bytes(
        run_id: &str,
        seq: u64,
        bytes: &[u8],
        limit: usize,
    ) -> Result<Record, StoreError> {
        if bytes.len() > limit {
            return Err(StoreError::TooLarge {
                run_id: run_id.to_owned(),
                record: format!("record {seq}"),
                bytes: bytes.len(),
                limit,
            });
        }
        serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt {
            run_id: run_id.to_owned(),
            record: Some(seq),
            why: err.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_over_its_bound_or_corrupt_names_the_run_and_the_record() {
        let bytes = Record::StepClosed.to_bytes();
        let err = Record::from_bytes("r1", 7, &bytes, bytes.len() - 1).unwrap_err();
        assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("record 7 of run r1"), "{err}");
        let err = Record::from_bytes("r1", 7, b"{\"record\": \"nope\"}", 100).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    record: Some(7),
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("record 7 of run r1"), "{err}");
    }
}
