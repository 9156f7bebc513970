//! A run's journal as a store holds it: its [`Head`] (status, holder,
//! when last written, the journal's format) and the borrowed view a store
//! loads through, [`Journal`], which folds a snapshot and the records
//! after it into the run's [`Checkpoint`].

use serde::{Deserialize, Serialize};

use crate::agent::store::{StoreError, Stored, Version};

use super::record::Record;
use super::{Checkpoint, Holder, RunStatus};

/// The format of a run's journal this build writes (its head says it), and
/// the newest it reads: 2, which names a step's calls by id
/// ([`Record::StepPlanned`](super::Record::StepPlanned)) where 1 wrote
/// them whole ([`Record::Step`](super::Record::Step)). A journal of
/// format 1 reads as it did; one this build wrote is refused as a newer
/// format by a build that reads only format 1.
pub const JOURNAL_FORMAT: u64 = 2;

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

    #[test]
    fn a_journal_of_format_1_still_loads() {
        // As format 1 wrote it, by hand: the step's calls whole, beside
        // the answer that holds them.
        let call = r#"{"id":"call_0_0","type":"function","function":{"name":"sql","arguments":"{\"sql\": \"DELETE FROM t\"}"}}"#;
        let records = [
            r#"{"record":"status","status":"running"}"#.to_owned(),
            r#"{"record":"messages","messages":[{"role":"user","content":"delete the old rows"}]}"#
                .to_owned(),
            format!(
                r#"{{"record":"messages","messages":[{{"role":"assistant","content":"Deleting.","tool_calls":[{call}]}}]}}"#
            ),
            r#"{"record":"counts","steps":1,"tool_calls":1}"#.to_owned(),
            format!(r#"{{"record":"step","calls":[{call}]}}"#),
            r#"{"record":"call","id":"call_0_0","state":"started"}"#.to_owned(),
        ];
        let head = br#"{"format":1,"status":"running","holder":{"process":"p1","until_ms":9},"saved_at_ms":5}"#;
        let journal = Journal {
            run_id: "r1",
            version: Version(6),
            head: Some(head),
            snapshot: None,
            records: records.iter().map(|r| r.as_bytes()).collect(),
        };
        let stored = journal.fold(crate::agent::store::MAX_RECORD_BYTES).unwrap();
        let run = stored.checkpoint;
        let sql = crate::model::ToolCall {
            id: "call_0_0".into(),
            name: "sql".into(),
            arguments: r#"{"sql": "DELETE FROM t"}"#.into(),
        };
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.holder.as_ref().map(|h| h.process.as_str()), Some("p1"));
        assert_eq!(run.saved_at_ms, 5);
        assert_eq!(run.messages.len(), 2);
        assert!(matches!(
            &run.messages[1],
            crate::model::Message::Assistant { tool_calls, .. } if *tool_calls == [sql.clone()]
        ));
        assert_eq!(run.step.len(), 1);
        assert_eq!(run.step[0].call, sql);
        assert_eq!(run.step[0].state, super::super::CallState::Started);
        assert_eq!((run.steps, run.tool_calls), (1, 1));
        assert_eq!((stored.version, stored.records), (Version(6), 6));
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
