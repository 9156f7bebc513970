//! One run of the agent loop: its state, turn by turn.
//!
//! A run alternates a *model turn* — one model call, its deltas streamed
//! as events and folded into text and complete tool calls — and a *tool
//! step* — the calls run through the toolbox, at most
//! [`parallel_tools`](Agent::parallel_tools) at once, their items streamed
//! as events and their results added to the conversation in call order.
//! Every run ends with exactly one [`AgentEvent::Done`].
//!
//! A model turn that breaks off mid-stream with a retryable error may be
//! asked again ([`Agent::retry_model_turns`], off by default); the consumer
//! is told with [`AgentEvent::TurnDiscarded`]. An answer cut off at the
//! token limit or by a content filter ends the run with
//! [`StopReason::Length`] / [`StopReason::ContentFilter`], so a truncated
//! answer is never mistaken for a finished one.

use std::pin::pin;
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use http::Extensions;
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::model::ModelService;
use crate::model::{
    Accumulator, ChatRequest, FinishReason, Message, ModelDelta, Pushed, ToolCall, Usage,
};
use crate::result::{Collecting, Seen};
use crate::{ErrorKind, ToolError, ToolInfo, ToolRequest, ToolResult, Toolbox};

use super::event::{AgentEvent, StopReason};
use super::service::Agent;

/// One run in progress: the conversation so far and what it has used.
pub(super) struct Run<M> {
    pub(super) agent: Agent<M>,
    pub(super) messages: Arc<Vec<Message>>,
    /// The tools this caller may see, as the model is shown them.
    pub(super) tools: Arc<[ToolInfo]>,
    pub(super) extensions: Extensions,
    pub(super) tx: mpsc::Sender<AgentEvent>,
    /// The step's calls in flight and those waiting for approval.
    pub(super) step: Arc<std::sync::Mutex<StepState>>,
    pub(super) usage: Option<Usage>,
    pub(super) steps: usize,
    pub(super) tool_calls: usize,
}

/// Which calls of the current tool step are running and which of them
/// wait for a decision: when they are the same, the run can only wait
/// ([`AgentEvent::AwaitingApproval`]).
#[derive(Debug, Default)]
pub(super) struct StepState {
    pub(super) running: usize,
    pub(super) waiting: Vec<String>,
    /// Whether the present wait has been told.
    pub(super) told: bool,
}

