//! Runs that outlive their process: checkpointing a run into a
//! [`RunStore`] as it goes ([`Checkpointer`]), and resuming one
//! ([`Agent::resume`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::approval::Decision;
use crate::model::ModelService;
use crate::{ToolError, ToolInfo};

use super::event::StopReason;
use super::run::Run;
use super::service::{Agent, AgentStream};
use super::step::{approval_events, StepState};
use super::store::checkpoint::now_ms;
use super::store::{
    CallState, Checkpoint, Holder, RunStatus, RunStore, StoreError, Stored, Version,
};

/// The error a run reports when a checkpoint failed: `Unavailable` for a
/// store that did not answer, `Denied` when another process took the run.
pub(super) fn run_error(err: StoreError) -> ToolError {
    match err {
        err @ StoreError::Conflict { .. } => ToolError::new(
            crate::ErrorKind::Denied,
            format!("another process took this run over: {err}"),
        )
        .with_source(err),
        err => err.into(),
    }
}

/// What a run does when its store fails to take a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnStoreError {
    /// The run ends ([`StopReason::StoreFailed`], after an
    /// [`AgentEvent::Error`](super::AgentEvent::Error) with an `Unavailable`
    /// error); a call whose start could not be recorded does not run. The
    /// default: a run that was asked to survive a restart and silently
    /// cannot would lose an approval at the next restart, or run a call
    /// twice.
    #[default]
    Fail,
    /// The run goes on in memory, with a warning on its span; it stops
    /// checkpointing (it cannot be resumed past the last checkpoint that
    /// succeeded).
    Continue,
}

/// How an agent checkpoints its runs.
#[derive(Clone)]
pub(super) struct Durability {
    pub(super) store: Arc<dyn RunStore>,
    pub(super) process: Arc<str>,
    pub(super) lease: Duration,
    pub(super) timeout: Duration,
    pub(super) on_error: OnStoreError,
}

impl fmt::Debug for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durability")
            .field("process", &self.process)
            .field("lease", &self.lease)
            .field("timeout", &self.timeout)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

/// The default lease of a running run: 60 s without a checkpoint.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The default bound on one checkpoint's save: 5 s.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(5);

/// One run's checkpoint and its version; saves are one at a time.
pub(super) struct Checkpointer {
    durability: Durability,
    written: tokio::sync::Mutex<Written>,
}

struct Written {
    version: Version,
    checkpoint: Checkpoint,
    /// A save failed and the run went on in memory.
    in_memory: bool,
    /// A save failed and the run stops: every later save fails the same
    /// way at once (the store is not waited for again).
    broken: Option<StoreError>,
}

impl Checkpointer {
    pub(super) fn new(durability: Durability, checkpoint: Checkpoint, version: Version) -> Self {
        Checkpointer {
            durability,
            written: tokio::sync::Mutex::new(Written {
                version,
                checkpoint,
                in_memory: false,
                broken: None,
            }),
        }
    }

    /// Applies `change` and saves the checkpoint, within the timeout. A
    /// conflict (another process took the run) is always an error; another
    /// failure is, or is warned about, as the agent is set.
    pub(super) async fn update(
        &self,
        change: impl FnOnce(&mut Checkpoint),
    ) -> Result<(), StoreError> {
        let mut written = self.written.lock().await;
        change(&mut written.checkpoint);
        if written.in_memory {
            return Ok(());
        }
        if let Some(err) = &written.broken {
            return Err(err.clone());
        }
        let now = now_ms();
        let lease = u64::try_from(self.durability.lease.as_millis()).unwrap_or(u64::MAX);
        let checkpoint = &mut written.checkpoint;
        checkpoint.saved_at_ms = now;
        checkpoint.holder = (checkpoint.status == RunStatus::Running).then(|| Holder {
            process: self.durability.process.to_string(),
            until_ms: now.saturating_add(lease),
        });
        let timeout = self.durability.timeout;
        let save = self
            .durability
            .store
            .save(&written.checkpoint, written.version);
        let saved = match tokio::time::timeout(timeout, save).await {
            Ok(saved) => saved,
            Err(_) => Err(StoreError::unavailable(format!(
                "a checkpoint was not saved within {timeout:?}"
            ))),
        };
        match saved {
            Ok(version) => {
                written.version = version;
                Ok(())
            }
            Err(err @ StoreError::Conflict { .. }) => {
                written.broken = Some(err.clone());
                Err(err)
            }
            Err(err) if self.durability.on_error == OnStoreError::Continue => {
                tracing::warn!(
                    error = %err,
                    "the run could not be checkpointed; it goes on in memory and cannot be resumed past this point"
                );
                written.in_memory = true;
                Ok(())
            }
            Err(err) => {
                written.broken = Some(err.clone());
                Err(err)
            }
        }
    }

    /// Takes a stored run for this process: saves it as running, held by
    /// this process, strictly (whatever [`OnStoreError`] says: a run
    /// taken in memory only could be taken twice).
    pub(super) async fn take(
        durability: Durability,
        mut checkpoint: Checkpoint,
        version: Version,
    ) -> Result<Self, StoreError> {
        let now = now_ms();
        let lease = u64::try_from(durability.lease.as_millis()).unwrap_or(u64::MAX);
        checkpoint.status = RunStatus::Running;
        checkpoint.saved_at_ms = now;
        checkpoint.holder = Some(Holder {
            process: durability.process.to_string(),
            until_ms: now.saturating_add(lease),
        });
        let timeout = durability.timeout;
        let version = tokio::time::timeout(timeout, durability.store.save(&checkpoint, version))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "run {} was not taken within {timeout:?}",
                    checkpoint.run_id
                )))
            })?;
        Ok(Checkpointer::new(durability, checkpoint, version))
    }

    /// Sets the state of the step's call `call_id` and saves.
    pub(super) async fn call(&self, call_id: &str, state: CallState) -> Result<(), StoreError> {
        self.update(|checkpoint| {
            if let Some(record) = checkpoint.step.iter_mut().find(|r| r.call.id == call_id) {
                record.state = state;
            }
        })
        .await
    }

    /// The checkpoint as last changed.
    pub(super) async fn snapshot(&self) -> Checkpoint {
        self.written.lock().await.checkpoint.clone()
    }
}

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
    /// [`Agent::run_with`]).
    pub fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }
}

