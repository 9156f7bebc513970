//! A typed answer: decoded, checked, asked again, or the run ends.

use crate::model::ModelService;
use crate::model::{Message, ToolCall};
use crate::{ToolError, ToolResult};

use crate::agent::event::{AgentEvent, StopReason};
use crate::agent::journal::{run_error, RunJournal};
use crate::agent::output::{OutputMode, TypedOutput, FINAL_ANSWER_TOOL};
use crate::agent::step_state::fail;

use super::Run;

impl<M> Run<M>
where
    M: ModelService,
{
    /// The typed answer in a model's answer, when the agent asks for one:
    /// `text` decoded (natively), or the final-answer call's arguments
    /// (in [`OutputMode::Tool`]). One that decodes ends the run; one that
    /// does not goes back to the model with the error (its call answered
    /// with it, or a message after the text), up to the retries allowed.
    pub(super) async fn typed_answer(
        &mut self,
        output: &TypedOutput,
        text: Option<String>,
        calls: Vec<ToolCall>,
    ) -> TypedOutcome {
        let (answer, calls) = match output.mode {
            OutputMode::Tool => match calls.iter().position(|c| c.name == FINAL_ANSWER_TOOL) {
                Some(at) => (Some(calls[at].arguments.clone()), calls),
                None if calls.is_empty() => (None, calls),
                None => return TypedOutcome::Calls(calls),
            },
            _ if !calls.is_empty() => return TypedOutcome::Calls(calls),
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
                TypedOutcome::Done(StopReason::Finished)
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
                TypedOutcome::Done(StopReason::OutputInvalid)
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
                TypedOutcome::Again
            }
        }
    }
}

/// What came of an answer, for a run that asks for a typed one.
pub(super) enum TypedOutcome {
    /// The run ends.
    Done(StopReason),
    /// The model is asked again.
    Again,
    /// The answer's calls run as any (no typed answer in it yet).
    Calls(Vec<ToolCall>),
}

/// The text of the last assistant message: the answer just given.
pub(super) fn text_of_last(journal: &RunJournal) -> Option<String> {
    match journal.messages().last() {
        Some(Message::Assistant { content, .. }) => content.clone(),
        _ => None,
    }
}
