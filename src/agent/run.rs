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
use tracing::Instrument;

use crate::model::{
    Accumulator, ChatRequest, ContextExceeded, FinishReason, Message, ModelDelta, Pushed,
    Reasoning, ReasoningDelta, RunId, ToolCall, Usage,
};
use crate::model::{ModelService, ToolChoice};
use crate::{ErrorKind, ToolError, ToolInfo, ToolResult};

use super::call::{Call, SearchCall};
use super::choice::{Step, StepContext, StepSettings};
use super::compaction::{check_compaction, estimate_tokens, OnCompactionError};
use super::cost::ToolCosts;
use super::event::{AgentDone, AgentEvent, StopReason};
use super::journal::{run_error, Counts, Journal};
use super::output::{Output, OutputMode, FINAL_ANSWER_TOOL};
use super::resume::Resumed;
use super::search::{search_tool_info, LoadedTools, SEARCH_TOOLS};
use super::settings::Agent;
use super::step::{approval_events, fail, guardrail_events, Failed, StepState};
use super::store::{CallState, RunStatus};
use super::stream::AgentStream;

/// One run in progress: its journal (the conversation so far, the step in
/// flight) and what it has used.
pub(super) struct Run<M> {
    agent: Agent<M>,
    /// The run's state, and its one writer.
    journal: Arc<Journal>,
    /// The tools this caller may see, deferred ones included.
    visible: Arc<[ToolInfo]>,
    /// The tools the model is shown: those visible, but the deferred ones
    /// a search has not loaded.
    tools: Arc<[ToolInfo]>,
    /// The deferred tools loaded so far, when the toolbox has any.
    loaded: Option<Arc<[String]>>,
    extensions: Extensions,
    tx: mpsc::Sender<AgentEvent>,
    /// The step's calls in flight and those waiting for approval.
    step: Arc<std::sync::Mutex<StepState>>,
    usage: Option<Usage>,
    steps: usize,
    tool_calls: usize,
    /// The first record that failed: the run ends at the next boundary.
    failed: Failed,
    /// What each tool result cost, as the model calls that read them say.
    costs: ToolCosts,
    /// The last answer was paused by the provider: the next one goes on
    /// with it.
    paused: bool,
    /// The prompt tokens the last model call reported, and how many
    /// messages its request carried: what the next request's size is
    /// estimated from.
    reported: Option<(u64, usize)>,
    /// The estimated tokens of the history but its last message, and how
    /// many messages that is: kept as the history grows (the last one may
    /// still grow: a paused answer's continuation), so a check costs what
    /// was added, not the whole history.
    estimated: (u64, usize),
    /// The history could not be compacted, and the agent is set to stop.
    compaction_failed: Option<ToolError>,
    /// This step's tools, choice and active set.
    current: Step,
    /// The typed answer, once decoded.
    output: Option<serde_json::Value>,
    /// Typed answers that did not decode so far.
    output_failures: usize,
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
    /// The one way a run begins, fresh or resumed: its journal (new, or
    /// taken from the store), the caller's extensions — with the run's
    /// id and the sinks its approval and guardrail layers tell — and its
    /// driver, which runs inside the returned stream's polls (nothing is
    /// spawned, so dropping the stream drops the model call and tools).
    /// A resumed run (`resumed`) first goes on with its stored step.
    pub(super) fn start(
        agent: Agent<M>,
        journal: Journal,
        extensions: Extensions,
        resumed: Option<Resumed>,
    ) -> AgentStream {
        let (tx, events) = mpsc::channel(32);
        let journal = Arc::new(journal);
        let run_id = journal.run_id();
        // The run's span is the parent of its model and tool calls' spans
        // (the driver runs inside it); a disabled span costs a branch.
        let span = agent.span(journal.is_durable().then_some(&**run_id));
        let mut extensions = extensions;
        extensions.insert(RunId::new(Arc::clone(run_id)));
        // A binding decision is the run's to give, per call: none comes in
        // with the caller (an agent run as a tool would pass its own on).
        extensions.remove::<crate::approval::BindingDecision>();
        let visible: Arc<[ToolInfo]> = agent.toolbox.infos_for(&extensions).cloned().collect();
        let loaded = agent
            .tool_search()
            .map(|_| Arc::from(journal.loaded_tools()));
        let tools = shown(&agent, &visible, loaded.as_deref());
        let step = Arc::new(std::sync::Mutex::new(StepState::default()));
        let failed = Failed::default();
        // An approval layer below the tools tells the run what it asks and
        // what was decided (each event names its call), a guardrail layer
        // what it did; set once, every call's extensions carry them.
        extensions.insert(approval_events(
            tx.clone(),
            Arc::clone(&step),
            Arc::clone(&journal),
            Arc::clone(&failed),
        ));
        extensions.insert(guardrail_events(tx.clone(), Arc::clone(&step)));
        let Counts {
            steps,
            tool_calls,
            usage,
        } = journal.counts();
        // A stored run whose last answer called no tool and did not end it
        // was paused by the provider.
        let paused = resumed.is_some()
            && matches!(journal.messages().last(),
                Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty());
        let run = Run {
            agent,
            journal: Arc::clone(&journal),
            visible,
            tools: Arc::clone(&tools),
            loaded,
            extensions,
            tx,
            step,
            usage,
            steps,
            tool_calls,
            failed,
            costs: ToolCosts::default(),
            paused,
            reported: None,
            estimated: (0, 0),
            compaction_failed: None,
            current: Step {
                tools: Arc::clone(&tools),
                choice: ToolChoice::Auto,
                active: None,
            },
            output: None,
            output_failures: 0,
        };
        AgentStream {
            driver: Some(Box::pin(run.finish(resumed).instrument(span))),
            events,
            journal,
        }
    }
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
            // A new run is first stored while the model gives its first
            // answer (a tool waits for its own start to be stored); later
            // steps have nothing to store before the answer.
            self.compact(false).await;
            if let Some(error) = self.compaction_failed.take() {
                let _ = self.tx.send(AgentEvent::Error(error)).await;
                return StopReason::CompactionFailed;
            }
            if let Err(error) = self.settle_step() {
                let _ = self.tx.send(AgentEvent::Error(error)).await;
                return StopReason::InvalidToolChoice;
            }
            let journal = Arc::clone(&self.journal);
            let begin = async move { journal.begin().await };
            self.steps += 1;
            let (answer, begun) = futures_util::future::join(self.answer(), begin).await;
            if let Err(err) = begun {
                fail(&self.failed, run_error(err));
            }
            let Answer {
                text,
                reasoning,
                mut calls,
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
            let message = Message::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: calls.clone(),
                reasoning,
            };
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
            // A call of the final-answer tool ends the run (or is asked
            // again): no step is planned for the answer that makes one.
            let gives_answer = self.agent.output.as_ref().is_some_and(|o| {
                o.mode == OutputMode::Tool && calls.iter().any(|c| c.name == FINAL_ANSWER_TOOL)
            });
            let over_limit = self.tool_calls + calls.len() > self.agent.max_tool_calls;
            let runs_tools = !calls.is_empty() && cut_off.is_none() && !over_limit && !gives_answer;
            if runs_tools {
                self.tool_calls += calls.len();
            }
            // The answer and the step it plans are stored before any of
            // its calls starts.
            let planned = if runs_tools {
                calls.clone()
            } else {
                Vec::new()
            };
            // An answer after a paused one goes on with it: one message.
            let continues = std::mem::replace(
                &mut self.paused,
                calls.is_empty() && finish == Some(FinishReason::Paused),
            );
            let answered = self
                .journal
                .answered(message, continues, self.counts(), planned);
            if let Err(err) = answered.await {
                fail(&self.failed, run_error(err));
            }
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
            if let Some(output) = self.agent.output.clone() {
                match self
                    .typed_answer(&output, text_of_last(&self.journal), calls)
                    .await
                {
                    Typed::Done(stop) => return stop,
                    Typed::Again => continue,
                    Typed::Calls(rest) => calls = rest,
                }
            }
            if calls.is_empty() {
                return StopReason::Finished;
            }
            if over_limit && !gives_answer {
                let limit = self.agent.max_tool_calls;
                let err = ToolError::new(
                    ErrorKind::Denied,
                    format!("not run: this run's limit of {limit} tool calls was reached"),
                );
                self.refuse(calls, err).await;
                return StopReason::MaxToolCalls;
            }
            if let Some(stop) = self.store_failed().await {
                return stop;
            }
            self.run_tools(None).await;
        }
    }

    /// The whole run from where it stands: a resumed step first, then
    /// turns and steps to the end; the last record and
    /// [`AgentEvent::Done`].
    async fn finish(mut self, resumed: Option<Resumed>) {
        let stop = match resumed {
            Some(resumed) if !self.journal.step().is_empty() => {
                self.run_tools(Some(resumed)).await;
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
            StopReason::ModelError
                | StopReason::StoreFailed
                | StopReason::Guardrail
                | StopReason::CompactionFailed
                | StopReason::OutputInvalid
                | StopReason::InvalidToolChoice
        ) {
            span.record("error.type", stop.as_str());
            span.record("otel.status_code", "ERROR");
        }
        if stop != StopReason::StoreFailed {
            let ended = RunStatus::Done { stop };
            if let Err(err) = self.journal.end(ended, self.counts()).await {
                // The run has ended anyway; a resume will find it mid-way.
                tracing::warn!(error = %err, "the end of the run was not stored");
            }
        }
        let messages = self.journal.take_messages();
        let Run {
            usage,
            steps,
            tx,
            costs,
            journal,
            output,
            ..
        } = self;
        drop(journal);
        let done = AgentDone {
            messages: Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone()),
            usage,
            steps,
            stop,
            tool_costs: costs.into_costs(),
            output,
        };
        let _ = tx.send(AgentEvent::Done(done)).await;
    }

    /// What the run has counted so far.
    fn counts(&self) -> Counts {
        Counts {
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    /// If a record failed to save: the error event, and the stop.
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
        let mut compacted = false;
        loop {
            match self.model_turn().await {
                Ok(answer) => return Ok(answer),
                // Refused for its length: compacted, and asked once more.
                Err(TurnError {
                    error,
                    streamed: false,
                }) if !compacted && ContextExceeded::is(&error) => {
                    compacted = true;
                    if !self.compact(true).await {
                        return Err(error);
                    }
                }
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
        let messages = self.journal.messages();
        let sent = messages.len();
        let mut request = ChatRequest::new(Vec::new())
            .with_tool_choice(self.current.choice.clone())
            .with_tools(Arc::clone(&self.current.tools));
        request.messages = messages;
        request.model = self.agent.model_name.clone();
        request.extensions = self.extensions.clone();
        if let Some(loaded) = &self.loaded {
            request.extensions.insert(LoadedTools(Arc::clone(loaded)));
        }
        request.output = self
            .agent
            .output
            .as_ref()
            .filter(|o| o.mode == OutputMode::Native)
            .map(|o| o.schema.clone());
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
                    if used.prompt_tokens > 0 {
                        self.reported = Some((used.prompt_tokens, sent));
                    }
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

    /// Runs the step's tool calls (up to the agent's bound at once) and
    /// closes it: their results join the conversation, in the order of
    /// the calls. A resumed step's calls go on from their stored states.
    async fn run_tools(&mut self, resumed: Option<Resumed>) {
        let records = self.journal.step();
        {
            let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
            step.queued = records.len();
            step.parallel = self.agent.parallel;
        }
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
        // A call that ends frees its slot at once (the results are put in
        // call order after), so a call waiting for a person holds one
        // slot, not the calls after it.
        // Why each call may not run (outside the step's tools, or a
        // deferred tool not loaded), and which are searches.
        let records: Vec<_> = records
            .into_iter()
            .map(|record| {
                let name = &record.call.name;
                let refused = self.current.refuses(name).or_else(|| self.not_loaded(name));
                let search = match name == SEARCH_TOOLS && self.searches() {
                    true => self.agent.tool_search().map(|search| SearchCall {
                        search: Arc::clone(search),
                        limit: self.agent.search_limit,
                    }),
                    false => None,
                };
                (record, refused, search)
            })
            .collect();
        let mut lengths: Vec<(usize, usize)> = stream::iter(records.into_iter().enumerate())
            .map(|(at, (record, refused, search))| {
                let call = Call {
                    toolbox: self.agent.toolbox.clone(),
                    tx: self.tx.clone(),
                    extensions: self.extensions.clone(),
                    step: Arc::clone(&self.step),
                    journal: Arc::clone(&self.journal),
                    failed: Arc::clone(&self.failed),
                    idempotent: search.is_some()
                        || self
                            .visible
                            .iter()
                            .find(|info| info.name() == record.call.name)
                            .is_some_and(|info| info.annotations().is_idempotent()),
                    resumed: resumed.clone(),
                    refused,
                    search,
                };
                let run = call.run(record);
                async move {
                    let length = match run.await {
                        Message::Tool { content, .. } => content.len(),
                        _ => 0,
                    };
                    (at, length)
                }
            })
            .buffer_unordered(self.agent.parallel)
            .collect()
            .await;
        lengths.sort_unstable_by_key(|(at, _)| *at);
        let lengths = lengths.into_iter().map(|(_, length)| length);
        self.costs.step_ran(&calls, lengths);
        self.journal.close_step().await;
        self.tools_loaded();
    }

    /// Whether the agent offers its search: the toolbox has deferred tools,
    /// and no tool of its own by the search's name (which it then keeps).
    fn searches(&self) -> bool {
        self.loaded.is_some() && !self.visible.iter().any(|t| t.name() == SEARCH_TOOLS)
    }

    /// The tools a search loaded in the step just run join those the
    /// model is shown.
    fn tools_loaded(&mut self) {
        let Some(loaded) = &self.loaded else {
            return;
        };
        let now = self.journal.loaded_tools();
        if now.len() != loaded.len() {
            let now: Arc<[String]> = Arc::from(now);
            self.tools = shown(&self.agent, &self.visible, Some(&now));
            self.loaded = Some(now);
        }
    }

    /// Why a call of `name` is not run, when the toolbox has deferred
    /// tools: a deferred tool the caller may see, not loaded by a search
    /// yet — whatever name reaches it (a near-miss the toolbox would
    /// repair, an alias) —, or a name of no tool shown, answered with the
    /// tools shown (never the deferred ones, which the model finds by
    /// searching).
    fn not_loaded(&self, name: &str) -> Option<ToolError> {
        self.loaded.as_ref()?;
        let shown =
            |name: &str| name == SEARCH_TOOLS || self.tools.iter().any(|t| t.name() == name);
        if shown(name) {
            return None;
        }
        let repaired = self.agent.toolbox.repaired_name(name, &self.extensions);
        let target = repaired.as_deref().unwrap_or(name);
        if shown(target) {
            return None;
        }
        let quoted: String = name.chars().take(64).collect();
        if self.visible.iter().any(|t| t.name() == target) {
            return Some(ToolError::new(
                ErrorKind::NotFound,
                format!(
                    "not run: the tool `{quoted}` is not loaded yet; call `{SEARCH_TOOLS}` with what you need it for, then call the tool it finds"
                ),
            ));
        }
        let names: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
        Some(ToolError::new(
            ErrorKind::NotFound,
            format!(
                "unknown tool `{quoted}`; the tools you may call: {}; `{SEARCH_TOOLS}` finds more",
                names.join(", ")
            ),
        ))
    }

    /// This step's tools and choice: the hook's settings over the tools
    /// the caller may see, checked.
    fn settle_step(&mut self) -> Result<(), ToolError> {
        let settings = match &self.agent.prepare_step {
            Some(hook) => {
                let messages = self.journal.messages();
                (hook.0)(&StepContext {
                    step: self.steps,
                    messages: &messages,
                    tools: &self.tools,
                })
            }
            None => StepSettings::new(),
        };
        let mut extra: Vec<ToolInfo> = self
            .agent
            .output
            .as_ref()
            .and_then(Output::tool)
            .into_iter()
            .collect();
        let unloaded = self.visible.len() - self.tools.len();
        if self.searches() && unloaded > 0 {
            extra.push(search_tool_info(unloaded));
        }
        self.current = Step::settle(&self.tools, settings, &self.agent.tool_choice, &extra)?;
        Ok(())
    }

    /// The typed answer in a model's answer, when the agent asks for one:
    /// `text` decoded (natively), or the final-answer call's arguments
    /// (in [`OutputMode::Tool`]). One that decodes ends the run; one that
    /// does not goes back to the model with the error (its call answered
    /// with it, or a message after the text), up to the retries allowed.
    async fn typed_answer(
        &mut self,
        output: &Output,
        text: Option<String>,
        calls: Vec<ToolCall>,
    ) -> Typed {
        let (answer, calls) = match output.mode {
            OutputMode::Tool => match calls.iter().position(|c| c.name == FINAL_ANSWER_TOOL) {
                Some(at) => (Some(calls[at].arguments.clone()), calls),
                None if calls.is_empty() => (None, calls),
                None => return Typed::Calls(calls),
            },
            _ if !calls.is_empty() => return Typed::Calls(calls),
            _ => (text, calls),
        };
        let decoded = match &answer {
            Some(answer) => output.decode(answer),
            None => Err(ToolError::invalid_arguments(format!(
                "the answer must be given by calling `{FINAL_ANSWER_TOOL}` with it as its arguments"
            ))),
        };
        let failed = decoded.as_ref().err().cloned();
        if !calls.is_empty() {
            // Every call of the answer is answered, the final one with
            // what came of it.
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                let result = match (&failed, call.name == FINAL_ANSWER_TOOL) {
                    (None, true) => {
                        let mut recorded = ToolResult::default();
                        recorded.push(crate::ToolOutput::text("the answer was recorded"));
                        recorded
                    }
                    (Some(err), true) => ToolResult::from_error(err.clone()),
                    (None, false) => ToolResult::from_error(ToolError::cancelled(
                        "not run: the run ended with the final answer",
                    )),
                    (Some(_), false) => ToolResult::from_error(ToolError::cancelled(
                        "not run: the final answer did not have the required form; give it again",
                    )),
                };
                results.push(Message::tool_result(call.id.clone(), &result));
                let _ = self
                    .tx
                    .send(AgentEvent::ToolResult {
                        call_id: call.id,
                        name: call.name,
                        result,
                    })
                    .await;
            }
            if let Err(err) = self.journal.messages_added(results).await {
                fail(&self.failed, run_error(err));
            }
        }
        match decoded {
            Ok(value) => {
                let _ = self.tx.send(AgentEvent::Output(value.clone())).await;
                self.output = Some(value);
                Typed::Done(StopReason::Finished)
            }
            Err(err) if self.output_failures >= output.retries => {
                let err = ToolError::new(
                    err.kind(),
                    format!(
                        "the answer did not have the required form after {} tries: {}",
                        self.output_failures + 1,
                        err.message()
                    ),
                );
                let _ = self.tx.send(AgentEvent::Error(err)).await;
                Typed::Done(StopReason::OutputInvalid)
            }
            Err(err) => {
                self.output_failures += 1;
                if answer.is_none() || output.mode == OutputMode::Native {
                    // The text is in the history; the model reads why it
                    // is not the answer, then answers again.
                    let again = Message::user(format!(
                        "{} Answer again, in the required form.",
                        err.message()
                    ));
                    if let Err(err) = self.journal.messages_added(vec![again]).await {
                        fail(&self.failed, run_error(err));
                    }
                }
                Typed::Again
            }
        }
    }

    /// Answers every call of a step that will not run with `err`, so the
    /// history stays well-formed.
    async fn refuse(&mut self, calls: Vec<ToolCall>, err: ToolError) {
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            let result = ToolResult::from_error(err.clone());
            results.push(Message::tool_error(call.id.clone(), result.text()));
            let _ = self
                .tx
                .send(AgentEvent::ToolResult {
                    call_id: call.id,
                    name: call.name,
                    result,
                })
                .await;
        }
        if let Err(err) = self.journal.messages_added(results).await {
            fail(&self.failed, run_error(err));
        }
    }

    /// Compacts the history, with the agent's strategy, when the next
    /// request would pass the context budget (or `forced`: the endpoint
    /// refused it for its length); whether it did. A strategy that fails,
    /// or whose history breaks what must stay, leaves it as it is.
    async fn compact(&mut self, forced: bool) -> bool {
        let Some(compaction) = self.agent.compaction.clone() else {
            return false;
        };
        let messages = self.journal.messages();
        // The provider's count where it reported one, plus what was added
        // since; never less than our own estimate of the whole.
        let tokens_before = self.estimate(&messages);
        let estimate = match self.reported {
            Some((prompt, sent)) if sent <= messages.len() => {
                prompt.saturating_add(estimate_tokens(&messages[sent..]))
            }
            _ => 0,
        }
        .max(tokens_before);
        if !forced && estimate <= compaction.budget {
            return false;
        }
        let span = tracing::info_span!(
            "compact",
            toolstack.compaction.forced = forced,
            toolstack.compaction.budget = compaction.budget,
            toolstack.compaction.tokens_before = tokens_before,
            toolstack.compaction.tokens_after = tracing::field::Empty,
            toolstack.compaction.messages_before = messages.len(),
            toolstack.compaction.messages_after = tracing::field::Empty,
        );
        let outcome = compaction
            .strategy
            .compact(&messages)
            .instrument(span.clone())
            .await;
        let compacted = match outcome.and_then(|compacted| match compacted {
            Some(compacted) => check_compaction(&messages, &compacted).map(|()| Some(compacted)),
            None => Ok(None),
        }) {
            Ok(Some(compacted)) => compacted,
            Ok(None) => return false,
            Err(err) => {
                let stop = self.agent.on_compaction_error == OnCompactionError::Stop;
                match stop {
                    true => {
                        tracing::warn!(parent: &span, error = %err, "the history was not compacted; the run stops")
                    }
                    false => {
                        tracing::warn!(parent: &span, error = %err, "the history was not compacted; the run goes on with it as it is")
                    }
                }
                if stop {
                    let error = ToolError::new(
                        crate::ErrorKind::Unavailable,
                        format!("the history could not be compacted: {err}"),
                    )
                    .with_source(err);
                    self.compaction_failed = Some(error);
                }
                return false;
            }
        };
        let tokens_after = estimate_tokens(&compacted);
        span.record("toolstack.compaction.tokens_after", tokens_after);
        span.record("toolstack.compaction.messages_after", compacted.len());
        let (messages_before, messages_after) = (messages.len(), compacted.len());
        drop(messages);
        if let Err(err) = self.journal.compacted(compacted).await {
            fail(&self.failed, run_error(err));
        }
        // Estimated afresh until the next call reports.
        self.reported = None;
        self.estimated = (0, 0);
        let event = AgentEvent::Compacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        };
        let _ = self.tx.send(event).await;
        true
    }

    /// The estimated tokens of `messages` (the run's history), adding to
    /// what was estimated before only what came since.
    fn estimate(&mut self, messages: &[Message]) -> u64 {
        let (mut tokens, counted) = self.estimated;
        let last = messages.len().saturating_sub(1);
        if counted > last {
            // Shorter than counted: not the history estimated before.
            tokens = estimate_tokens(&messages[..last]);
        } else {
            tokens += estimate_tokens(&messages[counted..last]);
        }
        self.estimated = (tokens, last);
        tokens + estimate_tokens(&messages[last..])
    }

    /// Whether a guardrail raised on a call of this run.
    fn guardrail_raised(&self) -> bool {
        self.step.lock().unwrap_or_else(|p| p.into_inner()).raised
    }
}

/// What came of an answer, for a run that asks for a typed one.
enum Typed {
    /// The run ends.
    Done(StopReason),
    /// The model is asked again.
    Again,
    /// The answer's calls run as any (no typed answer in it yet).
    Calls(Vec<ToolCall>),
}

/// The text of the last assistant message: the answer just given.
fn text_of_last(journal: &Journal) -> Option<String> {
    match journal.messages().last() {
        Some(Message::Assistant { content, .. }) => content.clone(),
        _ => None,
    }
}

/// The tools the model is shown: every one the caller may see, but the
/// deferred ones not `loaded` (all of them, for an agent whose toolbox
/// defers none).
fn shown<M>(
    agent: &Agent<M>,
    visible: &Arc<[ToolInfo]>,
    loaded: Option<&[String]>,
) -> Arc<[ToolInfo]> {
    let Some(loaded) = loaded else {
        return Arc::clone(visible);
    };
    let loaded: std::collections::HashSet<&str> = loaded.iter().map(String::as_str).collect();
    visible
        .iter()
        .filter(|info| !agent.toolbox.is_deferred(info.name()) || loaded.contains(info.name()))
        .cloned()
        .collect()
}
