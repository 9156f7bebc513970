//! A run's steps on Restate: each model turn is a `ctx.run` step of the
//! run's workflow invocation, and each tool call a call to a workflow of
//! its own (`AgentToolCalls`, keyed by the approval id), which runs the call
//! — and waits for a person when it needs one — on any service process.
//!
//! The run loop runs beside the handler's body, in the same task, and
//! hands each step here ([`Queue`]); the handler's body ([`drive`])
//! issues it. Restate replays a handler by matching its commands, in
//! order, against the journal, so the steps are issued in the order the
//! loop *took* them (a sequence number taken in call order, [`Slot`]),
//! never in the order their futures happen to be polled: a tool call the
//! loop answers itself (refused, a search) gives its place back unused.
//! The queue holds at most one request per call of a step and one per
//! model turn: the loop waits for each.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use futures_util::future::BoxFuture;
use restate_sdk::context::RequestTarget;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::agent::compaction::CompactionError;
use crate::model::{ContextExceeded, FinishReason, Message, Reasoning, ToolCall, Usage};
use crate::{ToolError, ToolResult};

use crate::agent::event::AgentEvent;
use crate::agent::restate::events::Writer;
use crate::agent::run_events::RunEvents;
use crate::agent::store::CallState;

use super::{Asked, Compacted, Cut, ModelAnswer, TurnError};

/// Where the loop hands its steps to the handler.
pub(in crate::agent) struct Queue {
    requests: mpsc::UnboundedSender<Request>,
    /// The next step's place.
    next: std::sync::atomic::AtomicU64,
    /// The run's id: its tool calls' workflows are keyed by it.
    run_id: Arc<str>,
    /// Where the run's events go, if anywhere but its own stream.
    events: Option<Arc<dyn RunEvents>>,
    /// How many calls of each id the run has made.
    calls: std::sync::Mutex<HashMap<String, u32>>,
}

/// The place of one step in the run's journal order, taken in call order;
/// dropped unused, it is given back so the steps after it go on.
pub(in crate::agent) struct Slot {
    seq: u64,
    requests: Option<mpsc::UnboundedSender<Request>>,
    run_id: Arc<str>,
}

/// The handler's end of a [`Queue`].
pub(in crate::agent) struct Requests {
    received: mpsc::UnboundedReceiver<Request>,
}

/// A step at its place, or its place given back (`work: None`).
pub(in crate::agent) struct Request {
    seq: u64,
    work: Option<Work>,
}

/// One step: a model turn, run here as a `ctx.run` step, or a tool call,
/// a call to the run's tool-call workflow.
enum Work {
    Turn {
        /// Its name in the journal.
        name: String,
        /// The turn; its outcome as JSON.
        run: BoxFuture<'static, String>,
        reply: oneshot::Sender<Result<String, TerminalError>>,
    },
    Call {
        /// The tool-call workflow's key: the approval id.
        key: String,
        input: CallInput,
        reply: oneshot::Sender<Result<CallState, TerminalError>>,
    },
}

impl Queue {
    /// A queue, and the receiving end [`drive`] reads; `run_id` keys the
    /// run's tool-call workflows; its turns write their deltas to
    /// `events`, if given.
    pub(in crate::agent) fn new(
        run_id: &str,
        events: Option<Arc<dyn RunEvents>>,
    ) -> (Queue, Requests) {
        let (requests, received) = mpsc::unbounded_channel();
        let queue = Queue {
            requests,
            next: std::sync::atomic::AtomicU64::new(0),
            run_id: Arc::from(run_id),
            events,
            calls: std::sync::Mutex::default(),
        };
        (queue, Requests { received })
    }

    /// The approval id of the next call of id `call_id` (taken in call
    /// order, so the same on every execution).
    pub(in crate::agent) fn call_key(&self, call_id: &str) -> String {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let k = calls.entry(call_id.to_owned()).or_insert(0);
        *k += 1;
        approval_key(&self.run_id, call_id, *k)
    }

    /// The next place.
    pub(in crate::agent) fn slot(&self) -> Slot {
        Slot {
            seq: self.next.fetch_add(1, Ordering::Relaxed),
            requests: Some(self.requests.clone()),
            run_id: Arc::clone(&self.run_id),
        }
    }