impl StepState {
    /// The calls waiting, if the run now can do nothing but wait and has
    /// not said so yet.
    pub(super) fn stalled(&mut self) -> Option<Vec<String>> {
        let stalled = self.running > 0 && self.waiting.len() >= self.running;
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

/// One model answer, complete.
pub(super) struct Answer {
    pub(super) text: String,
    pub(super) calls: Vec<ToolCall>,
    /// The last finish reason the model sent, if any.
    pub(super) finish: Option<FinishReason>,
}

/// A model turn that failed, and whether any delta had arrived before.
pub(super) struct TurnError {
    pub(super) error: ToolError,
    pub(super) streamed: bool,
}

impl<M> Run<M>
where
    M: ModelService,
{
    /// Model turns and tool steps until the model stops calling tools or a
    /// guard stops the run.
    pub(super) async fn steps(&mut self) -> StopReason {
        loop {
            if self.steps >= self.agent.max_steps {
                return StopReason::MaxSteps;
            }
            self.steps += 1;
            let Answer {
                text,
                calls,
                finish,
            } = match self.answer().await {
                Ok(answer) => answer,
                Err(err) => {
                    let _ = self.tx.send(AgentEvent::Error(err)).await;
                    return StopReason::ModelError;
                }
            };
            self.push(Message::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: calls.clone(),
            });
            let cut_off = match finish {
                Some(FinishReason::Length) => Some((
                    StopReason::Length,
                    "the model's answer was cut off at its token limit",
                )),
                Some(FinishReason::ContentFilter) => Some((
                    StopReason::ContentFilter,
                    "the model's answer was stopped by a content filter",
                )),
                _ => None,
            };
            if let Some((stop, why)) = cut_off {
                let err = ToolError::cancelled(format!("not run: {why}"));
                self.refuse(calls, err).await;
                return stop;
            }
            if calls.is_empty() {
                return StopReason::Finished;
            }
            if self.tool_calls + calls.len() > self.agent.max_tool_calls {
                let limit = self.agent.max_tool_calls;
                let err = ToolError::new(
                    ErrorKind::Denied,
                    format!("not run: this run's limit of {limit} tool calls was reached"),
                );
                self.refuse(calls, err).await;
                return StopReason::MaxToolCalls;
            }
            self.tool_calls += calls.len();
            self.run_tools(calls).await;
        }
    }

    /// One model turn: asked again, as often as the agent allows, while it
    /// breaks off with a retryable error after its first delta.
    async fn answer(&mut self) -> Result<Answer, ToolError> {
        let mut retries = self.agent.turn_retries;
        loop {
            match self.model_turn().await {
                Ok(answer) => return Ok(answer),
                Err(TurnError { error, streamed })
                    if streamed && retries > 0 && error.is_retryable() =>
                {
                    retries -= 1;
                    let _ = self.tx.send(AgentEvent::TurnDiscarded { error }).await;
                }
                Err(TurnError { error, .. }) => return Err(error),
            }
        }
    }

    /// Asks the model once, streaming its text and tool-call input as
    /// events; returns its text, its complete tool calls and why it
    /// stopped.
    async fn model_turn(&mut self) -> Result<Answer, TurnError> {
        let request = ChatRequest {
            messages: Arc::clone(&self.messages),
            tools: self.tools.clone(),
            model: self.agent.model_name.clone(),
            extensions: self.extensions.clone(),
        };
        let answer = self
            .agent
            .model
            .clone()
            .oneshot(request)
            .await
            .map_err(|err| TurnError {
                error: err.into(),
                streamed: false,
            })?;
        let mut answer = pin!(answer);
        let mut text = String::new();
        let mut calls = Accumulator::new();
        let mut finish = None;
        let mut streamed = false;
        while let Some(delta) = answer.next().await {
            let delta = delta.map_err(|error| TurnError { error, streamed })?;
            streamed = true;
            let event = match delta {
                ModelDelta::Text(piece) => {
                    text.push_str(&piece);
                    AgentEvent::TextDelta(piece)
                }
                ModelDelta::ToolCall(fragment) => {
                    // A refused fragment ends the turn here, dropping the
                    // stream (and its connection) rather than reading on.
                    let pushed = calls.push(&fragment).map_err(|err| TurnError {
                        error: ToolError::failed(format!("the model's answer was refused: {err}"))
                            .with_source(err),
                        streamed,
                    })?;
                    if pushed == Pushed::Started {
                        let (id, name) = calls.get(fragment.index).unwrap_or_default();
                        let started = AgentEvent::ToolCallStarted {
                            index: fragment.index,
                            id: id.map(str::to_owned),
                            name: name.to_owned(),
                        };
                        let _ = self.tx.send(started).await;
                    }
                    if fragment.arguments.is_empty() {
                        continue;
                    }
                    AgentEvent::ToolCallInputDelta {
                        index: fragment.index,
                        arguments: fragment.arguments,
                    }
                }
                ModelDelta::Usage(used) => {
                    *self.usage.get_or_insert_with(Usage::default) += used;
                    continue;
                }
                ModelDelta::Finish(reason) => {
                    finish = Some(reason);
                    continue;
                }
                ModelDelta::Model(_) => continue,
            };
            let _ = self.tx.send(event).await;
        }
        let calls = calls.finish().map_err(|err| TurnError {
            error: ToolError::failed(format!("the model's answer was malformed: {err}"))
                .with_source(err),
            streamed,
        })?;
        Ok(Answer {
            text,
            calls,
            finish,
        })
    }

    /// Runs a step's tool calls (up to the agent's bound at once) and adds
    /// their results to the conversation, in the order of the calls.
    async fn run_tools(&mut self, calls: Vec<ToolCall>) {
        for call in &calls {
            let _ = self.tx.send(AgentEvent::ToolCall(call.clone())).await;
        }
        let results: Vec<String> = stream::iter(calls.clone())
            .map(|call| {
                let (toolbox, tx, extensions, step) = (
                    self.agent.toolbox.clone(),
                    self.tx.clone(),
                    self.extensions.clone(),
                    Arc::clone(&self.step),
                );
                async move {
                    step.lock().unwrap_or_else(|p| p.into_inner()).running += 1;
                    let running = Running { step: &step };
                    let result = run_tool(&toolbox, &call, extensions, &tx).await;
                    drop(running);
                    let stalled = step.lock().unwrap_or_else(|p| p.into_inner()).stalled();
                    if let Some(call_ids) = stalled {
                        let _ = tx.send(AgentEvent::AwaitingApproval { call_ids }).await;
                    }
                    result
                }
            })
            .buffered(self.agent.parallel)
            .collect()
            .await;
        for (call, text) in calls.iter().zip(results) {
            self.push(Message::tool(call.id.clone(), text));
        }
    }

    /// Answers every call of a step that will not run with `err`, so the
    /// history stays well-formed.
    async fn refuse(&mut self, calls: Vec<ToolCall>, err: ToolError) {
        for call in calls {
            let result = ToolResult::from_error(err.clone());
            self.push(Message::tool(call.id.clone(), result.text()));
            let _ = self
                .tx
                .send(AgentEvent::ToolResult {
                    call_id: call.id,
                    name: call.name,
                    result,
                })
                .await;
        }
    }

    fn push(&mut self, message: Message) {
        Arc::make_mut(&mut self.messages).push(message);
    }
}

/// A call of the step in flight: counted down when it ends or is dropped.
pub(super) struct Running<'a> {
    pub(super) step: &'a std::sync::Mutex<StepState>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
        step.running = step.running.saturating_sub(1);
    }
}