/// Why a run could not be resumed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ResumeError {
    /// The agent has no store ([`Agent::store`]).
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

impl<M> Agent<M>
where
    M: ModelService,
{
    /// Continues the stored run `run_id` from its last checkpoint, through
    /// this agent's model and toolbox, in this process.
    ///
    /// The run is taken first (a compare-and-set on its version): a run
    /// another process holds — running, its lease not passed — or takes
    /// at the same moment is [`ResumeError::Held`], and nothing runs. Then
    /// the step in flight goes on, call by call, as its stored state says
    /// ([`CallState`]): a finished call is not run again; a call that
    /// waited for approval takes the decision `resume` brings (or is asked
    /// again); a call that had started runs again only if its tool is
    /// idempotent or read-only — otherwise the model reads an
    /// [`Interrupted`](crate::ErrorKind::Interrupted) result: "the call may
    /// have run; the process stopped before it finished". Then the run goes
    /// on as any.
    ///
    /// The stream does not repeat what the run streamed before: it starts
    /// with the resumed calls' decisions, outputs and results.
    pub async fn resume(&self, run_id: &str, resume: Resume) -> Result<AgentStream, ResumeError> {
        let durability = self.durability.clone().ok_or(ResumeError::NoStore)?;
        let Stored {
            checkpoint,
            version,
        } = tokio::time::timeout(durability.timeout, durability.store.load(run_id))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "run {run_id} was not loaded within {:?}",
                    durability.timeout
                )))
            })?
            .ok_or_else(|| ResumeError::NotFound {
                run_id: run_id.to_owned(),
            })?;
        if let RunStatus::Done { stop } = checkpoint.status {
            return Err(ResumeError::Finished {
                run_id: run_id.to_owned(),
                stop,
            });
        }
        if let Some(age) = resume.max_age {
            let age = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
            if checkpoint.status == RunStatus::Waiting
                && now_ms().saturating_sub(checkpoint.saved_at_ms) > age
            {
                return Err(ResumeError::Expired {
                    run_id: run_id.to_owned(),
                });
            }
        }
        if checkpoint.held_by_other(&durability.process, now_ms()) {
            return Err(ResumeError::Held {
                run_id: run_id.to_owned(),
                process: checkpoint.holder.map(|holder| holder.process),
            });
        }
        // Take it: the first process to write this version holds the run.
        let checkpoints = Arc::new(Checkpointer::take(durability, checkpoint, version).await?);
        let checkpoint = checkpoints.snapshot().await;
        let Resume {
            decisions,
            otherwise,
            by,
            extensions,
            ..
        } = resume;
        // A waiting call the resume decides was asked about before: its
        // request is not streamed again. One asked again is.
        let asked_before: HashSet<String> = checkpoint
            .step
            .iter()
            .filter(|record| matches!(record.state, CallState::WaitingApproval { .. }))
            .filter(|record| otherwise.is_some() || decisions.contains_key(&record.call.id))
            .map(|record| record.call.id.clone())
            .collect();

        let resumed = Resumed {
            records: checkpoint.step.clone(),
            decisions,
            otherwise,
            by: by.unwrap_or_else(|| "the user".to_owned()),
        };
        let (tx, rx) = mpsc::channel(32);
        let span = self.span(Some(run_id));
        let run_id: Arc<str> = Arc::from(run_id);
        let agent = self.clone();
        let run_key = crate::model::RunId::new(Arc::clone(&run_id));
        let driver = {
            let checkpoints = Arc::clone(&checkpoints);
            async move {
                let tools: Arc<[ToolInfo]> =
                    agent.toolbox.infos_for(&extensions).cloned().collect();
                let mut extensions = extensions;
                extensions.insert(run_key);
                let step = Arc::new(std::sync::Mutex::new(StepState::default()));
                let failed = Arc::default();
                extensions.insert(approval_events(
                    tx.clone(),
                    Arc::clone(&step),
                    Some(Arc::clone(&checkpoints)),
                    Arc::new(asked_before),
                    Arc::clone(&failed),
                ));
                let run = Run {
                    agent,
                    messages: Arc::new(checkpoint.messages),
                    tools,
                    extensions,
                    tx,
                    step,
                    usage: checkpoint.usage,
                    steps: checkpoint.steps,
                    tool_calls: checkpoint.tool_calls,
                    checkpoints: Some(checkpoints),
                    failed,
                    costs: Default::default(),
                };
                run.finish(Some(resumed)).await;
            }
        };
        Ok(AgentStream {
            driver: Some(Box::pin(driver.instrument(span))),
            events: rx,
            run_id,
            checkpoints: Some(checkpoints),
        })
    }
}

/// The step a resumed run goes on with.
pub(super) struct Resumed {
    pub(super) records: Vec<super::store::CallRecord>,
    pub(super) decisions: HashMap<String, Decision>,
    pub(super) otherwise: Option<Decision>,
    pub(super) by: String,
}
