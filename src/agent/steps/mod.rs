//! Where a run's model turns and tool calls are executed: the one seam
//! between the run loop and what makes it durable.
//!
//! The loop (compaction, typed answers, tool search, spend limits, the
//! journal's records) is the same for every run; only the two things that
//! reach outside — asking the model, running a tool of the toolbox — go
//! through [`Steps`]. In process ([`Steps::Here`]) they are awaited as
//! they are; on Restate (`Steps::Restate`, feature `restate`) each is a
//! journaled step of the run's workflow, so a replay after a crash reads
//! a completed step's outcome back instead of asking or running again.

use std::future::Future;

use tokio::sync::mpsc;

use crate::model::{FinishReason, Message, Reasoning, ToolCall, Usage};
use crate::result::{Collecting, Seen};
use crate::{ToolError, ToolRequest, ToolResult, Toolbox};

use super::compaction::CompactionError;
use super::event::AgentEvent;
use super::store::CallState;

#[cfg(feature = "restate")]
pub(super) mod restate;

/// How a run executes its model turns and tool calls.
pub(super) enum Steps {
    /// Awaited in this process, as they are.
    Here,
    /// As journaled steps of a Restate workflow.
    #[cfg(feature = "restate")]
    Restate(restate::Queue),
}

/// A model turn asked: its answer (or why it failed) and what the model
/// reported on the way, for the run to count once the turn is in.
pub(super) struct Asked {
    pub(super) answer: Result<ModelAnswer, TurnError>,
    /// The usage reports, in the order they came.
    pub(super) used: Vec<Usage>,
    /// The model names the endpoint reported.
    pub(super) models: Vec<String>,
}

/// What a compaction strategy answered: the history compacted, `None`
/// for nothing to do, or why it failed.
pub(super) type Compacted = Result<Option<Vec<Message>>, CompactionError>;

/// Where one tool call of a step runs, taken in call order (a durable
/// step's place in the run's journal is decided when it is taken).
pub(super) enum ToolStep {
    Here,
    #[cfg(feature = "restate")]
    Restate(restate::Slot, String),
}

impl Steps {
    /// One model turn: `ask` makes the turn, owning all it needs, given
    /// where its deltas go — `tx`, the run's events, unless the run's
    /// events are written to a log where they stream to (on Restate).
    pub(super) async fn turn<A, F>(&self, tx: mpsc::Sender<AgentEvent>, ask: A) -> Asked
    where
        A: FnOnce(mpsc::Sender<AgentEvent>) -> F + Send + 'static,
        F: Future<Output = Asked> + Send + 'static,
    {
        match self {
            Steps::Here => ask(tx).await,
            #[cfg(feature = "restate")]
            Steps::Restate(queue) => queue.turn(tx, ask).await,
        }
    }

    /// One compaction of the history: `compact` is the strategy at work
    /// (a summarizer asks a model), owning all it needs. On Restate its
    /// outcome is journaled like a model turn's: a replay does not ask
    /// the summarizer again.
    pub(super) async fn compaction<F>(&self, compact: F) -> Compacted
    where
        F: Future<Output = Compacted> + Send + 'static,
    {
        match self {
            Steps::Here => compact.await,
            #[cfg(feature = "restate")]
            Steps::Restate(queue) => queue.compaction(compact).await,
        }
    }

    /// The place of the next tool call that reaches the toolbox, the
    /// call `call_id`; taken in call order, before any of the step's
    /// calls runs.
    pub(super) fn tool_step(&self, call_id: &str) -> ToolStep {
        match self {
            Steps::Here => {
                let _ = call_id;
                ToolStep::Here
            }
            #[cfg(feature = "restate")]
            Steps::Restate(queue) => {
                let key = queue.call_key(call_id);
                ToolStep::Restate(queue.slot(), key)
            }
        }
    }
}

