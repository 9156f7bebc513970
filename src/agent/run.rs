//! The agent loop: [`Agent`], its [`AgentEvent`]s, and one run's state.
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

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::future::{ready, Ready};
use futures_util::{stream, StreamExt};
use http::Extensions;
use tokio::sync::mpsc;
use tower::ServiceExt;
use tower_service::Service;
use tracing::Instrument;

use crate::model::{
    Accumulator, ChatRequest, FinishReason, Message, ModelDelta, Pushed, ToolCall, Usage,
};
use crate::{
    ErrorKind, Progress, ToolError, ToolInfo, ToolOutput, ToolRequest, ToolResult, Toolbox,
};

/// What an agent run streams, as it happens.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AgentEvent {
    /// Text from the model.
    TextDelta(String),
    /// The model started writing a tool call (for a UI that shows the
    /// arguments being written).
    ToolCallStarted {
        /// The call's index in this model answer.
        index: u32,
        /// The call id, if the first fragment carried it.
        id: Option<String>,
        /// The tool name so far.
        name: String,
    },
    /// More argument text of a call being written.
    ToolCallInputDelta {
        /// The call's index in this model answer.
        index: u32,
        /// The new argument text.
        arguments: String,
    },
    /// A complete tool call, about to run.
    ToolCall(ToolCall),
    /// One item streamed by a running tool.
    ToolOutput {
        /// The call it belongs to.
        call_id: String,
        /// The item.
        output: ToolOutput,
    },
    /// Progress reported by a running tool.
    Progress {
        /// The call it belongs to.
        call_id: String,
        /// The report.
        progress: Progress,
    },
    /// A call waits for approval (the approval layer of
    /// `toolstack-layers` asked); a UI shows it and lets a person answer.
    ApprovalRequested {
        /// The call.
        call_id: String,
        /// The tool.
        name: String,
        /// Its arguments, as the model wrote them.
        arguments: String,
    },
    /// Every tool call of the step still running waits for a decision
    /// ([`ApprovalRequested`](Self::ApprovalRequested) before): nothing
    /// more happens in this run until one is made. A front end that takes
    /// the person's answer in a later request (the AI SDK's chat protocol
    /// does, [`http::ai_sdk`](crate::http::ai_sdk)) ends its response here and
    /// keeps the run for that answer.
    AwaitingApproval {
        /// The calls waiting, in the order they asked.
        call_ids: Vec<String>,
    },
    /// The call's approval was decided.
    ApprovalDecided {
        /// The call.
        call_id: String,
        /// The tool.
        name: String,
        /// What was decided.
        decision: crate::approval::Decision,
        /// Who decided.
        by: String,
    },
    /// A tool call finished; this is what the model will read.
    ToolResult {
        /// The call.
        call_id: String,
        /// The tool name.
        name: String,
        /// The collected result (`is_error` for failures).
        result: ToolResult,
    },
    /// The model's answer broke off with a retryable error after it had
    /// begun to stream, and the model is asked again
    /// ([`Agent::retry_model_turns`]). The text and tool-call input
    /// streamed since the last tool step (or the run's start) were that
    /// answer's: forget them (a UI removes the half-written text). None of
    /// its tool calls ran, and it is not in the conversation.
    TurnDiscarded {
        /// What broke the answer off.
        error: ToolError,
    },
    /// The model failed; the run ends.
    Error(ToolError),
    /// The run ended.
    Done(AgentDone),
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct AgentDone {
    /// The whole conversation, the new messages included.
    pub messages: Vec<Message>,
    /// Tokens used by the model calls that reported usage (discarded
    /// answers included); `None` when none did — not the same as zero.
    pub usage: Option<Usage>,
    /// Model turns taken; a turn asked again after a fault
    /// ([`Agent::retry_model_turns`]) counts once.
    pub steps: usize,
    /// Why the run stopped.
    pub stop: StopReason,
}

/// `invoke_agent {name}`, or `invoke_agent` for an agent without a name.
struct AgentSpanName<'a>(Option<&'a str>);