    /// A step run here at `slot` (`what`, and the place, name it in the
    /// journal): its outcome, JSON, is journaled, and read back on a
    /// replay instead of running `run` again.
    async fn step(
        &self,
        mut slot: Slot,
        what: &str,
        run: BoxFuture<'static, String>,
    ) -> Result<String, TerminalError> {
        let name = format!("{what} {}", slot.seq);
        let (reply, outcome) = oneshot::channel();
        match slot.send(Work::Turn { name, run, reply }) {
            Ok(()) => outcome.await.unwrap_or_else(|_| Err(ended())),
            Err(err) => Err(err),
        }
    }

    /// A compaction as a step: a summarizer is not asked again on a
    /// replay. A failure is kept as its message (its kind, when the model
    /// failed).
    pub(super) async fn compaction<F>(&self, compact: F) -> Compacted
    where
        F: Future<Output = Compacted> + Send + 'static,
    {
        let run = async move {
            let kept: Result<Option<Vec<Message>>, Failure> = compact.await.map_err(|err| {
                let error = match err {
                    CompactionError::Model(error) => error,
                    other => ToolError::failed(other.to_string()),
                };
                Failure::new(&error, false)
            });
            serde_json::to_string(&kept).unwrap_or_default()
        };
        let failed = |why: String| CompactionError::Model(ToolError::failed(why));
        let json = self
            .step(self.slot(), "compaction", Box::pin(run))
            .await
            .map_err(|err| failed(format!("the Restate step failed: {err}")))?;
        let kept: Result<Option<Vec<Message>>, Failure> =
            serde_json::from_str(&json).map_err(|err| {
                failed(format!(
                    "the compaction journaled by Restate could not be read back: {err}"
                ))
            })?;
        kept.map_err(|failure| CompactionError::Model(failure.error()))
    }

    /// A model turn as a step: its outcome is journaled, and read back
    /// on a replay instead of asking the model again.
    /// Its deltas go to the run's events log, if it has one (only while
    /// the turn runs: a replayed turn streams nothing), else to `tx`.
    pub(super) async fn turn<A, F>(&self, tx: mpsc::Sender<AgentEvent>, ask: A) -> Asked
    where
        A: FnOnce(mpsc::Sender<AgentEvent>) -> F + Send + 'static,
        F: Future<Output = Asked> + Send + 'static,
    {
        let slot = self.slot();
        let encode =
            |asked: Asked| serde_json::to_string(&Recorded::from(asked)).unwrap_or_default();
        let run: BoxFuture<'static, String> = match &self.events {
            None => Box::pin(async move { encode(ask(tx).await) }),
            Some(log) => {
                let (log, run_id) = (Arc::clone(log), Arc::clone(&self.run_id));
                let part = format!("turn {}", slot.seq);
                Box::pin(async move {
                    let writer = Writer::live(&log, &run_id, part).await;
                    let (deltas, received) = mpsc::channel(64);
                    let (asked, ()) = tokio::join!(ask(deltas), writer.drain(received));
                    encode(asked)
                })
            }
        };
        let outcome = self.step(slot, "model turn", run).await;
        let failed = |why: String| Asked {
            answer: Err(TurnError {
                error: ToolError::failed(why),
                streamed: false,
            }),
            used: Vec::new(),
            models: Vec::new(),
        };
        match outcome {
            Ok(json) => match serde_json::from_str::<Recorded>(&json) {
                Ok(recorded) => recorded.into(),
                Err(err) => failed(format!(
                    "the model turn journaled by Restate could not be read back: {err}"
                )),
            },
            Err(err) => failed(format!("the Restate step failed: {err}")),
        }
    }
}

/// The handler has ended (the run is being torn down).
fn ended() -> TerminalError {
    TerminalError::new("the run's Restate handler has ended")
}

impl Slot {
    /// A tool call at this place: a call to the run's tool-call workflow
    /// (keyed by [`approval_key`]), which runs it on whichever service process
    /// Restate picks, concurrently with the step's other calls, and waits
    /// there for a person when the call needs one. Its outcome is what the
    /// model reads.
    pub(super) async fn call(
        mut self,
        key: String,
        call: &ToolCall,
        idempotent: bool,
    ) -> CallState {
        let input = CallInput {
            run: self.run_id.to_string(),
            call: call.clone(),
            idempotent,
        };
        let (reply, outcome) = oneshot::channel();
        let outcome = match self.send(Work::Call { key, input, reply }) {
            Ok(()) => outcome.await.unwrap_or_else(|_| Err(ended())),
            Err(err) => Err(err),
        };
        outcome.unwrap_or_else(|err| {
            let err = ToolError::failed(format!("the Restate tool-call step failed: {err}"));
            CallState::finished(&ToolResult::from_error(err))
        })
    }