/// The run's events, as the approval layer's sink; it also keeps the
/// step's waiting calls, to tell when the run can only wait. It holds the
/// channel weakly: a request kept past the run (by a model, by a task a
/// tool spawned) must not keep the event stream from ending.
pub(super) fn approval_events(
    events: mpsc::Sender<AgentEvent>,
    step: Arc<std::sync::Mutex<StepState>>,
) -> crate::approval::ApprovalEvents {
    use crate::approval::ApprovalEvent;
    let events = events.downgrade();
    crate::approval::ApprovalEvents::new(move |event| {
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
        async move {
            let Some(events) = events else { return };
            let event = match event {
                ApprovalEvent::Requested(asked) => AgentEvent::ApprovalRequested {
                    call_id: asked.call_id,
                    name: asked.tool,
                    arguments: asked.arguments,
                },
                ApprovalEvent::Decided(decided) => AgentEvent::ApprovalDecided {
                    call_id: decided.request.call_id,
                    name: decided.request.tool,
                    decision: decided.decision,
                    by: decided.by,
                },
            };
            let _ = events.send(event).await;
            if let Some(call_ids) = stalled {
                let _ = events.send(AgentEvent::AwaitingApproval { call_ids }).await;
            }
        }
    })
}

/// Runs one call, streaming its items and then its result as events;
/// returns the result's text, for the history.
pub(super) async fn run_tool(
    toolbox: &Toolbox,
    call: &ToolCall,
    extensions: Extensions,
    tx: &mpsc::Sender<AgentEvent>,
) -> String {
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
    // The history needs the text; the event takes the result itself.
    let text = result.text();
    let event = AgentEvent::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        result,
    };
    let _ = tx.send(event).await;
    text
}