impl ToolStep {
    /// Runs `call` through the toolbox (its items and result streamed as
    /// events); returns its result as the model reads it. A durable call
    /// of a tool not `idempotent` that was started before a crash and not
    /// finished is not run again: it is answered [`may_have_run`].
    pub(super) async fn run(
        self,
        toolbox: &Toolbox,
        call: &ToolCall,
        extensions: http::Extensions,
        tx: &mpsc::Sender<AgentEvent>,
        idempotent: bool,
    ) -> CallState {
        match self {
            // Whether the tool is idempotent matters to a replay only.
            ToolStep::Here => {
                let _ = idempotent;
                run_tool(toolbox, call, extensions, tx).await
            }
            // Run by its own workflow, where its items stream; the run
            // hears of its end.
            #[cfg(feature = "restate")]
            ToolStep::Restate(slot, key) => {
                let _ = (toolbox, extensions);
                let state = slot.call(key, call, idempotent).await;
                if let CallState::Finished { text, is_error, .. } = &state {
                    let result = match is_error {
                        true => ToolResult::from_error(ToolError::failed(text.clone())),
                        false => {
                            let mut result = ToolResult::default();
                            result.push(crate::ToolOutput::text(text.clone()));
                            result
                        }
                    };
                    let event = AgentEvent::ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        result,
                    };
                    let _ = tx.send(event).await;
                }
                state
            }
        }
    }
}

/// What the model reads for a call of a tool that is not idempotent,
/// started before its process stopped and not known to have finished: it
/// may have run, and it is not run again. One wording for the journal's
/// resume and the Restate steps.
pub(super) fn may_have_run() -> ToolError {
    ToolError::new(
        crate::ErrorKind::Interrupted,
        "the call may have run; the process stopped before it finished, \
         and the tool is not idempotent, so it was not run again",
    )
}

/// One model answer, complete — or cut mid-stream by a spend limit.
pub(in crate::agent) struct ModelAnswer {
    pub(in crate::agent) text: String,
    /// The model's reasoning blocks, kept for the next request.
    pub(in crate::agent) reasoning: Vec<Reasoning>,
    pub(in crate::agent) calls: Vec<ToolCall>,
    /// The last finish reason the model sent, if any.
    pub(in crate::agent) finish: Option<FinishReason>,
    /// The answer was cut mid-stream: what it said before is the text and
    /// reasoning above (its calls are dropped: a call is known complete
    /// only when the answer ends).
    pub(in crate::agent) cut: Option<Cut>,
}

/// Why an answer was cut mid-stream: the error that cut it (a spend
/// limit crossed), and whether it had begun tool calls, which are dropped.
pub(in crate::agent) struct Cut {
    pub(in crate::agent) error: ToolError,
    pub(in crate::agent) calls_begun: bool,
}

/// A model turn that failed, and whether any delta had arrived before.
pub(in crate::agent) struct TurnError {
    pub(in crate::agent) error: ToolError,
    pub(in crate::agent) streamed: bool,
}

/// Runs one call, streaming its items and then its result as events;
/// returns the result as the model reads it, for the journal.
pub(super) async fn run_tool(
    toolbox: &Toolbox,
    call: &ToolCall,
    extensions: http::Extensions,
    tx: &mpsc::Sender<AgentEvent>,
) -> CallState {
    let mut request =
        ToolRequest::new(call.name.clone(), call.arguments.clone()).with_id(call.id.clone());
    *request.extensions_mut() = extensions;
    let result = match toolbox.dispatch(request).await {
        Err(err) => ToolResult::from_error(err),
        Ok(items) => {
            let mut collecting = Collecting::new(items);
            loop {
                let event = match collecting.next().await {
                    Seen::Progress(progress) => AgentEvent::Progress {
                        call_id: call.id.clone(),
                        progress,
                    },
                    Seen::Output => match collecting.latest() {
                        Some(output) => AgentEvent::ToolOutput {
                            call_id: call.id.clone(),
                            output: output.clone(),
                        },
                        None => continue,
                    },
                    Seen::Done(result) => break result,
                };
                let _ = tx.send(event).await;
            }
        }
    };
    // The journal needs the text; the event takes the result itself.
    let finished = CallState::finished(&result);
    let event = AgentEvent::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        result,
    };
    let _ = tx.send(event).await;
    finished
}
