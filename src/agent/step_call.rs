//! One tool call of a step: run from its stored state (a resumed step's
//! call may have finished, or started, or wait for a decision), its
//! start and end recorded in the run's journal, its items and result
//! streamed as events. Its result goes to the journal (what the model
//! reads, once) and to the event (the result itself); the step is told
//! only its length.

use std::sync::Arc;

use http::Extensions;
use tokio::sync::mpsc;

use crate::approval::{BindingDecision, DecidedBy, Decision};
use crate::model::ToolCall;
use crate::toolbox::ToolSearch;
use crate::{ErrorKind, ToolError, ToolResult, Toolbox};

use super::event::AgentEvent;
use super::journal::{run_error, RunJournal};
use super::resume::Resumed;
use super::search::Searched;
use super::step_state::{fail, FirstFailure, StepState};
use super::steps::{may_have_run, ToolStep};
use super::store::CallState;

/// A call of the step in flight: counted down when it ends or is dropped.
pub(super) struct RunningGuard<'a> {
    pub(super) step: &'a std::sync::Mutex<StepState>,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
        step.running = step.running.saturating_sub(1);
    }
}

/// One call of a step, with what it needs from its run.
pub(super) struct StepCall {
    pub(super) toolbox: Toolbox,
    pub(super) tx: mpsc::Sender<AgentEvent>,
    pub(super) extensions: Extensions,
    pub(super) step: Arc<std::sync::Mutex<StepState>>,
    pub(super) journal: Arc<RunJournal>,
    pub(super) failed: FirstFailure,
    pub(super) idempotent: bool,
    pub(super) resumed: Option<Arc<Resumed>>,
    /// Why the call may not run in this step (a tool outside its active
    /// set): answered with it, never handed to the toolbox.
    pub(super) refused: Option<ToolError>,
    /// For a call of the search tool: the search it runs.
    pub(super) search: Option<SearchCall>,
    /// Where the toolbox runs the call (none for a call refused or a
    /// search, which the run answers itself).
    pub(super) place: Option<ToolStep>,
}

/// A call of [`SEARCH_TOOLS`](super::SEARCH_TOOLS): run by the agent, not
/// the toolbox.
pub(super) struct SearchCall {
    pub(super) search: Arc<ToolSearch>,
    /// The tools returned when the model does not say.
    pub(super) limit: usize,
}

impl StepCall {
    /// Runs the call from its state; returns the length of its result's
    /// text, as the model reads it (a stored result's as it was).
    pub(super) async fn run(mut self, call: &ToolCall, state: CallState) -> usize {
        let running = {
            let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
            step.queued = step.queued.saturating_sub(1);
            step.running += 1;
            RunningGuard { step: &self.step }
        };
        let mut extensions = self.extensions.clone();
        let mut binding = None;
        // What the call goes back to should its start not be stored (a
        // call that waited for the person is cloned: a resume's, rare).
        let before = match &state {
            CallState::Planned => Some(CallState::Planned),
            waiting @ CallState::WaitingApproval { .. } => Some(waiting.clone()),
            _ => None,
        };
        match state {
            CallState::Finished { text, .. } => return text.len(),
            CallState::Started
            | CallState::Decided {
                decision: Decision::Allow | Decision::Modify { .. },
                ..
            } if !self.idempotent => {
                return self.refused(call, may_have_run()).await;
            }
            CallState::Decided { decision, by } => {
                binding = Some(BindingDecision::new(&call.id, decision, by));
            }
            // Only a call the person was asked about takes their answer: a
            // call not yet asked is asked as any (its policy first).
            CallState::WaitingApproval { .. } => {
                binding = self.resumed.as_ref().and_then(|resumed| {
                    let decision = resumed
                        .decisions
                        .get(&call.id)
                        .or(resumed.otherwise.as_ref())?;
                    let by = DecidedBy::caller(&*resumed.by);
                    Some(BindingDecision::new(&call.id, decision.clone(), by))
                });
            }
            CallState::Planned => {
                if let Some(err) = self.refused.take() {
                    return self.refused(call, err).await;
                }
            }
            CallState::Started => {}
        }
        match binding {
            // Denied already: the toolbox never sees the call, whatever
            // approval layers it has (or has not).
            Some(BindingDecision {
                decision: Decision::Deny { reason },
                by,
                ..
            }) => return self.denied(call, reason, by).await,
            Some(binding) => {
                extensions.insert(binding);
            }
            None => {}
        }
        let started = self
            .journal
            .call_else(&call.id, CallState::Started, before)
            .await;
        if let Err(err) = started {
            let err = run_error(err);
            fail(&self.failed, err.clone());
            let err = ToolError::new(
                err.kind(),
                format!(
                    "not run: its start could not be recorded ({})",
                    err.message()
                ),
            );
            return self.refused(call, err).await;
        }
        let finished = match &self.search {
            Some(search) => self.search(call, search, &extensions).await,
            None => {
                let place = self.place.take().unwrap_or(ToolStep::Here);
                let idempotent = self.idempotent;
                place
                    .run(&self.toolbox, call, extensions, &self.tx, idempotent)
                    .await
            }
        };
        drop(running);
        let length = self.finished(call, finished).await;
        let stalled = self
            .step
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stalled();
        if let Some(call_ids) = stalled {
            let _ = self
                .tx
                .send(AgentEvent::AwaitingApproval { call_ids })
                .await;
        }
        length
    }

