//! A model turn: the model called, its deltas streamed as events and folded into an answer.

use std::pin::pin;
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::model::{Accumulator, Message, ModelService, Reasoning, Usage};
use crate::model::{ChatRequest, ContextExceeded, ModelDelta, Pushed, ReasoningDelta};
use crate::{ErrorKind, ToolError};

use crate::agent::event::{AgentEvent, StopReason};
use crate::agent::journal::run_error;
use crate::agent::output::OutputMode;
use crate::agent::search::LoadedTools;
use crate::agent::step_state::fail;
use crate::agent::steps::Asked;

use super::{Cut, ModelAnswer, Run, TurnError};

impl<M> Run<M>
where
    M: ModelService,
{
    /// One model turn: asked again, as often as the agent allows, while it
    /// breaks off with a retryable error after its first delta.
    pub(super) async fn answer(&mut self) -> Result<ModelAnswer, ToolError> {
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
    /// stopped. The model is asked through the run's [`Steps`]: on a
    /// durable backend the turn is a journaled step.
    ///
    /// [`Steps`]: crate::agent::steps::Steps
    pub(super) async fn model_turn(&mut self) -> Result<ModelAnswer, TurnError> {
        let messages = self.journal.messages();
        let sent = messages.len();
        let mut request = ChatRequest::new(Vec::new())
            .with_tool_choice(self.current.choice.clone())
            .with_tools(Arc::clone(&self.current.tools));
        request.messages = messages;
        request.model = self.agent.model_name.clone();
        request.extensions = self.extensions.clone();
        if self.agent.deferred_search().is_some() {
            let loaded = self.journal.loaded_tools();
            request.extensions.insert(LoadedTools(Arc::from(loaded)));
        }
        request.output = self
            .agent
            .output
            .as_ref()
            .filter(|o| o.mode == OutputMode::Native)
            .map(|o| o.schema.clone());
        self.costs.turn_started();
        let model = self.agent.model.clone();
        let ask = move |tx| ask(model, request, tx);
        let Asked {
            answer,
            used,
            models,
        } = self.steps.turn(self.tx.clone(), ask).await;
        // What the model reported is counted once the turn is in (on a
        // replay, as the journal kept it).
        for used in used {
            if used.prompt_tokens > 0 {
                self.reported = Some((used.prompt_tokens, sent));
            }
            self.journal.used(used);
            self.costs.usage(used);
        }
        for model in &models {
            self.costs.model(model);
        }
        answer
    }

    /// An answer cut mid-stream: recorded as any answer, its text followed
    /// by a note that says it was cut and why — in the message itself, so
    /// the model reading the history on (a session's next message) and a
    /// person reading it both see the answer is unfinished —, its begun
    /// calls not run; then the error, and the run stops.
    pub(super) async fn cut(
        &mut self,
        text: String,
        reasoning: Vec<Reasoning>,
        cut: Cut,
    ) -> StopReason {
        let Cut { error, calls_begun } = cut;
        let calls = match calls_begun {
            true => "; the tool calls it had begun were not run",
            false => "",
        };
        let note = format!(
            "[the rest of this answer was cut by a spend limit: {}{calls}]",
            error.message()
        );
        let content = match text.is_empty() {
            true => note,
            false => format!("{text}\n\n{note}"),
        };
        let message = Message::Assistant {
            content: Some(content),
            tool_calls: Vec::new(),
            reasoning,
        };
        // A paused answer's continuation goes on with it, cut or not.
        let continues = std::mem::replace(&mut self.paused, false);
        if let Err(err) = self.journal.answered(message, continues, Vec::new()).await {
            fail(&self.failed, run_error(err));
        }
        let _ = self.tx.send(AgentEvent::Error(error)).await;
        StopReason::SpendLimit
    }
}

/// Asks `model` once, streaming its text and tool-call input as events
/// on `tx`: the whole turn, owning what it needs (a durable step's work).
async fn ask<M>(model: M, request: ChatRequest, tx: mpsc::Sender<AgentEvent>) -> Asked
where
    M: ModelService,
{
    let mut used = Vec::new();
    let mut models = Vec::new();
    let answer = fold(model, request, &tx, &mut used, &mut models).await;
    Asked {
        answer,
        used,
        models,
    }
}

/// The model's answer folded: text, reasoning and complete calls, its
/// deltas sent as events; usage reports and model names kept aside.
async fn fold<M>(
    model: M,
    request: ChatRequest,
    tx: &mpsc::Sender<AgentEvent>,
    used: &mut Vec<Usage>,
    models: &mut Vec<String>,
) -> Result<ModelAnswer, TurnError>
where
    M: ModelService,
{
    let answer = model.oneshot(request).await.map_err(|err| TurnError {
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
        let delta = match delta {
            Ok(delta) => delta,
            // A spend limit crossed mid-answer: what was said is kept,
            // cut; its calls (none known complete) are not.
            Err(error)
                if error.kind() == ErrorKind::SpendLimited
                    && !(text.is_empty() && reasoning.is_empty() && calls.is_empty()) =>
            {
                let calls_begun = !calls.is_empty();
                return Ok(ModelAnswer {
                    text,
                    reasoning,
                    calls: Vec::new(),
                    finish: None,
                    cut: Some(Cut { error, calls_begun }),
                });
            }
            Err(error) => return Err(TurnError { error, streamed }),
        };
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
                    let _ = tx.send(started).await;
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
            ModelDelta::Usage(usage) => {
                used.push(usage);
                continue;
            }
            ModelDelta::Finish(reason) => {
                finish = Some(reason);
                continue;
            }
            ModelDelta::Model(model) => {
                models.push(model);
                continue;
            }
        };
        let _ = tx.send(event).await;
    }
    let calls = calls.finish().map_err(|err| TurnError {
        error: ToolError::failed(format!("the model's answer was malformed: {err}"))
            .with_source(err),
        streamed,
    })?;
    Ok(ModelAnswer {
        text,
        reasoning,
        calls,
        finish,
        cut: None,
    })
}
