//! The snapshot of a run's state: a whole [`Checkpoint`] as versioned
//! JSON — what a store folds the journal's records onto, and the form
//! runs were stored in before the journal.

use serde::{Deserialize, Serialize};

use crate::agent::store::StoreError;

use super::Checkpoint;

/// The format this build writes snapshots (and checkpoints, before the
/// journal) in, and the newest it reads.
pub const CHECKPOINT_FORMAT: u64 = 1;

/// A snapshot as written: the format, then the state's fields.
#[derive(Serialize)]
struct SnapshotOut<'a> {
    format: u64,
    #[serde(flatten)]
    checkpoint: &'a Checkpoint,
}

/// A stored snapshot's format alone, read before the rest.
#[derive(Deserialize)]
struct FormatOnly {
    format: Option<u64>,
}

/// A snapshot as read: the state beside its format.
#[derive(Deserialize)]
struct SnapshotIn {
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
        serde_json::to_vec(&SnapshotOut {
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
        let FormatOnly { format } = serde_json::from_slice(bytes)
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
        let SnapshotIn { checkpoint, .. } =
            serde_json::from_slice(bytes).map_err(|err| corrupt(err.to_string()))?;
        if checkpoint.run_id != run_id {
            return Err(corrupt(format!(
                "it is the checkpoint of run {}",
                checkpoint.run_id
            )));
        }
        Ok(checkpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::store::checkpoint::tests::checkpoint;

    #[test]
    fn round_trips() {
        let bytes = checkpoint().to_bytes().unwrap();
        assert!(bytes.starts_with(br#"{"format":1,"#));
        let read = Checkpoint::from_bytes("r1", &bytes).unwrap();
        assert_eq!(read, checkpoint());
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
}
