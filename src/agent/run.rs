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
    Accumulator, ChatRequest, FinishReason, Message, ModelDelta, Pushed, Reasoning, ReasoningDelta,
    ToolCall, Usage,
};
use crate::{ErrorKind, ToolError, ToolInfo, ToolResult};

use super::call::Call;
use super::cost::ToolCosts;
use super::durable::{run_error, Checkpointer, Resumed};
use super::event::{AgentDone, AgentEvent, StopReason};
use super::service::Agent;
use super::step::{fail, guardrail_events, Failed, StepState};
use super::store::{CallRecord, CallState, RunStatus, StoreError};

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
    /// Where the run is checkpointed, if the agent keeps a store.
    pub(super) checkpoints: Option<Arc<Checkpointer>>,
    /// The first checkpoint that failed: the run ends at the next boundary.
    pub(super) failed: Failed,
    /// What each tool result cost, as the model calls that read them say.
    pub(super) costs: ToolCosts,
}

/// One model answer, complete.
pub(super) struct Answer {
    pub(super) text: String,
    /// The model's reasoning blocks, kept for the next request.
    pub(super) reasoning: Vec<Reasoning>,
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
            if let Some(stop) = self.store_failed().await {
                return stop;
            }
            if self.guardrail_raised() {
                return StopReason::Guardrail;
            }
            if self.steps >= self.agent.max_steps {
                return StopReason::MaxSteps;
            }
            // Where the run stands goes to the store while the model
            // answers: a slow store never holds the model's stream up (a
            // tool waits for its own start to be stored).
            let save = self.save(Vec::new(), None);
            self.steps += 1;
            let (answer, saved) = futures_util::future::join(self.answer(), save).await;
            if let Err(err) = saved {
                fail(&self.failed, run_error(err));
            }
            let Answer {
                text,
                reasoning,
                calls,
                finish,
            } = match answer {
                Ok(answer) => answer,
                Err(err) => {
                    let stop = match err.kind() {
                        ErrorKind::SpendLimited => StopReason::SpendLimit,
                        ErrorKind::Guardrail => StopReason::Guardrail,
                        _ if self.guardrail_raised() => StopReason::Guardrail,
                        _ => StopReason::ModelError,
                    };
                    let _ = self.tx.send(AgentEvent::Error(err)).await;
                    return stop;
                }
            };
            let model = self.agent.model_name.as_deref();
            self.costs.answered(self.agent.prices.as_ref(), model);
            self.push(Message::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: calls.clone(),
                reasoning,
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
            if calls.is_empty() && finish == Some(FinishReason::Paused) {
                // The provider paused a long turn: the answer so far is in
                // the history, and asking again lets the model go on.
                continue;
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
            let records: Vec<CallRecord> = calls
                .into_iter()
                .map(|call| CallRecord {
                    call,
                    state: CallState::Planned,
                })
                .collect();
            self.checkpoint_step(records.clone()).await;
            if let Some(stop) = self.store_failed().await {
                return stop;
            }
            self.run_tools(records, None).await;
        }
    }

