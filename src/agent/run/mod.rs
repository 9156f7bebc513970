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
//! answer is never mistaken for a finished one. An answer a spend limit
//! cuts mid-stream ends the run with [`StopReason::SpendLimit`]: what it
//! said so far is kept, its text followed by a note that it was cut and
//! why; the calls it had begun are not run.

use std::sync::Arc;

use http::Extensions;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::model::{FinishReason, Message, OuterRuns, RunId};
use crate::model::{ModelService, ToolChoice};
use crate::{ErrorKind, ToolError, ToolInfo};

use super::cost::ToolCosts;
use super::event::{AgentDone, AgentEvent, StopReason};
use super::journal::{run_error, RunJournal};
use super::output::{OutputMode, FINAL_ANSWER_TOOL};
use super::resume::Resumed;
use super::settings::Agent;
use super::step_state::{approval_events, fail, guardrail_events, FirstFailure, StepState};
use super::step_tools::StepTools;
use super::steps::{Cut, ModelAnswer, Steps, TurnError};
use super::store::RunStatus;
use super::stream::AgentStream;

mod compact;
mod tools;
mod turn;
mod typed;

use self::tools::shown;
use self::typed::{text_of_last, TypedOutcome};

/// One run in progress: its journal (the conversation so far, the step in
/// flight, what it has counted) and what the loop keeps between turns.
pub(super) struct Run<M> {
    agent: Agent<M>,
    /// The run's state, and its one writer.
    journal: Arc<RunJournal>,
    /// The tools this caller may see, deferred ones included.
    visible: Arc<[ToolInfo]>,
    /// The tools the model is shown: those visible, but the deferred ones
    /// a search has not loaded.
    tools: Arc<[ToolInfo]>,
    /// How many loaded deferred tools `tools` shows: when the journal has
    /// more, they are shown afresh.
    shown_loaded: usize,
    extensions: Extensions,
    tx: mpsc::Sender<AgentEvent>,
    /// The step's calls in flight and those waiting for approval.
    step: Arc<std::sync::Mutex<StepState>>,
    /// The first record that failed: the run ends at the next boundary.
    failed: FirstFailure,
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
    current: StepTools,
    /// Where its model turns and tool calls run: here, or as durable
    /// steps.
    steps: Steps,
    /// The typed answer, once decoded.
    output: Option<serde_json::Value>,
    /// TypedOutcome answers that did not decode so far.
    output_failures: usize,
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
        journal: RunJournal,
        extensions: Extensions,
        resumed: Option<Resumed>,
    ) -> AgentStream {
        Self::start_on(agent, journal, extensions, resumed, Steps::Here)
    }

    /// [`start`](Self::start), its model turns and tool calls run by
    /// `steps`.
    pub(super) fn start_on(
        agent: Agent<M>,
        journal: RunJournal,
        extensions: Extensions,
        resumed: Option<Resumed>,
        steps: Steps,
    ) -> AgentStream {
        let (tx, events) = mpsc::channel(32);
        let journal = Arc::new(journal);
        let run_id = journal.run_id();
        // The run's span is the parent of its model and tool calls' spans
        // (the driver runs inside it); a disabled span costs a branch.
        let span = agent.span(journal.is_durable().then_some(&**run_id));
        let mut extensions = extensions;
        // Started as another run's tool: that run, and those it serves,
        // are this one's outer runs.
        if let Some(outer) = extensions.remove::<RunId>() {
            if outer.as_str() != &**run_id {
                let runs = extensions.get::<OuterRuns>().cloned().unwrap_or_default();
                extensions.insert(runs.within(outer));
            }
        }
        extensions.insert(RunId::new(Arc::clone(run_id)));
        // A binding decision is the run's to give, per call: none comes in
        // with the caller (an agent run as a tool would pass its own on).
        extensions.remove::<crate::approval::BindingDecision>();
        let visible: Arc<[ToolInfo]> = agent.toolbox.infos_for(&extensions).cloned().collect();
        let loaded = agent.deferred_search().map(|_| journal.loaded_tools());
        let tools = shown(&agent, &visible, loaded.as_deref());
        let shown_loaded = loaded.map_or(0, |loaded| loaded.len());
        let step = Arc::new(std::sync::Mutex::new(StepState::default()));
        let failed = FirstFailure::default();
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
            shown_loaded,
            extensions,
            tx,
            step,
            failed,
            costs: ToolCosts::default(),
            paused,
            reported: None,
            estimated: (0, 0),
            compaction_failed: None,
            current: StepTools {
                tools: Arc::clone(&tools),
                choice: ToolChoice::Auto,
                active: None,
            },
            steps,
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
            if self.journal.counts().steps >= self.agent.max_steps {
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
            self.journal.turn_started();
            let (answer, begun) = futures_util::future::join(self.answer(), begin).await;
            if let Err(err) = begun {
                fail(&self.failed, run_error(err));
            }
            let ModelAnswer {
                text,
                reasoning,
                calls,
                finish,
                cut,
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
            if let Some(cut) = cut {
                return self.cut(text, reasoning, cut).await;
            }
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
            let made = self.journal.counts().tool_calls;
            let over_limit = made + calls.len() > self.agent.max_tool_calls;
            let has_calls = !calls.is_empty();
            let runs_tools = has_calls && cut_off.is_none() && !over_limit && !gives_answer;
            // The answer and the step it plans (its calls, named by id,
            // counted as made) are stored before any of its calls starts.
            let planned = match runs_tools {
                true => calls.iter().map(|call| call.id.clone()).collect(),
                false => Vec::new(),
            };
            // An answer after a paused one goes on with it: one message.
            let paused = !has_calls && finish == Some(FinishReason::Paused);
            let continues = std::mem::replace(&mut self.paused, paused);
            // The message takes the calls; a path that answers them itself
            // (an answer cut off, a typed answer, calls over the limit)
            // keeps them.
            let answers_calls =
                cut_off.is_some() || self.agent.output.is_some() || (over_limit && !gives_answer);
            let mut kept = match answers_calls {
                true => calls.clone(),
                false => Vec::new(),
            };
            let message = Message::Assistant {
                content: (!text.is_empty()).then_some(text),
                tool_calls: calls,
                reasoning,
            };
            let answered = self.journal.answered(message, continues, planned);
            if let Err(err) = answered.await {
                fail(&self.failed, run_error(err));
            }
            if let Some((stop, why)) = cut_off {
                let err = ToolError::cancelled(format!("not run: {why}"));
                self.refuse(kept, err).await;
                return stop;
            }
            if paused {
                // The provider paused a long turn: the answer so far is in
                // the history, and asking again lets the model go on.
                continue;
            }
            if let Some(output) = self.agent.output.clone() {
                match self
                    .typed_answer(&output, text_of_last(&self.journal), kept)
                    .await
                {
                    TypedOutcome::Done(stop) => return stop,
                    TypedOutcome::Again => continue,
                    // The answer's calls, as they were (never none).
                    TypedOutcome::Calls(rest) => kept = rest,
                }
            }
            if !has_calls {
                return StopReason::Finished;
            }
            if over_limit && !gives_answer {
                let limit = self.agent.max_tool_calls;
                let err = ToolError::new(
                    ErrorKind::Denied,
                    format!("not run: this run's limit of {limit} tool calls was reached"),
                );
                self.refuse(kept, err).await;
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
        let counts = self.journal.counts();
        if let Some(usage) = &counts.usage {
            usage.record_on(&span);
        }
        span.record("toolstack.agent.steps", int(counts.steps as u64));
        span.record("toolstack.agent.stop", stop.as_str());
        let (retries, outage_ms) = self.journal.store_stats();
        if retries > 0 {
            span.record("toolstack.store.retries", int(retries));
            span.record("toolstack.store.outage_ms", int(outage_ms));
        }
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
            if let Err(err) = self.journal.end(ended).await {
                // The run has ended anyway; a resume will find it mid-way.
                tracing::warn!(error = %err, "the end of the run was not stored");
            }
        }
        let messages = self.journal.take_messages();
        let Run {
            tx,
            costs,
            journal,
            output,
            ..
        } = self;
        drop(journal);
        let done = AgentDone {
            messages: Arc::try_unwrap(messages).unwrap_or_else(|shared| (*shared).clone()),
            usage: counts.usage,
            steps: counts.steps,
            stop,
            tool_costs: costs.into_costs(),
            output,
        };
        let _ = tx.send(AgentEvent::Done(done)).await;
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

    /// Whether a guardrail raised on a call of this run.
    fn guardrail_raised(&self) -> bool {
        self.step.lock().unwrap_or_else(|p| p.into_inner()).raised
    }
}
