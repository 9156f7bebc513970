//! One tool call of a run as a workflow of its own, `AgentToolCalls`,
//! keyed by its approval id, `{run}:{place}:{call}` (the call's place in
//! the run's order keeps apart two calls a model gave the same id): the run calls it for each
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

use crate::approval::{ApprovalRequest, BindingDecision, CallerApprover, DecidedBy, Decision};
use crate::model::ToolCall;
use crate::{ErrorKind, ToolError, ToolResult, Toolbox};

use crate::agent::steps::restate::CallInput;
use crate::agent::steps::{may_have_run, run_tool};
use crate::agent::store::CallState;

use super::waiting::{Seat, WAITING, WAITING_KEY};

/// Who decides a call the person is asked about, by name.
const THE_USER: &str = "the user";

/// The tool calls of an agent's runs: see the [module docs](self).
#[derive(Clone)]
pub(super) struct ToolCalls {
    pub(super) toolbox: Toolbox,
    /// How long a call waits for a person before it is denied.
    pub(super) approval_timeout: Duration,
    /// How many runs may wait for a person at once.
    pub(super) max_waiting_runs: u64,
}

/// A person's answer to the call a tool-call workflow waits on — or, as
/// [`ToolCalls::decide`] answers, the decision that binds.
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
                .through_toolbox(&ctx, &call, idempotent, None, "tool call")
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
        let Json(stepped) = ctx
            .run(move || async move {
                if let Some(fresh) = fresh {
                    if !fresh.load(Ordering::SeqCst) {
                        let stale = CallState::finished(&ToolResult::from_error(may_have_run()));
                        return Ok(Json(Stepped::Done(stale)));
                    }
                }
                Ok(Json(asking(&toolbox, &call, binding).await))
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
        if !taken {
            let reason = format!(
                "not run: {} runs already wait for a person's approval, the most this service \
                 keeps; try again later or without this tool",
                self.max_waiting_runs
            );
            return Ok(Answer {
                decision: Decision::deny(reason),
                by: DecidedBy::Policy,
            });
        }
        ctx.set(ASKED, Json(Some(asked.clone())));
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
        ctx.request::<Json<Seat>, ()>(
            RequestTarget::object(WAITING, WAITING_KEY, "give"),
            Json(seat),
        )
        .send();
        Ok(answer)
    }
}

/// The call through `toolbox`, its events dropped (they do not leave this
/// workflow yet), until it ends or its approval layer asks the person.
async fn asking(toolbox: &Toolbox, call: &ToolCall, binding: Option<BindingDecision>) -> Stepped {
    let (ask, asked) = oneshot::channel::<ApprovalRequest>();
    let ask = std::sync::Mutex::new(Some(ask));
    let caller = CallerApprover::new(THE_USER, move |request: &ApprovalRequest| {
        if let Some(ask) = ask.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = ask.send(request.clone());
        }
        // The step ends with the question; the call goes no further here.
        std::future::pending()
    });
    let mut extensions = http::Extensions::new();
    extensions.insert(caller);
    if let Some(binding) = binding {
        extensions.insert(binding);
    }
    let (tx, mut events) = mpsc::channel(64);
    let drain = async move {
        while events.recv().await.is_some() {}
        // Never done: the channel stays open while the call runs.
        std::future::pending::<Stepped>().await
    };
    let run = run_tool(toolbox, call, extensions, &tx);
    tokio::select! {
        biased;
        Ok(asked) = asked => Stepped::Asked(asked),
        state = run => Stepped::Done(state),
        stepped = drain => stepped,
    }
}
