//! A run's journal as stored: its [`Record`]s — each one change, the size
//! of the change —, its [`Head`] (status, holder, when last written), and
//! the fold of a snapshot and the records after it into a [`Checkpoint`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Message, ToolCall, Usage};

use super::checkpoint::{CallRecord, CallState, Checkpoint, Holder, RunStatus};
use super::{StoreError, Stored, Version};

/// The format of a run's journal this build writes (its head says it), and
/// the newest it reads.
pub const JOURNAL_FORMAT: u64 = 1;

/// The default bound on one stored record — one message, one tool result:
/// 16 MiB. A run as a whole has no bound: its history is as long as its
/// records are many.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// One change to a run's state, appended to its journal. A run's state is
/// its snapshot (if any) with each record after it applied in order
/// ([`Checkpoint::apply`]).
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
    /// A tool step begins: its calls, in the model's order, each planned.
    Step {
        /// The calls.
        calls: Vec<ToolCall>,
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
    /// `messages`, `continued`, `step`, `call`, `step_closed`, `counts`,
    /// `status`, `compacted` or `tools_loaded`.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Messages { .. } => "messages",
            Record::Continued { .. } => "continued",
            Record::Step { .. } => "step",
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
            Record::Step { calls } => {
                self.step = calls
                    .into_iter()
                    .map(|call| CallRecord {
                        call,
                        state: CallState::Planned,
                    })
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

/// What a store keeps of a run beside its records, rewritten at each
/// append: its status, the process holding it, when it was written, the
/// journal's format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The journal's format ([`JOURNAL_FORMAT`]).
    pub format: u64,
    /// Whether it runs, waits for a decision, or ended.
    #[serde(flatten)]
    pub status: RunStatus,
    /// The process running it, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// When it was last written, in milliseconds since the Unix epoch.
    pub saved_at_ms: u64,
}

impl Head {
    /// The stored form: JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads run `run_id`'s head: a typed error for one that does not
    /// parse or is of a newer format.
    pub fn from_bytes(run_id: &str, bytes: &[u8]) -> Result<Head, StoreError> {
        #[derive(Deserialize)]
        struct Format {
            format: Option<u64>,
        }
        let corrupt = |why: String| StoreError::Corrupt {
            run_id: run_id.to_owned(),
            record: None,
            why: format!("its head {why}"),
        };
        let Format { format } = serde_json::from_slice(bytes)
            .map_err(|err| corrupt(format!("does not parse: {err}")))?;
        match format {
            None => return Err(corrupt("has no format version".to_owned())),
            Some(found) if found > JOURNAL_FORMAT => {
                return Err(StoreError::UnknownFormat {
                    run_id: run_id.to_owned(),
                    found,
                    supported: JOURNAL_FORMAT,
                })
            }
            Some(_) => {}
        }
        serde_json::from_slice(bytes).map_err(|err| corrupt(err.to_string()))
    }
}

/// A run as a store read it: its head (none for a run stored whole,
/// before the journal), its snapshot (none before the first one), and the
/// records after the snapshot, in order — all still encoded.
#[derive(Debug, Clone, Default)]
pub struct Journal<'a> {
    /// The run.
    pub run_id: &'a str,
    /// Its version: the number of records ever appended.
    pub version: Version,
    /// Its head, encoded.
    pub head: Option<&'a [u8]>,
    /// Its snapshot, encoded (an empty one is none).
    pub snapshot: Option<&'a [u8]>,
    /// The records after the snapshot, encoded, in order.
    pub records: Vec<&'a [u8]>,
}

