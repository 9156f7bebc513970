//! The agent as a service: a run started ([`Agent::run_with`]) or
//! resumed ([`Agent::resume`]) — both through the one constructor of a
//! run — and [`Agent`] as a `Service<AgentRequest>`.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{ready, Ready};
use http::Extensions;
use tower_service::Service;

use crate::model::{Message, ModelService};
use crate::ToolError;

use super::journal::RunJournal;
use super::resume::{Resume, ResumeError, Resumed};
use super::run::Run;
use super::settings::Agent;
use super::stream::AgentStream;

#[cfg(doc)]
use super::store::CallState;

impl<M> Agent<M>
where
    M: ModelService,
{
    /// Runs the agent on a conversation.
    pub fn run(&self, messages: Vec<Message>) -> AgentStream {
        self.run_with(messages, Extensions::new())
    }

    /// Runs the agent on behalf of a caller: `extensions` (the caller's
    /// identity, say, as an auth layer found it) go with every model
    /// request and every tool call of the run, so the toolbox's resolver
    /// decides which tools the model is shown and may call, and per-caller
    /// limits and the tools themselves see who is asking.
    pub fn run_with(&self, messages: Vec<Message>, extensions: Extensions) -> AgentStream {
        let run_id: Arc<str> = Arc::from(crate::id::new_token());
        let journal = RunJournal::fresh(run_id, messages, self.durability.clone());
        Run::start(self.clone(), journal, extensions, None)
    }

    /// Continues the stored run `run_id` from where its journal stands,
    /// through this agent's model and toolbox, in this process.
    ///
    /// The run is taken first (an append at the version read): a run
    /// another process holds — running, its lease not passed — or takes
    /// at the same moment is [`ResumeError::Held`], and nothing runs. Then
    /// the step in flight goes on, call by call, as its stored state says
    /// ([`CallState`]): a finished call is not run again; a decision
    /// stored, or brought by `resume` for a call that waited, binds — a
    /// denied call never reaches the toolbox, an allowed one is not asked
    /// again, whatever the approval layers' own approvers or policies say;
    /// a call that waited and is given no decision is asked again; a call
    /// that had started runs again only if its tool is idempotent or
    /// read-only — otherwise the model reads an
    /// [`Interrupted`](crate::ErrorKind::Interrupted) result: "the call may
    /// have run; the process stopped before it finished". Then the run goes
    /// on as any.
    ///
    /// The stream does not repeat what the run streamed before: it starts
    /// with the resumed calls' decisions, outputs and results.
    pub async fn resume(&self, run_id: &str, resume: Resume) -> Result<AgentStream, ResumeError> {
        let durability = self.durability.clone().ok_or(ResumeError::NoStore)?;
        let journal = RunJournal::take(durability, run_id, resume.max_age).await?;
        let Resume {
            decisions,
            otherwise,
            by,
            extensions,
            ..
        } = resume;
        let resumed = Resumed {
            decisions,
            otherwise,
            by: by.unwrap_or_else(|| "the user".to_owned()),
        };
        Ok(Run::start(self.clone(), journal, extensions, Some(resumed)))
    }
}

/// A conversation and the caller's extensions: what [`Agent`] takes as a
/// `Service` (see [`Agent::run_with`]).
#[derive(Debug, Clone, Default)]
pub struct AgentRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Per-run data for the model requests and tool calls (caller identity…).
    pub extensions: Extensions,
}

impl AgentRequest {
    /// A request with no extensions.
    pub fn new(messages: Vec<Message>) -> Self {
        AgentRequest {
            messages,
            extensions: Extensions::new(),
        }
    }

    /// Inserts a per-run value into the extensions.
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
}

impl From<Vec<Message>> for AgentRequest {
    fn from(messages: Vec<Message>) -> Self {
        AgentRequest::new(messages)
    }
}

/// Requests are an [`AgentRequest`] or anything that converts into one
/// (a plain `Vec<Message>`).
impl<M, R> Service<R> for Agent<M>
where
    R: Into<AgentRequest>,
    M: ModelService,
{
    type Response = AgentStream;
    type Error = ToolError;
    type Future = Ready<Result<AgentStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let AgentRequest {
            messages,
            extensions,
        } = request.into();
        ready(Ok(self.run_with(messages, extensions)))
    }
}