impl std::fmt::Display for AgentSpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(name) => write!(f, "invoke_agent {name}"),
            None => f.write_str("invoke_agent"),
        }
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered without calling a tool.
    Finished,
    /// The run reached its limit of model calls.
    MaxSteps,
    /// The model asked for more tool calls than the run allows.
    MaxToolCalls,
    /// The model call failed (see the [`AgentEvent::Error`] before).
    ModelError,
    /// The model's last answer was cut off at its token limit
    /// (`finish_reason: "length"`): the last assistant message is
    /// incomplete. Tool calls in it were not run — their arguments may be
    /// cut too —, each answered with a refusal so the history stays
    /// well-formed.
    Length,
    /// The model's last answer was stopped by a content filter
    /// (`finish_reason: "content_filter"`); as with
    /// [`Length`](Self::Length), its tool calls were not run.
    ContentFilter,
}

impl StopReason {
    /// The reason in snake case (`finished`, `max_steps`, …), as spans
    /// record it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Finished => "finished",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxToolCalls => "max_tool_calls",
            StopReason::ModelError => "model_error",
            StopReason::Length => "length",
            StopReason::ContentFilter => "content_filter",
        }
    }
}

/// Drives a model and a toolbox: calls the model, runs the tool calls it
/// asks for (concurrently, up to a bound), feeds the results back, and
/// repeats until the model answers without a tool call or a limit is hit.
///
/// Tool failures, invalid arguments and unknown tools go back to the model
/// as tool results (the model-facing JSON of the [`ToolError`]), and the
/// loop goes on. Dropping the event stream cancels the model call and the
/// running tools. An `Agent` is a `Service<Vec<Message>>` answering with
/// its event stream.
#[derive(Debug, Clone)]
pub struct Agent<M> {
    model: M,
    name: Option<Arc<str>>,
    provider: Option<&'static str>,
    model_name: Option<Arc<str>>,
    toolbox: Toolbox,
    max_steps: usize,
    max_tool_calls: usize,
    parallel: usize,
    turn_retries: usize,
}

impl<M> Agent<M> {
    /// An agent over `model` and `toolbox`: at most 10 model turns, 32
    /// tool calls, 4 tools at once; a turn that breaks off is not asked
    /// again.
    pub fn new(model: M, toolbox: Toolbox) -> Self {
        Agent {
            model,
            name: None,
            provider: None,
            model_name: None,
            toolbox,
            max_steps: 10,
            max_tool_calls: 32,
            parallel: 4,
            turn_retries: 0,
        }
    }

    /// Names the agent: its runs' `invoke_agent` spans are
    /// `invoke_agent {name}`, with `gen_ai.agent.name`.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Names the model's provider (`openai`, `anthropic`, … as the
    /// OpenTelemetry GenAI conventions spell them): its runs'
    /// `invoke_agent` spans record it as `gen_ai.provider.name`.
    pub fn provider(mut self, provider: &'static str) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The agent's name, if it has one.
    pub fn agent_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Asks for the model `name` in every model request
    /// ([`ChatRequest::model`]): the OpenAI-compatible client sends it
    /// instead of its own, and a trace layer names the span `chat {name}`.
    pub fn model_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// At most `steps` model turns per run.
    pub fn max_steps(mut self, steps: usize) -> Self {
        self.max_steps = steps;
        self
    }

    /// At most `calls` tool calls per run.
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.max_tool_calls = calls;
        self
    }

    /// At most `tools` tool calls of one step running at once.
    pub fn parallel_tools(mut self, tools: usize) -> Self {
        self.parallel = tools.max(1);
        self
    }

