//! A run's steps on Restate: each model turn and each tool call is a
//! `ctx.run` step of the run's workflow invocation.
//!
//! The run loop runs beside the handler's body, in the same task, and
//! hands each step here as an owned future ([`Queue`]); the handler's
//! body ([`drive`]) makes it a journaled step. Restate replays a
//! handler by matching its steps, in order, against the journal, so the
//! steps are issued in the order the loop *took* them (a sequence number
//! taken in call order, [`Slot`]), never in the order their futures
//! happen to be polled: a tool call the loop answers itself (refused, a
//! search) gives its place back unused.
//!
//! A tool that is not idempotent gets an *intent* step first: its closure
//! runs only when the intent is not in the journal yet, so a tool step
//! that finds its intent's flag unset follows an attempt that got past
//! the intent and never finished — its call may have run, and it is
//! answered so rather than run again.
//!
//! The steps run one at a time ([`drive`] says why); the queue holds at
//! most one request per call of a step and one per model turn: the loop
//! waits for each.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use futures_util::future::BoxFuture;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::model::{ContextExceeded, FinishReason, Reasoning, ToolCall, Usage};
use crate::{ToolError, ToolResult};

use crate::agent::store::CallState;

use super::{may_have_run, Asked, Cut, ModelAnswer, TurnError};

/// Where the loop hands its steps to the handler.
pub(in crate::agent) struct Queue {
    requests: mpsc::UnboundedSender<Request>,
    /// The next step's place.
    next: std::sync::atomic::AtomicU64,
}

/// The place of one step in the run's journal order, taken in call order;
/// dropped unused, it is given back so the steps after it go on.
pub(in crate::agent) struct Slot {
    seq: u64,
    requests: Option<mpsc::UnboundedSender<Request>>,
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

/// One step: its name in the journal, its work (the outcome as JSON), and
/// where its outcome goes.
struct Work {
    name: String,
    run: BoxFuture<'static, String>,
    /// For a tool not idempotent: the outcome (JSON) when a previous
    /// attempt got past its intent step.
    stale: Option<String>,
    reply: oneshot::Sender<Result<String, TerminalError>>,
}

impl Queue {
    /// A queue, and the receiving end [`drive`] reads.
    pub(in crate::agent) fn new() -> (Queue, Requests) {
        let (requests, received) = mpsc::unbounded_channel();
        let queue = Queue {
            requests,
            next: std::sync::atomic::AtomicU64::new(0),
        };
        (queue, Requests { received })
    }

    /// The next place.
    pub(in crate::agent) fn slot(&self) -> Slot {
        Slot {
            seq: self.next.fetch_add(1, Ordering::Relaxed),
            requests: Some(self.requests.clone()),
        }
    }

    /// A model turn as a step: its outcome is journaled, and read back
    /// on a replay instead of asking the model again.
    pub(super) async fn turn<F>(&self, ask: F) -> Asked
    where
        F: Future<Output = Asked> + Send + 'static,
    {
        let slot = self.slot();
        let name = format!("model turn {}", slot.seq);
        let run = async move {
            let recorded = Recorded::from(ask.await);
            serde_json::to_string(&recorded).unwrap_or_default()
        };
        let outcome = slot.step(name, Box::pin(run), None).await;
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
            Err(why) => failed(why),
        }
    }
}

impl Slot {
    /// A tool call as a step at this place.
    pub(super) async fn tool<F>(self, call_id: &str, idempotent: bool, work: F) -> CallState
    where
        F: Future<Output = CallState> + Send + 'static,
    {
        let name = format!("tool call {call_id}");
        let run = async move { encode(&work.await) };
        let stale = (!idempotent).then(|| {
            encode(&CallState::finished(
                &ToolResult::from_error(may_have_run()),
            ))
        });
        let outcome = self.step(name, Box::pin(run), stale).await;
        let error = |why: String| {
            let err = ToolError::failed(why);
            CallState::finished(&ToolResult::from_error(err))
        };
        match outcome {
            Ok(json) => serde_json::from_str(&json).unwrap_or_else(|err| {
                error(format!(
                    "the tool call journaled by Restate could not be read back: {err}"
                ))
            }),
            Err(why) => error(why),
        }
    }