    /// Hands `work` to the handler at this place.
    fn send(&mut self, work: Work) -> Result<(), TerminalError> {
        let requests = self
            .requests
            .take()
            .ok_or_else(|| TerminalError::new("the step's place was used twice"))?;
        requests
            .send(Request {
                seq: self.seq,
                work: Some(work),
            })
            .map_err(|_| ended())
    }
}

/// The key of the tool-call workflow of the `k`th call of id `call_id`
/// in run `run_id`: the approval id a person's answer names —
/// `{run}:{call}`, and `{run}:{call}#{k}` from the second call of an id
/// (a model that gives the same id in two turns).
pub(in crate::agent) fn approval_key(run_id: &str, call_id: &str, k: u32) -> String {
    match k {
        0 | 1 => format!("{run_id}:{call_id}"),
        k => format!("{run_id}:{call_id}#{k}"),
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(requests) = self.requests.take() {
            let _ = requests.send(Request {
                seq: self.seq,
                work: None,
            });
        }
    }
}

/// Runs `run` (the run loop) and, beside it, issues the steps it hands
/// over, in the order of their places: a model turn as a journaled
/// `ctx.run` step, a tool call as a call to its tool-call workflow.
///
/// A tool call's command is journaled when it is issued, and its outcome
/// awaited with the other calls' through Restate's own select, so the
/// calls of a step run at once and a replay finds them in the journal in
/// the same order. Model turns are never in flight together, nor with a
/// call (the loop asks the model only when the step's calls are done).
/// Tool calls are not `ctx.run` steps here because restate-sdk 0.13
/// cannot replay two `ctx.run` steps that were both in flight at a
/// crash: a run's first poll both journals its command and awaits it,
/// and on a replay that await comes while the second step's command is
/// still to be replayed — Restate fails the invocation with a journal
/// mismatch (RT0016; measured).
pub(in crate::agent) async fn drive<O>(
    ctx: &WorkflowContext<'_>,
    requests: Requests,
    run: impl Future<Output = O>,
) -> O {
    let mut requests = requests.received;
    let mut run = pin!(run);
    let mut waiting: BTreeMap<u64, Option<Work>> = BTreeMap::new();
    let mut next = 0u64;
    // The model turn in flight, if any. Polled once per wake: a step that
    // fails (the invocation is suspended, its stream broke) stays pending
    // and wakes the handler for the SDK to see the failure from the top;
    // polled again at once, its spent future would panic.
    let mut turn: Option<BoxFuture<'_, ()>> = None;
    // The tool calls in flight, and where each one's outcome goes.
    let call_tool = |key: String, input: CallInput| {
        let target = RequestTarget::workflow(TOOL_CALLS, key, "run");
        ctx.request::<Json<CallInput>, Json<CallState>>(target, Json(input))
            .call()
    };
    let mut calls = unordered_for(&call_tool);
    let mut replies: HashMap<usize, oneshot::Sender<Result<CallState, TerminalError>>> =
        HashMap::new();
    // Closed when the loop has dropped its queue (the run is ending).
    let mut open = true;
    loop {
        tokio::select! {
            out = &mut run => return out,
            () = poll_once(&mut turn), if turn.is_some() => {}
            done = calls.next(), if !calls.is_empty() => match done {
                Ok(Some((index, outcome))) => {
                    if let Some(reply) = replies.remove(&index) {
                        let outcome = outcome.map(Json::<CallState>::into_inner);
                        let _ = reply.send(outcome);
                    }
                }
                Ok(None) => {}
                // Cancelled: every call waiting is told.
                Err(err) => {
                    for (_, reply) in replies.drain() {
                        let _ = reply.send(Err(err.clone()));
                    }
                    calls = unordered_for(&call_tool);
                }
            },
            request = requests.recv(), if open => match request {
                Some(request) => {
                    waiting.insert(request.seq, request.work);
                }
                None => open = false,
            },
        }
        while turn.is_none() {
            let Some(work) = waiting.remove(&next) else {
                break;
            };
            next += 1;
            match work {
                None => {}
                Some(Work::Turn { name, run, reply }) => {
                    turn = issue_turn(ctx, name, run, reply).await
                }
                Some(Work::Call { key, input, reply }) => {
                    let index = calls.push(call_tool(key, input));
                    replies.insert(index, reply);
                }
            }
        }
        // Back to the SDK between rounds: a step that failed must be seen
        // from the top before anything polls it again.
        yield_once().await;
    }
}

