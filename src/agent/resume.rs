//! What resuming a stored run takes ([`Resume`]: the person's decisions,
//! the caller's extensions) and why it may be refused ([`ResumeError`]).

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use http::Extensions;

use crate::approval::Decision;

use super::event::StopReason;
use super::store::StoreError;

/// What a resumed run takes with it: the decisions for its calls waiting
/// for approval, who made them, and the caller's extensions.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    pub(super) decisions: HashMap<String, Decision>,
    pub(super) otherwise: Option<Decision>,
    pub(super) by: Option<String>,
    pub(super) extensions: Extensions,
    pub(super) max_age: Option<Duration>,
}

impl Resume {
    /// Resumes with no decision: a call waiting for approval is asked
    /// about again.
    pub fn new() -> Self {
        Resume::default()
    }

    /// The decision for the waiting call `call_id`.
    pub fn decide(mut self, call_id: impl Into<String>, decision: Decision) -> Self {
        self.decisions.insert(call_id.into(), decision);
        self
    }

    /// The decision for every waiting call not given one by
    /// [`decide`](Self::decide) (without it, such a call is asked about
    /// again).
    pub fn otherwise(mut self, decision: Decision) -> Self {
        self.otherwise = Some(decision);
        self
    }

    /// Refuses to resume a run that has waited for a decision longer than
    /// `age` since its last checkpoint ([`ResumeError::Expired`]).
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Who made the decisions (`the user` unless set), as the approval
    /// layer records it.
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = Some(by.into());
        self
    }

    /// The caller's extensions for the rest of the run (see
    /// [`Agent::run_with`](super::Agent::run_with)).
    pub fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }
}

/// Why a run could not be resumed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ResumeError {
    /// The agent has no store ([`Agent::store`](super::Agent::store)).
    NoStore,
    /// The store has no such run (never saved, deleted or expired).
    NotFound {
        /// The run.
        run_id: String,
    },
    /// The run has ended.
    Finished {
        /// The run.
        run_id: String,
        /// How it ended.
        stop: StopReason,
    },
    /// The run waited for a decision longer than the resume allows
    /// ([`Resume::max_age`]).
    Expired {
        /// The run.
        run_id: String,
    },
    /// Another process runs it now (its lease has not passed), or took it
    /// first.
    Held {
        /// The run.
        run_id: String,
        /// The process holding it, if known.
        process: Option<String>,
    },
    /// The store failed, or its checkpoint is corrupt or of a newer format.
    Store(StoreError),
}

impl ResumeError {
    /// The HTTP status a front end answers with: 404, 409 (ended, held,
    /// taken), 503 (the store down), 500.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode;
        match self {
            ResumeError::NotFound { .. } | ResumeError::Expired { .. } => StatusCode::NOT_FOUND,
            ResumeError::Finished { .. } | ResumeError::Held { .. } => StatusCode::CONFLICT,
            ResumeError::Store(StoreError::Unavailable { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            ResumeError::NoStore | ResumeError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeError::NoStore => {
                f.write_str("the agent keeps no run store: no run can be resumed")
            }
            ResumeError::NotFound { run_id } => write!(f, "no run {run_id} is stored"),
            ResumeError::Expired { run_id } => {
                write!(f, "run {run_id} waited for a decision too long")
            }
            ResumeError::Finished { run_id, stop } => {
                write!(f, "run {run_id} has ended ({})", stop.as_str())
            }
            ResumeError::Held {
                run_id,
                process: Some(process),
            } => write!(f, "run {run_id} is running in process {process}"),
            ResumeError::Held {
                run_id,
                process: None,
            } => {
                write!(f, "run {run_id} was taken by another process")
            }
            ResumeError::Store(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ResumeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ResumeError::Store(err) => Some(err),
            _ => None,
        }
    }
}

impl From<StoreError> for ResumeError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Conflict { run_id, .. } => ResumeError::Held {
                run_id,
                process: None,
            },
            err => ResumeError::Store(err),
        }
    }
}

/// What a resumed run's stored step goes on with: the decisions the
/// resume brings and who made them.
pub(super) struct Resumed {
    pub(super) decisions: HashMap<String, Decision>,
    pub(super) otherwise: Option<Decision>,
    pub(super) by: String,
}