    /// Asks the model again, up to `retries` times per turn, when its
    /// answer breaks off with a retryable error (a dropped connection, an
    /// idle timeout) *after* it began to stream — the fault a retry layer
    /// cannot take back, since deltas have already reached the agent. Off
    /// (0) by default.
    ///
    /// Asking again is safe: the partial answer is discarded — not added to
    /// the conversation, none of its tool calls run — and an
    /// [`AgentEvent::TurnDiscarded`] tells the consumer to forget its
    /// streamed text. A failure before the first delta is left to the
    /// retry layer (`stream_retry`, with backoff and `Retry-After`), and a
    /// non-retryable error ends the run as before.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use toolstack::agent::{Agent, AgentEvent, StopReason};
    /// use toolstack::model::{Message, ScriptedModel, Turn};
    /// use toolstack::{ErrorKind, ToolError, Toolbox};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let cut = ToolError::new(ErrorKind::Unavailable, "connection reset");
    /// let model = ScriptedModel::new([
    ///     Turn::new().text("Half an ans").fail(cut),
    ///     Turn::new().text("A whole answer."),
    /// ]);
    /// let agent = Agent::new(model, Toolbox::new()).retry_model_turns(1);
    /// let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    /// assert!(events.iter().any(|e| matches!(e, AgentEvent::TurnDiscarded { .. })));
    /// let Some(AgentEvent::Done(done)) = events.last() else { panic!() };
    /// assert_eq!(done.stop, StopReason::Finished);
    /// assert_eq!(done.messages.last(), Some(&Message::assistant("A whole answer.")));
    /// # }
    /// ```
    pub fn retry_model_turns(mut self, retries: usize) -> Self {
        self.turn_retries = retries;
        self
    }
}

impl<M, St> Agent<M>
where
    M: Service<ChatRequest, Response = St> + Clone + Send + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
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
        // The driver runs inside the stream's own polls (nothing is
        // spawned), so dropping the stream drops the model call and tools.
        let (tx, rx) = mpsc::channel(32);
        let agent = self.clone();
        // The run's span is the parent of its model and tool calls' spans
        // (the driver runs inside it); a disabled span costs a branch.
        let span = self.span();
        AgentStream {
            driver: Some(Box::pin(
                agent.drive(messages, extensions, tx).instrument(span),
            )),
            events: rx,
        }
    }

    /// The `invoke_agent` span of a run, with the OpenTelemetry GenAI
    /// attributes; usage and the outcome are recorded when it ends.
    fn span(&self) -> tracing::Span {
        let name = self.name.as_deref();
        tracing::info_span!(
            "invoke_agent",
            otel.name = %AgentSpanName(name),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = name,
            gen_ai.provider.name = self.provider,
            gen_ai.request.model = self.model_name.as_deref(),
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            toolstack.agent.steps = tracing::field::Empty,
            toolstack.agent.stop = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }

    async fn drive(
        self,
        messages: Vec<Message>,
        extensions: Extensions,
        tx: mpsc::Sender<AgentEvent>,
    ) {
        let tools: Arc<[ToolInfo]> = self.toolbox.infos_for(&extensions).cloned().collect();
        // An approval layer below the tools tells the run what it asks and
        // what was decided (each event names its call); set once, every
        // call's extensions carry it.
        let mut extensions = extensions;
        let step = Arc::new(std::sync::Mutex::new(StepState::default()));
        extensions.insert(approval_events(tx.clone(), Arc::clone(&step)));
        let mut run = Run {
            agent: self,
            // Shared with each model request; by the time the history grows
            // the model has let go of it, so `make_mut` does not copy it.
            messages: Arc::new(messages),
            tools,
            extensions,
            tx,
            step,
            usage: None,
            steps: 0,
            tool_calls: 0,
        };
        let stop = run.steps().await;
        let span = tracing::Span::current();
        // As integers: OpenTelemetry has no unsigned type, and
        // tracing-opentelemetry exports a `u64` as text.
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(usage) = &run.usage {
            span.record("gen_ai.usage.input_tokens", int(usage.prompt_tokens));
            span.record("gen_ai.usage.output_tokens", int(usage.completion_tokens));
        }
        span.record("toolstack.agent.steps", int(run.steps as u64));
        span.record("toolstack.agent.stop", stop.as_str());
        if stop == StopReason::ModelError {
            span.record("error.type", "model_error");
            span.record("otel.status_code", "ERROR");
        }
        let Run {
            messages,
            usage,
            steps,
            tx,
            ..
        } = run;
        let done = AgentDone {
            messages: Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone()),
            usage,
            steps,
            stop,
        };
        let _ = tx.send(AgentEvent::Done(done)).await;
    }
}