/// An empty set of the futures `issue` makes (naming their type, which
/// the SDK does not).
fn unordered_for<F>(_issue: &impl Fn(String, CallInput) -> F) -> DurableFuturesUnordered<F> {
    DurableFuturesUnordered::new()
}

/// Polls the turn in flight once; ready (and the turn dropped) when it
/// is done.
async fn poll_once(running: &mut Option<BoxFuture<'_, ()>>) {
    std::future::poll_fn(
        |cx| match running.as_mut().map(|step| step.as_mut().poll(cx)) {
            Some(Poll::Pending) => Poll::Pending,
            _ => {
                *running = None;
                Poll::Ready(())
            }
        },
    )
    .await
}

/// Pending once (woken at once), then ready.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| match std::mem::replace(&mut yielded, true) {
        true => Poll::Ready(()),
        false => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// Issues a model turn as a `ctx.run` step, polled once here so its
/// command is journaled now. Returns it unless it is already done (a
/// replayed turn's outcome is in the journal).
async fn issue_turn<'a>(
    ctx: &'a WorkflowContext<'_>,
    name: String,
    run: BoxFuture<'static, String>,
    reply: oneshot::Sender<Result<String, TerminalError>>,
) -> Option<BoxFuture<'a, ()>> {
    let step = ctx.run(move || async move { Ok(run.await) }).name(name);
    let mut step: BoxFuture<'a, ()> = Box::pin(async move {
        let _ = reply.send(step.await);
    });
    let done = std::future::poll_fn(|cx| Poll::Ready(step.as_mut().poll(cx).is_ready())).await;
    (!done).then_some(step)
}

/// The name of the tool-call workflow service.
pub(in crate::agent) const TOOL_CALLS: &str = "AgentToolCalls";

/// What a tool-call workflow runs: the call of a run, and whether its tool is
/// idempotent (a call not known to have finished before a crash runs
/// again only then).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::agent) struct CallInput {
    /// The run's id.
    pub(in crate::agent) run: String,
    pub(in crate::agent) call: ToolCall,
    pub(in crate::agent) idempotent: bool,
}

/// A model turn as the journal keeps it.
#[derive(Serialize, Deserialize)]
struct Recorded {
    used: Vec<Usage>,
    models: Vec<String>,
    answer: Result<Answer, Failure>,
}

#[derive(Serialize, Deserialize)]
struct Answer {
    text: String,
    reasoning: Vec<Reasoning>,
    calls: Vec<ToolCall>,
    finish: Option<FinishReason>,
    /// Cut by a spend limit: why, and whether it had begun calls.
    cut: Option<(Failure, bool)>,
}

/// An error as the journal keeps it: its model-facing form (kind,
/// message, retry-after), and whether it was a context-length refusal.
#[derive(Serialize, Deserialize)]
struct Failure {
    error: serde_json::Value,
    context_exceeded: bool,
    streamed: bool,
}

impl Failure {
    fn new(error: &ToolError, streamed: bool) -> Failure {
        Failure {
            error: error.to_model_json(),
            context_exceeded: ContextExceeded::is(error),
            streamed,
        }
    }

    fn error(self) -> ToolError {
        let error = ToolError::from_model_json(&self.error)
            .unwrap_or_else(|| ToolError::failed(self.error.to_string()));
        match self.context_exceeded {
            true => error.with_source(ContextExceeded),
            false => error,
        }
    }
}

impl From<Asked> for Recorded {
    fn from(asked: Asked) -> Recorded {
        let answer = match asked.answer {
            Ok(answer) => Ok(Answer {
                cut: answer
                    .cut
                    .map(|cut| (Failure::new(&cut.error, true), cut.calls_begun)),
                text: answer.text,
                reasoning: answer.reasoning,
                calls: answer.calls,
                finish: answer.finish,
            }),
            Err(err) => Err(Failure::new(&err.error, err.streamed)),
        };
        Recorded {
            used: asked.used,
            models: asked.models,
            answer,
        }
    }
}

impl From<Recorded> for Asked {
    fn from(recorded: Recorded) -> Asked {
        let answer = match recorded.answer {
            Ok(answer) => Ok(ModelAnswer {
                text: answer.text,
                reasoning: answer.reasoning,
                calls: answer.calls,
                finish: answer.finish,
                cut: answer.cut.map(|(failure, calls_begun)| Cut {
                    error: failure.error(),
                    calls_begun,
                }),
            }),
            Err(failure) => Err(TurnError {
                streamed: failure.streamed,
                error: failure.error(),
            }),
        };
        Asked {
            answer,
            used: recorded.used,
            models: recorded.models,
        }
    }
}
