//! One tool call of a run as a workflow of its own, `AgentToolCalls`,
//! keyed by its approval id, `{run}:{call}` (`{run}:{call}#{k}` for the
//! `k`th call of an id a model gave before): the run calls it for each
//! call of a step — all at once — and Restate runs it on any service
//! process.
//!
//! Its steps, each journaled:
//!
//! 1. For a tool that is not idempotent, an *intent*: a tool step that
//!    finds it set but has no outcome of its own follows an attempt that
//!    got past it and never finished — the call may have run, and is
//!    answered so rather than run again.
//! 2. The call through the user's toolbox, its layers included. When an
//!    approval layer set to `caller_decides()` asks the person, the step
//!    ends there — the tool has not started — with what was asked.
//! 3. When the person is asked: room among the runs waiting (the
//!    `AgentWaiting` object counts them, checked before anyone is asked;
//!    with no room the call is denied, and the model reads why), then the
//!    durable promise `decision`, raced against a durable timer: while it
//!    waits the invocation suspends (after the service's inactivity
//!    timeout), and no process holds it. The answer is the [`decide`]
//!    handler; the first decision binds — a later one, or the timer's
//!    denial, is told the binding one.
//! 4. A denial is the model's to read, the tool never called; an
//!    allowance (with its arguments, if modified) is the call through the
//!    toolbox again, its approval layer obeying the decision
//!    ([`BindingDecision`]), after an intent as in 1.
//!
//! [`decide`]: ToolCalls::decide

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::approval::{
    ApprovalEvent, ApprovalEvents, ApprovalRequest, BindingDecision, CallerApprover, DecidedBy,
    Decision,
};
use crate::model::ToolCall;
use crate::{ErrorKind, ToolError, ToolResult, Toolbox};

use crate::agent::event::AgentEvent;
use crate::agent::run_events::RunEvents;
use crate::agent::steps::restate::CallInput;
use crate::agent::steps::{may_have_run, run_tool};
use crate::agent::store::CallState;

use super::events::Writer;
use super::waiting::{Seat, WAITING, WAITING_KEY};

/// Who decides a call the person is asked about, by name.
const THE_USER: &str = "the user";

/// The tool calls of an agent's runs: see the [module docs](self).
#[derive(Clone)]
pub(super) struct ToolCalls {
    pub(super) toolbox: Toolbox,
    /// Where the call's events go, if anywhere.
    pub(super) events: Option<Arc<dyn RunEvents>>,
    /// How long a call waits for a person before it is denied.
    pub(super) approval_timeout: Duration,
    /// How many runs may wait for a person at once.
    pub(super) max_waiting_runs: u64,
}

/// A person's answer to the call a tool-call workflow waits on
/// (`POST /AgentToolCalls/{approval id}/decide`) — and what that answers:
/// the decision that binds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// What was decided.
    pub decision: Decision,
    /// Who decided.
    pub by: DecidedBy,
}

/// How the call through the toolbox ended: done, or the person asked.
#[derive(Serialize, Deserialize)]
enum Stepped {
    Done(CallState),
    Asked(ApprovalRequest),
}

// The handlers, in a module of their own: the macro adds clients whose
// methods it does not document.
#[allow(missing_docs, unreachable_pub)]
mod workflow {
    use super::*;

    #[restate_sdk::workflow(name = "AgentToolCalls")]
    impl ToolCalls {
        /// The call, to its end: what the model reads of it.
        #[handler]
        async fn run(
            &self,
            ctx: WorkflowContext<'_>,
            input: Json<CallInput>,
        ) -> Result<Json<CallState>, HandlerError> {
            let CallInput {
                run: run_id,
                call,
                idempotent,
            } = input.into_inner();
            let first = self
                .through_toolbox(&ctx, &run_id, &call, idempotent, None, "tool call")
                .await?;
            let asked = match first {
                Stepped::Done(state) => return Ok(Json(state)),
                Stepped::Asked(asked) => asked,
            };
            let answer = self.wait(&ctx, &run_id, &call, &asked).await?;
            match answer.decision {
                Decision::Deny { reason } => {
                    let err = ToolError::new(
                        ErrorKind::Denied,
                        format!(
                            "the call of `{}` was denied by {}: {reason}",
                            call.name, answer.by
                        ),
                    );
                    Ok(Json(CallState::finished(&ToolResult::from_error(err))))
                }
                decision => {
                    let binding = BindingDecision::new(&call.id, decision, answer.by);
                    let decided = self
                        .through_toolbox(
                            &ctx,
                            &run_id,
                            &call,
                            idempotent,
                            Some(binding),
                            "tool call decided",
                        )
                        .await?;
                    match decided {
                        Stepped::Done(state) => Ok(Json(state)),
                        // An approval layer that asks again despite the
                        // decision: the call does not run.
                        Stepped::Asked(_) => {
                            let err = ToolError::new(
                                ErrorKind::Denied,
                                "not run: the call was asked about again after its decision",
                            );
                            Ok(Json(CallState::finished(&ToolResult::from_error(err))))
                        }
                    }
                }
            }
        }