    /// A search: the tools it found that were not loaded are loaded —
    /// recorded before its result, so a resumed run shows them too.
    async fn search(
        &self,
        call: &ToolCall,
        search: &SearchCall,
        extensions: &Extensions,
    ) -> CallState {
        let Searched { found, result } = super::search::search(
            &search.search,
            &call.id,
            &call.arguments,
            extensions,
            search.limit,
        )
        .await;
        let loaded = self.journal.loaded_tools();
        let names: Vec<String> = {
            // Claimed under the step's lock: a search running beside this
            // one does not report the same tool.
            let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
            found
                .into_iter()
                .filter(|name| !loaded.contains(name) && step.loading.insert(name.clone()))
                .collect()
        };
        if !names.is_empty() {
            if let Err(err) = self.journal.tools_loaded(names.clone()).await {
                fail(&self.failed, run_error(err));
            }
            let event = AgentEvent::ToolsLoaded {
                call_id: call.id.clone(),
                names,
            };
            let _ = self.tx.send(event).await;
        }
        let finished = CallState::finished(&result);
        let event = AgentEvent::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
        };
        let _ = self.tx.send(event).await;
        finished
    }

    /// The call ends with `err` without running; the length of its
    /// result's text.
    async fn refused(&self, call: &ToolCall, err: ToolError) -> usize {
        let result = ToolResult::from_error(err);
        let finished = CallState::Finished {
            text: result.text(),
            is_error: true,
            images: Vec::new(),
        };
        let length = self.finished(call, finished).await;
        let event = AgentEvent::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            result,
        };
        let _ = self.tx.send(event).await;
        length
    }

    /// The call was denied before: the decision is told and recorded
    /// again, and the model reads it, as an approval layer words it.
    async fn denied(&self, call: &ToolCall, reason: String, by: DecidedBy) -> usize {
        let decision = Decision::deny(reason.clone());
        let state = CallState::Decided {
            decision: decision.clone(),
            by: by.clone(),
        };
        if let Err(err) = self.journal.call(&call.id, state).await {
            fail(&self.failed, run_error(err));
        }
        let event = AgentEvent::ApprovalDecided {
            call_id: call.id.clone(),
            name: call.name.clone(),
            decision,
            by: by.clone(),
        };
        let _ = self.tx.send(event).await;
        let err = ToolError::new(
            ErrorKind::Denied,
            format!("the call of `{}` was denied by {by}: {reason}", call.name),
        );
        self.refused(call, err).await
    }

    /// Records the call's end, `finished`: what the model reads. Returns
    /// the length of its text.
    async fn finished(&self, call: &ToolCall, finished: CallState) -> usize {
        let length = match &finished {
            CallState::Finished { text, .. } => text.len(),
            _ => 0,
        };
        if let Err(err) = self.journal.call(&call.id, finished).await {
            fail(&self.failed, run_error(err));
        }
        length
    }
}