impl Journal<'_> {
    /// The run's state: the snapshot with each record applied, the head's
    /// status and holder; every record at most `limit` bytes. Every store
    /// loads through this, so the format, its bounds and its errors are
    /// the same everywhere.
    pub fn fold(self, limit: usize) -> Result<Stored, StoreError> {
        let run_id = self.run_id;
        let mut checkpoint = match self.snapshot.filter(|bytes| !bytes.is_empty()) {
            Some(bytes) => Checkpoint::from_bytes(run_id, bytes)?,
            None => Checkpoint::new(run_id),
        };
        let first = self
            .version
            .0
            .saturating_sub(self.records.len() as u64)
            .saturating_add(1);
        let mut bytes = 0;
        for (at, record) in self.records.iter().enumerate() {
            bytes += record.len();
            let record = Record::from_bytes(run_id, first + at as u64, record, limit)?;
            checkpoint.apply(record);
        }
        if let Some(head) = self.head.filter(|bytes| !bytes.is_empty()) {
            let head = Head::from_bytes(run_id, head)?;
            checkpoint.status = head.status;
            checkpoint.holder = head.holder;
            checkpoint.saved_at_ms = head.saved_at_ms;
        }
        Ok(Stored {
            checkpoint,
            version: self.version,
            snapshot_bytes: self.snapshot.map_or(0, <[u8]>::len),
            records: self.records.len(),
            record_bytes: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::{DecidedBy, Decision};

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "write".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn records_fold_into_the_run_they_describe() {
        let mut run = Checkpoint::new("r1");
        for record in [
            Record::Messages {
                messages: vec![Message::user("hi")],
            },
            Record::Messages {
                messages: vec![Message::assistant("calling")],
            },
            Record::Counts {
                steps: 1,
                tool_calls: 2,
                usage: Some(Usage::new(3, 4)),
            },
            Record::Step {
                calls: vec![call("a"), call("b")],
            },
            Record::Call {
                id: "b".into(),
                state: CallState::Decided {
                    decision: Decision::deny("no"),
                    by: DecidedBy::caller("the user"),
                },
            },
            Record::Call {
                id: "a".into(),
                state: CallState::Finished {
                    text: "done".into(),
                    is_error: false,
                    images: Vec::new(),
                },
            },
        ] {
            // Each record as stored, read back.
            let bytes = record.to_bytes();
            let read = Record::from_bytes("r1", 1, &bytes, MAX_RECORD_BYTES).unwrap();
            assert_eq!(read, record);
            run.apply(read);
        }
        assert_eq!(run.step.len(), 2);
        assert_eq!(run.step[0].state.as_str(), "finished");
        assert_eq!(run.step[1].state.as_str(), "decided");
        run.apply(Record::StepClosed);
        assert!(run.step.is_empty());
        assert_eq!(run.messages.len(), 4);
        assert_eq!(run.messages[2], Message::tool("a", "done"));
        assert!(matches!(
            &run.messages[3],
            Message::Tool { is_error: true, .. }
        ));
        assert_eq!((run.steps, run.tool_calls), (1, 2));
        run.apply(Record::Compacted {
            messages: vec![Message::user("summary")],
        });
        assert_eq!(*run.messages, [Message::user("summary")]);
    }

    #[test]
    fn a_continued_answer_extends_the_paused_one() {
        let mut run = Checkpoint::new("r1");
        run.apply(Record::Messages {
            messages: vec![Message::user("search"), Message::assistant("Searching…")],
        });
        run.apply(Record::Continued {
            message: Message::Assistant {
                content: Some(" found.".into()),
                tool_calls: vec![call("a")],
                reasoning: Vec::new(),
            },
        });
        assert_eq!(run.messages.len(), 2);
        assert_eq!(
            run.messages[1],
            Message::Assistant {
                content: Some("Searching… found.".into()),
                tool_calls: vec![call("a")],
                reasoning: Vec::new(),
            }
        );
    }

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

    #[test]
    fn a_head_of_a_newer_journal_is_an_unknown_format() {
        let err = Head::from_bytes("r1", br#"{"format": 9, "status": "running"}"#).unwrap_err();
        assert!(
            matches!(err, StoreError::UnknownFormat { found: 9, .. }),
            "{err}"
        );
    }
}