    /// The whole run from where it stands: a resumed step first, then
    /// turns and steps to the end; the final checkpoint and
    /// [`AgentEvent::Done`].
    pub(super) async fn finish(mut self, resumed: Option<Resumed>) {
        // A guardrail layer below (on the model or the tools) tells the
        // run what it did; set once, every call's extensions carry it.
        self.extensions
            .insert(guardrail_events(self.tx.clone(), Arc::clone(&self.step)));
        let stop = match resumed {
            Some(resumed) if !resumed.records.is_empty() => {
                let records = resumed.records.clone();
                self.run_tools(records, Some(resumed)).await;
                self.steps().await
            }
            _ => self.steps().await,
        };
        let span = tracing::Span::current();
        // As integers: OpenTelemetry has no unsigned type, and
        // tracing-opentelemetry exports a `u64` as text.
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(usage) = &self.usage {
            usage.record_on(&span);
        }
        span.record("toolstack.agent.steps", int(self.steps as u64));
        span.record("toolstack.agent.stop", stop.as_str());
        if matches!(
            stop,
            StopReason::ModelError | StopReason::StoreFailed | StopReason::Guardrail
        ) {
            span.record("error.type", stop.as_str());
            span.record("otel.status_code", "ERROR");
        }
        if stop != StopReason::StoreFailed {
            self.checkpoint_done(stop).await;
        }
        let Run {
            messages,
            usage,
            steps,
            tx,
            costs,
            ..
        } = self;
        let done = AgentDone {
            messages: Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone()),
            usage,
            steps,
            stop,
            tool_costs: costs.into_costs(),
        };
        let _ = tx.send(AgentEvent::Done(done)).await;
    }

    /// A save of where the run stands — the history, the counts, `step`
    /// (the calls of the step in flight), and `status` when it changes —
    /// owning what it writes, so that it can run alongside the model's
    /// answer; nothing to do without a store.
    fn save(
        &self,
        step: Vec<CallRecord>,
        status: Option<RunStatus>,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static {
        let checkpoints = self.checkpoints.clone();
        let messages = match checkpoints {
            Some(_) => (*self.messages).clone(),
            None => Vec::new(),
        };
        let (usage, steps, calls) = (self.usage, self.steps, self.tool_calls);
        async move {
            let Some(checkpoints) = checkpoints else {
                return Ok(());
            };
            checkpoints
                .update(move |checkpoint| {
                    if let Some(status) = status {
                        checkpoint.status = status;
                    }
                    checkpoint.messages = messages;
                    checkpoint.step = step;
                    checkpoint.usage = usage;
                    checkpoint.steps = steps;
                    checkpoint.tool_calls = calls;
                })
                .await
        }
    }

    /// Saves the step about to run, its calls planned.
    async fn checkpoint_step(&mut self, step: Vec<CallRecord>) {
        if let Err(err) = self.save(step, None).await {
            fail(&self.failed, run_error(err));
        }
    }

    /// The last checkpoint: the run ended.
    async fn checkpoint_done(&mut self, stop: StopReason) {
        if let Err(err) = self.save(Vec::new(), Some(RunStatus::Done { stop })).await {
            // The run has ended anyway; a resume will find it mid-way.
            tracing::warn!(error = %err, "the end of the run was not checkpointed");
        }
    }

    /// If a checkpoint failed: the error event, and the stop.
    async fn store_failed(&mut self) -> Option<StopReason> {
        let err = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        let _ = self.tx.send(AgentEvent::Error(err)).await;
        Some(StopReason::StoreFailed)
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
        self.costs.turn_started();
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
        let mut reasoning = Vec::new();
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
                ModelDelta::Reasoning(piece) => {
                    let event = match &piece {
                        ReasoningDelta::Text(thought) => {
                            Some(AgentEvent::ReasoningDelta(thought.clone()))
                        }
                        _ => None,
                    };
                    piece.fold_into(&mut reasoning);
                    match event {
                        Some(event) => event,
                        None => continue,
                    }
                }
                ModelDelta::Usage(used) => {
                    *self.usage.get_or_insert_with(Usage::default) += used;
                    self.costs.usage(used);
                    continue;
                }
                ModelDelta::Finish(reason) => {
                    finish = Some(reason);
                    continue;
                }
                ModelDelta::Model(model) => {
                    self.costs.model(&model);
                    continue;
                }
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
            reasoning,
            calls,
            finish,
        })
    }

    /// Runs a step's tool calls (up to the agent's bound at once) and adds
    /// their results to the conversation, in the order of the calls. A
    /// resumed step's calls go on from their stored states.
    async fn run_tools(&mut self, records: Vec<CallRecord>, resumed: Option<Resumed>) {
        for record in &records {
            if record.state == CallState::Planned {
                let _ = self
                    .tx
                    .send(AgentEvent::ToolCall(record.call.clone()))
                    .await;
            }
        }
        let resumed = resumed.map(Arc::new);
        let calls: Vec<ToolCall> = records.iter().map(|r| r.call.clone()).collect();
        let results: Vec<Message> = stream::iter(records)
            .map(|record| {
                let call = Call {
                    toolbox: self.agent.toolbox.clone(),
                    tx: self.tx.clone(),
                    extensions: self.extensions.clone(),
                    step: Arc::clone(&self.step),
                    checkpoints: self.checkpoints.clone(),
                    failed: Arc::clone(&self.failed),
                    idempotent: self
                        .tools
                        .iter()
                        .find(|info| info.name() == record.call.name)
                        .is_some_and(|info| info.annotations().is_idempotent()),
                    resumed: resumed.clone(),
                };
                call.run(record)
            })
            .buffered(self.agent.parallel)
            .collect()
            .await;
        let lengths = results.iter().map(|message| match message {
            Message::Tool { content, .. } => content.len(),
            _ => 0,
        });
        self.costs.step_ran(&calls, lengths);
        for message in results {
            self.push(message);
        }
    }

    /// Answers every call of a step that will not run with `err`, so the
    /// history stays well-formed.
    async fn refuse(&mut self, calls: Vec<ToolCall>, err: ToolError) {
        for call in calls {
            let result = ToolResult::from_error(err.clone());
            self.push(Message::tool_error(call.id.clone(), result.text()));
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

    /// Whether a guardrail raised on a call of this run.
    fn guardrail_raised(&self) -> bool {
        self.step.lock().unwrap_or_else(|p| p.into_inner()).raised
    }

    fn push(&mut self, message: Message) {
        Arc::make_mut(&mut self.messages).push(message);
    }
}
