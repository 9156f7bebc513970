//! The tool step in flight: which of its calls run and which wait for a
//! decision ([`StepState`]), the run's sink for the approval layer's
//! events (each request and decision recorded in the run's journal), and
//! the first record a step's calls failed to save ([`FirstFailure`]).

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::approval::{ApprovalEvent, ApprovalEvents};
use crate::guardrail::{Action, GuardrailEvents};
use crate::ToolError;

use super::event::AgentEvent;
use super::journal::{run_error, RunJournal};
use super::store::CallState;

/// The first failed checkpoint of a run, shared with its calls.
pub(super) type FirstFailure = Arc<std::sync::Mutex<Option<ToolError>>>;

/// Keeps `err` as the step's first failed checkpoint.
pub(super) fn fail(failed: &FirstFailure, err: ToolError) {
    failed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert(err);
}

/// Which calls of the current tool step are running and which of them
/// wait for a decision: when they are the same, the run can only wait
/// ([`AgentEvent::AwaitingApproval`]).
#[derive(Debug, Default)]
pub(super) struct StepState {
    /// Calls taken from the step's queue and not ended (starting, asking,
    /// running).
    pub(super) running: usize,
    /// Calls of the step not taken from its queue yet, and how many may
    /// run at once: a call about to start means the run is not stalled.
    pub(super) queued: usize,
    pub(super) parallel: usize,
    pub(super) waiting: Vec<String>,
    /// Whether the present wait has been told.
    pub(super) told: bool,
    /// Whether a guardrail raised: the run ends at the next boundary.
    pub(super) raised: bool,
    /// The tools the run's searches have loaded or are loading: two
    /// searches of one step never both report the same tool.
    pub(super) loading: std::collections::HashSet<String>,
}

impl StepState {
    /// The calls waiting, if the run now can do nothing but wait and has
    /// not said so yet.
    pub(super) fn stalled(&mut self) -> Option<Vec<String>> {
        // A free slot with a call queued for it: that call is about to
        // start, the run is not waiting.
        let starting = self.queued > 0 && self.running < self.parallel;
        let stalled = self.running > 0 && self.waiting.len() >= self.running && !starting;
        if !stalled {
            self.told = false;
            return None;
        }
        if std::mem::replace(&mut self.told, true) {
            return None;
        }
        Some(self.waiting.clone())
    }
}

/// The run's events, as the guardrail layer's sink: each is streamed, and
/// a raise is kept in the step's state, so the run ends at the next
/// boundary. It holds the channel weakly, as [`approval_events`] does.
pub(super) fn guardrail_events(
    events: mpsc::Sender<AgentEvent>,
    step: Arc<std::sync::Mutex<StepState>>,
) -> GuardrailEvents {
    let events = events.downgrade();
    GuardrailEvents::new(move |triggered| {
        if triggered.action == Action::Raised {
            step.lock().unwrap_or_else(|p| p.into_inner()).raised = true;
        }
        let events = events.upgrade();
        async move {
            if let Some(events) = events {
                let _ = events.send(AgentEvent::GuardrailTriggered(triggered)).await;
            }
        }
    })
}

/// The run's events, as the approval layer's sink; it also keeps the
/// step's waiting calls, to tell when the run can only wait, and records
/// each request and decision in the journal before the layer goes on (a
/// record that fails stops the call). It holds the channel weakly: a
/// request kept past the run (by a model, by a task a tool spawned) must
/// not keep the event stream from ending.
pub(super) fn approval_events(
    events: mpsc::Sender<AgentEvent>,
    step: Arc<std::sync::Mutex<StepState>>,
    journal: Arc<RunJournal>,
    failed: FirstFailure,
) -> ApprovalEvents {
    let events = events.downgrade();
    ApprovalEvents::fallible(move |event| {
        let events = events.upgrade();
        let stalled = {
            let mut step = step.lock().unwrap_or_else(|p| p.into_inner());
            match &event {
                ApprovalEvent::Requested(asked) => step.waiting.push(asked.call_id.clone()),
                ApprovalEvent::Decided(decided) => {
                    let call = &decided.request.call_id;
                    if let Some(at) = step.waiting.iter().position(|id| id == call) {
                        step.waiting.remove(at);
                    }
                }
            }
            step.stalled()
        };
        let (journal, failed) = (Arc::clone(&journal), Arc::clone(&failed));
        async move {
            {
                // A decision not stored means the tool does not run: the
                // call then goes back to waiting for it (`before`).
                let (call_id, state, before) = match &event {
                    ApprovalEvent::Requested(asked) => (
                        &asked.call_id,
                        CallState::WaitingApproval {
                            request: asked.clone(),
                        },
                        None,
                    ),
                    ApprovalEvent::Decided(decided) => (
                        &decided.request.call_id,
                        CallState::Decided {
                            decision: decided.decision.clone(),
                            by: decided.by.clone(),
                        },
                        Some(CallState::WaitingApproval {
                            request: decided.request.clone(),
                        }),
                    ),
                };
                if let Err(err) = journal.call_else(call_id, state, before).await {
                    let err = run_error(err);
                    fail(&failed, err.clone());
                    return Err(ToolError::new(
                        err.kind(),
                        format!(
                            "not run: its approval could not be recorded ({})",
                            err.message()
                        ),
                    ));
                }
            }
            let Some(events) = events else {
                return Ok(());
            };
            let event = match event {
                ApprovalEvent::Requested(asked) => Some(AgentEvent::ApprovalRequested {
                    call_id: asked.call_id,
                    name: asked.tool,
                    arguments: asked.arguments,
                    automatic: asked.automatic,
                    reason: asked.reason,
                }),
                ApprovalEvent::Decided(decided) => Some(AgentEvent::ApprovalDecided {
                    call_id: decided.request.call_id,
                    name: decided.request.tool,
                    decision: decided.decision,
                    by: decided.by,
                }),
            };
            if let Some(event) = event {
                let _ = events.send(event).await;
            }
            if let Some(call_ids) = stalled {
                let _ = events.send(AgentEvent::AwaitingApproval { call_ids }).await;
            }
            Ok(())
        }
    })
}
