//! The state of a run: [`Checkpoint`] — what its journal's records fold
//! into, and what a snapshot stores —, its calls' states, and the
//! versioned JSON a snapshot is written in.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::approval::{ApprovalRequest, DecidedBy, Decision};
use crate::model::{Message, ToolCall, Usage};
use crate::output::Media;

use super::super::StopReason;
use super::StoreError;

/// The format this build writes snapshots (and checkpoints, before the
/// journal) in, and the newest it reads.
pub const CHECKPOINT_FORMAT: u64 = 1;

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

#[derive(Serialize)]
struct Write<'a> {
    format: u64,
    #[serde(flatten)]
    checkpoint: &'a Checkpoint,
}

#[derive(Deserialize)]
struct Format {
    format: Option<u64>,
}

#[derive(Deserialize)]
struct Read {
    #[allow(dead_code)]
    format: u64,
    #[serde(flatten)]
    checkpoint: Checkpoint,
}

impl Checkpoint {
    /// The stored form of a snapshot: JSON with the format version. A
    /// snapshot has no bound of its own: it is what the run's records,
    /// each bounded, fold into.
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoreError> {
        serde_json::to_vec(&Write {
            format: CHECKPOINT_FORMAT,
            checkpoint: self,
        })
        .map_err(|err| StoreError::Corrupt {
            run_id: self.run_id.clone(),
            record: None,
            why: format!("it cannot be written: {err}"),
        })
    }

    /// Reads the stored form of run `run_id`'s snapshot (or a whole
    /// checkpoint of an earlier version): a typed error for one that does
    /// not parse, one of another run, or one of a newer format.
    pub fn from_bytes(run_id: &str, bytes: &[u8]) -> Result<Checkpoint, StoreError> {
        let corrupt = |why: String| StoreError::Corrupt {
            run_id: run_id.to_owned(),
            record: None,
            why,
        };
        let Format { format } = serde_json::from_slice(bytes)
            .map_err(|err| corrupt(format!("it is not a checkpoint: {err}")))?;
        let format = format.ok_or_else(|| corrupt("it has no format version".to_owned()))?;
        if format > CHECKPOINT_FORMAT {
            return Err(StoreError::UnknownFormat {
                run_id: run_id.to_owned(),
                found: format,
                supported: CHECKPOINT_FORMAT,
            });
        }
        if format == 0 {
            return Err(corrupt("its format version is 0".to_owned()));
        }
        let Read { checkpoint, .. } =
            serde_json::from_slice(bytes).map_err(|err| corrupt(err.to_string()))?;
        if checkpoint.run_id != run_id {
            return Err(corrupt(format!(
                "it is the checkpoint of run {}",
                checkpoint.run_id
            )));
        }
        Ok(checkpoint)
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

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            run_id: "r1".into(),
            status: RunStatus::Waiting,
            messages: Arc::new(vec![Message::user("hi")]),
            step: vec![CallRecord {
                call: ToolCall {
                    id: "c1".into(),
                    name: "write".into(),
                    arguments: "{}".into(),
                },
                state: CallState::WaitingApproval {
                    request: ApprovalRequest::new("c1", "write", "{}"),
                },
            }],
            usage: Some(Usage::new(3, 4)),
            steps: 1,
            tool_calls: 1,
            holder: None,
            loaded_tools: Vec::new(),
            saved_at_ms: 5,
        }
    }

    #[test]
    fn round_trips() {
        let bytes = checkpoint().to_bytes().unwrap();
        assert!(bytes.starts_with(br#"{"format":1,"#));
        let read = Checkpoint::from_bytes("r1", &bytes).unwrap();
        assert_eq!(read, checkpoint());
    }

    #[test]
    fn who_decided_reads_typed_and_as_a_name_stored_before() {
        let decided = |by| CallState::Decided {
            decision: Decision::Allow,
            by,
        };
        for by in [
            DecidedBy::Policy,
            DecidedBy::approver("an operator"),
            DecidedBy::caller("the user"),
        ] {
            let json = serde_json::to_string(&decided(by.clone())).unwrap();
            let read: CallState = serde_json::from_str(&json).unwrap();
            assert_eq!(read, decided(by));
        }
        for (name, by) in [
            ("the user", DecidedBy::caller("the user")),
            ("policy", DecidedBy::Policy),
            ("approver", DecidedBy::approver("approver")),
        ] {
            let older = format!(r#"{{"state": "decided", "decision": "allow", "by": "{name}"}}"#);
            let read: CallState = serde_json::from_str(&older).unwrap();
            assert_eq!(read, decided(by));
        }
    }

    #[test]
    fn a_finished_call_keeps_its_images_and_an_older_one_reads_without() {
        let finished = |images| CallState::Finished {
            text: "done".into(),
            is_error: false,
            images,
        };
        let image = Media {
            data: "iVBORw0KGgo=".into(),
            mime_type: "image/png".into(),
        };
        let json = serde_json::to_string(&finished(vec![image.clone()])).unwrap();
        let read: CallState = serde_json::from_str(&json).unwrap();
        assert_eq!(read, finished(vec![image]));
        // Written before images were kept: none.
        let older = r#"{"state": "finished", "text": "done", "is_error": false}"#;
        let read: CallState = serde_json::from_str(older).unwrap();
        assert_eq!(read, finished(Vec::new()));
        // None: the field is left out, as before.
        let json = serde_json::to_string(&finished(Vec::new())).unwrap();
        assert!(!json.contains("images"), "{json}");
    }

    #[test]
    fn a_newer_format_names_both_versions() {
        let bytes = br#"{"format": 7, "whatever": true}"#;
        let err = Checkpoint::from_bytes("r1", bytes).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::UnknownFormat {
                    found: 7,
                    supported: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("format 7"), "{err}");
        assert!(err.to_string().contains("up to 1"), "{err}");
    }

    #[test]
    fn corrupt_checkpoints_are_typed() {
        for bytes in [
            &b"not json"[..],
            br#"{"run_id": "r1"}"#,
            br#"{"format": 1, "run_id": "r1"}"#,
            br#"{"format": 0}"#,
            br#"{"format": "one"}"#,
            br#"[1, 2]"#,
        ] {
            let err = Checkpoint::from_bytes("r1", bytes).unwrap_err();
            assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
            assert!(err.to_string().contains("run r1"), "{err}");
        }
        let other = checkpoint().to_bytes().unwrap();
        let err = Checkpoint::from_bytes("r2", &other).unwrap_err();
        assert!(err.to_string().contains("checkpoint of run r1"), "{err}");
    }

    #[test]
    fn a_lease_holds_until_it_passes() {
        let mut held = checkpoint();
        held.status = RunStatus::Running;
        held.holder = Some(Holder {
            process: "a".into(),
            until_ms: 100,
        });
        assert!(held.held_by_other("b", 99));
        assert!(!held.held_by_other("a", 99));
        assert!(!held.held_by_other("b", 100));
        held.status = RunStatus::Waiting;
        assert!(!held.held_by_other("b", 99));
    }
}