    /// Hands the step to the handler and waits for its outcome.
    async fn step(
        mut self,
        name: String,
        run: BoxFuture<'static, String>,
        stale: Option<String>,
    ) -> Result<String, String> {
        let (reply, outcome) = oneshot::channel();
        let work = Work {
            name,
            run,
            stale,
            reply,
        };
        let sent = match self.requests.take() {
            Some(requests) => requests.send(Request {
                seq: self.seq,
                work: Some(work),
            }),
            None => return Err("the step's place was used twice".into()),
        };
        if sent.is_err() {
            return Err("the run's Restate handler has ended".into());
        }
        match outcome.await {
            Ok(Ok(json)) => Ok(json),
            Ok(Err(err)) => Err(format!("the Restate step failed: {err}")),
            Err(_) => Err("the run's Restate handler has ended".into()),
        }
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

/// A tool call's outcome as the journal keeps it.
fn encode(state: &CallState) -> String {
    serde_json::to_string(state).unwrap_or_default()
}

/// Runs `run` (the run loop) and, beside it, issues the steps it hands
/// over as journaled `ctx.run` steps, in the order of their places, one
/// at a time.
///
/// One at a time, because restate-sdk 0.13 cannot replay two `ctx.run`
/// steps that were both in flight at a crash: a run's first poll both
/// journals its command and awaits it, and on a replay that await comes
/// while the second step's command is still to be replayed — Restate
/// fails the invocation with a journal mismatch (RT0016; measured). The
/// loop's calls still run concurrently up to the toolbox; their tool
/// steps take turns.
pub(in crate::agent) async fn drive<O>(
    ctx: &WorkflowContext<'_>,
    requests: Requests,
    run: impl Future<Output = O>,
) -> O {
    let mut requests = requests.received;
    let mut run = pin!(run);
    let mut waiting: BTreeMap<u64, Option<Work>> = BTreeMap::new();
    let mut next = 0u64;
    // The step in flight, if any. Polled once per wake: a step that fails
    // (the invocation is suspended, its stream broke) stays pending and
    // wakes the handler for the SDK to see the failure from the top;
    // polled again at once, its spent future would panic.
    let mut running: Option<BoxFuture<'_, ()>> = None;
    // Closed when the loop has dropped its queue (the run is ending).
    let mut open = true;
    loop {
        tokio::select! {
            out = &mut run => return out,
            () = poll_once(&mut running), if running.is_some() => {}
            request = requests.recv(), if open => match request {
                Some(request) => {
                    waiting.insert(request.seq, request.work);
                }
                None => open = false,
            },
        }
        while running.is_none() {
            let Some(work) = waiting.remove(&next) else {
                break;
            };
            next += 1;
            if let Some(work) = work {
                running = issue(ctx, work).await;
            }
        }
        // Back to the SDK between rounds: a step that failed must be seen
        // from the top before anything polls it again.
        yield_once().await;
    }
}

/// Polls the step in flight once; ready (and the step dropped) when it
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

/// Issues one step: its intent first (awaited: the journal's order must
/// not depend on when the intent completes), then the step itself, polled
/// once here so its command is journaled now. Returns it unless it is
/// already done (a replayed step's outcome is in the journal).
async fn issue<'a>(ctx: &'a WorkflowContext<'_>, work: Work) -> Option<BoxFuture<'a, ()>> {
    let Work {
        name,
        run,
        stale,
        reply,
    } = work;
    let fresh = match stale.is_some() {
        true => {
            let flag = Arc::new(AtomicBool::new(false));
            let set = Arc::clone(&flag);
            let intent = ctx
                .run(move || async move {
                    set.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .name(format!("{name} intent"))
                .await;
            if let Err(err) = intent {
                let _ = reply.send(Err(err));
                return None;
            }
            Some(flag)
        }
        false => None,
    };
    let step = ctx
        .run(move || async move {
            if let (Some(fresh), Some(stale)) = (fresh, stale) {
                if !fresh.load(Ordering::SeqCst) {
                    return Ok(stale);
                }
            }
            Ok(run.await)
        })
        .name(name);
    let mut step: BoxFuture<'a, ()> = Box::pin(async move {
        let _ = reply.send(step.await);
    });
    let done = std::future::poll_fn(|cx| Poll::Ready(step.as_mut().poll(cx).is_ready())).await;
    (!done).then_some(step)
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