        /// A person's answer for the call this workflow waits on. The first
        /// answer binds: the answer is the decision that binds, this one's
        /// or an earlier one's (or the denial of a call that waited too
        /// long).
        #[handler]
        async fn decide(
            &self,
            ctx: SharedWorkflowContext<'_>,
            answer: Json<Answer>,
        ) -> Result<Json<Answer>, HandlerError> {
            let answer = answer.into_inner();
            ctx.resolve_promise::<Json<Answer>>(DECISION, Json(answer.clone()));
            let bound = ctx.peek_promise::<Json<Answer>>(DECISION).await?;
            Ok(bound.unwrap_or(Json(answer)))
        }

        /// What the person is asked, while the call waits for them (none
        /// before, nor once it was decided).
        #[handler]
        async fn asked(
            &self,
            ctx: SharedWorkflowContext<'_>,
        ) -> Result<Json<Option<ApprovalRequest>>, HandlerError> {
            let asked = ctx.get::<Json<Option<ApprovalRequest>>>(ASKED).await?;
            Ok(asked.unwrap_or(Json(None)))
        }
    }
}

/// The promise a person's answer resolves.
const DECISION: &str = "decision";
/// The state key of what the person is asked, while they are.
const ASKED: &str = "asked";

impl ToolCalls {
    /// The call through the toolbox as one journaled step (after an
    /// intent, for a tool not idempotent), `binding` in its extensions if
    /// given: done, or ended where the person would be asked.
    async fn through_toolbox(
        &self,
        ctx: &WorkflowContext<'_>,
        run: &str,
        call: &ToolCall,
        idempotent: bool,
        binding: Option<BindingDecision>,
        name: &str,
    ) -> Result<Stepped, TerminalError> {
        let fresh = match idempotent {
            true => None,
            false => {
                let flag = Arc::new(AtomicBool::new(false));
                let set = Arc::clone(&flag);
                ctx.run(move || async move {
                    set.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .name(format!("{name} intent"))
                .await?;
                Some(flag)
            }
        };
        let (toolbox, call) = (self.toolbox.clone(), call.clone());
        let events = self.events.clone();
        let (run, part) = (run.to_owned(), format!("tool {} {name}", ctx.key()));
        let Json(stepped) = ctx
            .run(move || async move {
                if let Some(fresh) = fresh {
                    if !fresh.load(Ordering::SeqCst) {
                        let stale = CallState::finished(&ToolResult::from_error(may_have_run()));
                        return Ok(Json(Stepped::Done(stale)));
                    }
                }
                let writer = match &events {
                    Some(log) => Some(Writer::live(log, &run, part).await),
                    None => None,
                };
                Ok(Json(asking(&toolbox, &call, binding, writer).await))
            })
            .name(name.to_owned())
            .await?;
        Ok(stepped)
    }

    /// Waits for the person's answer to `asked`, when there is room among
    /// the runs waiting; the decision that binds.
    async fn wait(
        &self,
        ctx: &WorkflowContext<'_>,
        run_id: &str,
        call: &ToolCall,
        asked: &ApprovalRequest,
    ) -> Result<Answer, TerminalError> {
        let seat = Seat {
            run: run_id.to_owned(),
            call: call.id.clone(),
            max: self.max_waiting_runs,
        };
        let taken = ctx
            .request::<Json<Seat>, bool>(
                RequestTarget::object(WAITING, WAITING_KEY, "take"),
                Json(seat.clone()),
            )
            .call()
            .await?;
        // What the person is asked and what was decided, told the same on
        // every execution of this workflow.
        let mut told = self
            .events
            .as_ref()
            .map(|log| Writer::replayed(log, run_id, format!("approval {}", ctx.key())));
        let decided = |answer: &Answer| AgentEvent::ApprovalDecided {
            call_id: call.id.clone(),
            name: call.name.clone(),
            decision: answer.decision.clone(),
            by: answer.by.clone(),
        };
        if !taken {
            let reason = format!(
                "not run: {} runs already wait for a person's approval, the most this service \
                 keeps; try again later or without this tool",
                self.max_waiting_runs
            );
            let answer = Answer {
                decision: Decision::deny(reason),
                by: DecidedBy::Policy,
            };
            if let Some(told) = &mut told {
                told.write(&decided(&answer)).await;
            }
            return Ok(answer);
        }
        ctx.set(ASKED, Json(Some(asked.clone())));
        if let Some(told) = &mut told {
            let request = AgentEvent::ApprovalRequested {
                call_id: asked.call_id.clone(),
                name: asked.tool.clone(),
                arguments: asked.arguments.clone(),
                automatic: false,
                reason: asked.reason.clone(),
            };
            told.write(&request).await;
        }
        let answered = restate_sdk::select! {
            answer = ctx.promise::<Json<Answer>>(DECISION) => Some(answer?.into_inner()),
            _ = ctx.sleep(self.approval_timeout) => None,
        };
        let answer = match answered {
            Some(answer) => answer,
            None => {
                // Nobody answered in time: denied — unless an answer came
                // in since, which then binds (the first resolution wins).
                let timeout = Answer {
                    decision: Decision::deny(format!(
                        "nobody answered within {} s",
                        self.approval_timeout.as_secs()
                    )),
                    by: DecidedBy::Policy,
                };
                ctx.resolve_promise::<Json<Answer>>(DECISION, Json(timeout.clone()));
                ctx.peek_promise::<Json<Answer>>(DECISION)
                    .await?
                    .map_or(timeout, Json::into_inner)
            }
        };
        ctx.clear(ASKED);
        if let Some(told) = &mut told {
            told.write(&decided(&answer)).await;
        }
        ctx.request::<Json<Seat>, ()>(
            RequestTarget::object(WAITING, WAITING_KEY, "give"),
            Json(seat),
        )
        .send();
        Ok(answer)
    }
}

/// The call through `toolbox` until it ends or its approval layer asks
/// the person; its events to `writer`, if any. A request for the person
/// is held back (the workflow tells it once there is room for the run
/// to wait), and so is a decision `binding` brings (the workflow told it).
async fn asking(
    toolbox: &Toolbox,
    call: &ToolCall,
    binding: Option<BindingDecision>,
    writer: Option<Writer>,
) -> Stepped {
    let (ask, asked) = oneshot::channel::<ApprovalRequest>();
    let ask = std::sync::Mutex::new(Some(ask));
    let caller = CallerApprover::new(THE_USER, move |request: &ApprovalRequest| {
        if let Some(ask) = ask.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = ask.send(request.clone());
        }
        // The step ends with the question; the call goes no further here.
        std::future::pending()
    });
    let (tx, events) = mpsc::channel(64);
    let mut extensions = http::Extensions::new();
    extensions.insert(caller);
    extensions.insert(approval_events(&tx, binding.is_some()));
    if let Some(binding) = binding {
        extensions.insert(binding);
    }
    // The result is the run's to tell (once, from the call's outcome).
    let drain = async move {
        let mut events = events;
        let mut writer = writer;
        while let Some(event) = events.recv().await {
            if let (Some(writer), false) =
                (&mut writer, matches!(event, AgentEvent::ToolResult { .. }))
            {
                writer.write(&event).await;
            }
        }
    };
    let (toolbox, call) = (toolbox.clone(), call.clone());
    let work = async move {
        let stepped = tokio::select! {
            biased;
            Ok(asked) = asked => Stepped::Asked(asked),
            state = run_tool(&toolbox, &call, extensions, &tx) => Stepped::Done(state),
        };
        // The drain ends with the last sender.
        drop(tx);
        stepped
    };
    let (stepped, ()) = tokio::join!(work, drain);
    stepped
}

/// The approval layer's events, as the run's, to `tx` (held weakly: a
/// request kept past the call must not keep the events from ending). A
/// request waits to see whether the person is asked (then it is the
/// workflow's to tell); `bound`: the decisions are the workflow's to tell.
fn approval_events(tx: &mpsc::Sender<AgentEvent>, bound: bool) -> ApprovalEvents {
    let tx = tx.downgrade();
    let held: Arc<std::sync::Mutex<Option<AgentEvent>>> = Arc::default();
    ApprovalEvents::new(move |event| {
        let (tx, held) = (tx.upgrade(), Arc::clone(&held));
        async move {
            let Some(tx) = tx else { return };
            let mut send = Vec::new();
            match event {
                ApprovalEvent::Requested(asked) => {
                    let event = AgentEvent::ApprovalRequested {
                        call_id: asked.call_id,
                        name: asked.tool,
                        arguments: asked.arguments,
                        automatic: asked.automatic,
                        reason: asked.reason,
                    };
                    match asked.automatic {
                        true => send.push(event),
                        false => *held.lock().unwrap_or_else(|p| p.into_inner()) = Some(event),
                    }
                }
                ApprovalEvent::Decided(decided) if !bound => {
                    // Decided here (the layer's own approver): the request
                    // held back was not the person's.
                    send.extend(held.lock().unwrap_or_else(|p| p.into_inner()).take());
                    send.push(AgentEvent::ApprovalDecided {
                        call_id: decided.request.call_id,
                        name: decided.request.tool,
                        decision: decided.decision,
                        by: decided.by,
                    });
                }
                ApprovalEvent::Decided(_) => {}
            }
            for event in send {
                let _ = tx.send(event).await;
            }
        }
    })
}