/// One run in progress: the conversation so far and what it has used.
struct Run<M> {
    agent: Agent<M>,
    messages: Arc<Vec<Message>>,
    /// The tools this caller may see, as the model is shown them.
    tools: Arc<[ToolInfo]>,
    extensions: Extensions,
    tx: mpsc::Sender<AgentEvent>,
    /// The step's calls in flight and those waiting for approval.
    step: Arc<std::sync::Mutex<StepState>>,
    usage: Option<Usage>,
    steps: usize,
    tool_calls: usize,
}

/// Which calls of the current tool step are running and which of them
/// wait for a decision: when they are the same, the run can only wait
/// ([`AgentEvent::AwaitingApproval`]).
#[derive(Debug, Default)]
struct StepState {
    running: usize,
    waiting: Vec<String>,
    /// Whether the present wait has been told.
    told: bool,
}

impl StepState {
    /// The calls waiting, if the run now can do nothing but wait and has
    /// not said so yet.
    fn stalled(&mut self) -> Option<Vec<String>> {
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
struct Answer {
    text: String,
    calls: Vec<ToolCall>,
    /// The last finish reason the model sent, if any.
    finish: Option<FinishReason>,
}

/// A model turn that failed, and whether any delta had arrived before.
struct TurnError {
    error: ToolError,
    streamed: bool,
}

impl<M, St> Run<M>
where
    M: Service<ChatRequest, Response = St> + Clone + Send + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
{
    /// Model turns and tool steps until the model stops calling tools or a
    /// guard stops the run.
    async fn steps(&mut self) -> StopReason {
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
        let results: Vec<ToolResult> = stream::iter(calls.clone())
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
        for (call, result) in calls.iter().zip(results) {
            self.push(Message::tool(call.id.clone(), result.text()));
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
struct Running<'a> {
    step: &'a std::sync::Mutex<StepState>,
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
fn approval_events(
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

/// Runs one call, streaming its items as events; returns its result.
async fn run_tool(
    toolbox: &Toolbox,
    call: &ToolCall,
    extensions: Extensions,
    tx: &mpsc::Sender<AgentEvent>,
) -> ToolResult {
    let mut request =
        ToolRequest::new(call.name.clone(), call.arguments.clone()).with_id(call.id.clone());
    *request.extensions_mut() = extensions;
    let mut result = ToolResult::default();
    match toolbox.dispatch(request).await {
        Err(err) => result.push_error(err),
        Ok(mut items) => {
            while let Some(item) = items.next().await {
                match item {
                    Ok(ToolOutput::Progress(progress)) => {
                        let event = AgentEvent::Progress {
                            call_id: call.id.clone(),
                            progress: *progress,
                        };
                        let _ = tx.send(event).await;
                    }
                    Ok(output) => {
                        let event = AgentEvent::ToolOutput {
                            call_id: call.id.clone(),
                            output: output.clone(),
                        };
                        let _ = tx.send(event).await;
                        result.push(output);
                    }
                    Err(err) => {
                        result.push_error(err);
                        break;
                    }
                }
            }
        }
    }
    let event = AgentEvent::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        result: result.clone(),
    };
    let _ = tx.send(event).await;
    result
}

/// The event stream of one agent run. Dropping it cancels the run.
pub struct AgentStream {
    driver: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    events: mpsc::Receiver<AgentEvent>,
}

impl Stream for AgentStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        if let Some(driver) = &mut self.driver {
            if driver.as_mut().poll(cx).is_ready() {
                self.driver = None;
            }
        }
        // The driver holds the only sender: once it is done and the queue
        // drained, this yields `None`.
        self.events.poll_recv(cx)
    }
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("running", &self.driver.is_some())
            .finish_non_exhaustive()
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
impl<M, St, R> Service<R> for Agent<M>
where
    R: Into<AgentRequest>,
    M: Service<ChatRequest, Response = St> + Clone + Send + 'static,
    M::Error: Into<ToolError>,
    M::Future: Send + 'static,
    St: Stream<Item = Result<ModelDelta, ToolError>> + Send + 'static,
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
