//! [`AgentTool`]: an agent wrapped as a tool, so a supervisor agent can
//! delegate to a specialist.
//!
//! Unlike a typed tool, its input follows its own rule on top of the
//! [argument rules](crate::arguments): `{"message": …}`, or plain text taken
//! as the message itself (a model asked to "ask the specialist" often sends
//! just the question). An object without `message`, or whose `message` is
//! not a string, is refused; arguments over
//! [`DEFAULT_MAX_ARGUMENT_BYTES`](crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES)
//! are refused before they are read.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use tower_service::Service;

use super::{Agent, AgentEvent, AgentStream, StopReason};
use crate::model::Message;
use crate::model::ModelService;
use crate::tool::{self, AsIs, ResponseFuture, ResponseStream, Unpinned};
use crate::{Describe, Progress, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest};

/// An [`Agent`] wrapped as a tool: a supervisor agent can delegate to it.
///
/// Input: `{"message": "..."}`; plain text that is not JSON is taken as the
/// message itself. `{"message": 42}` or an object without `message` is an
/// invalid-arguments error naming `message`. While the sub-agent works, its activity
/// streams out as progress items (its text as it is written, each tool call
/// and result); its final answer is the tool's one text item, so the
/// collected [`ToolResult`](crate::ToolResult) is that answer. A sub-agent
/// that fails or stops on a limit ends the stream with an error.
#[derive(Debug, Clone)]
pub struct AgentTool<M> {
    info: Arc<ToolInfo>,
    agent: Agent<M>,
}

impl<M> AgentTool<M> {
    /// Wraps `agent` as the tool `name`, described to the model by
    /// `description`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, agent: Agent<M>) -> Self {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to ask the agent."}},
            "required": ["message"]
        });
        let info = ToolInfo::new(name.into())
            .with_description(description)
            .with_input_schema(schema);
        AgentTool {
            info: Arc::new(info),
            agent,
        }
    }
}

impl<M> Describe for AgentTool<M> {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

/// The message in a call's arguments: `{"message": "..."}`, a JSON string,
/// or the text itself when it is not JSON (or is JSON but not an object).
/// An object must hold `message`, as a string. The text is read by the
/// [argument rules](crate::arguments): empty is `{}`, and text nested too
/// deeply is refused in their words, not taken as a message.
fn message_of(request: &ToolRequest) -> Result<String, ToolError> {
    use serde_json::Value;

    // The value a layer above parsed (a validation's), or parsed here.
    match crate::arguments::parsed(request) {
        Ok(Value::Object(map)) => match map.get("message") {
            Some(Value::String(message)) => Ok(message.clone()),
            Some(other) => Err(ToolError::invalid_arguments(format!(
                "`message` must be a string (what to ask the agent), got {}",
                crate::arguments::kind_of(other)
            ))),
            None => Err(ToolError::invalid_arguments(
                "`message` is required: what to ask the agent",
            )),
        },
        Ok(Value::String(message)) => Ok(message.clone()),
        Err(err) if crate::arguments::refuses_depth(&err) => Err(err),
        Ok(_) | Err(_) => Ok(request.arguments().to_owned()),
    }
}

impl<M> Service<ToolRequest> for AgentTool<M>
where
    M: ModelService,
{
    type Response = ResponseStream<Unpinned<AgentToolStream>, AsIs, ToolOutput>;
    type Error = ToolError;
    /// Runs the agent until it reports anything (its first progress, its
    /// answer) or fails, as every tool opens.
    type Future = ResponseFuture<Unpinned<AgentToolStream>, AsIs, ToolOutput>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        if let Err(err) = crate::arguments::check_size(
            request.arguments(),
            self.info.name(),
            crate::arguments::DEFAULT_MAX_ARGUMENT_BYTES,
        ) {
            return ResponseFuture::failed(err);
        }
        let message = match message_of(&request) {
            Ok(message) => message,
            Err(err) => return ResponseFuture::failed(err),
        };
        if message.trim().is_empty() {
            return ResponseFuture::failed(ToolError::invalid_arguments(
                "`message` is required: what to ask the agent",
            ));
        }
        tool::open_at_first_item(AgentToolStream {
            // The caller's extensions reach the sub-agent's model and tools.
            events: self
                .agent
                .run_with(vec![Message::user(message)], request.extensions().clone()),
            reports: 0,
            done: false,
        })
    }
}

/// The response stream of an [`AgentTool`].
#[derive(Debug)]
pub struct AgentToolStream {
    events: AgentStream,
    reports: u64,
    done: bool,
}

impl AgentToolStream {
    fn progress(&mut self, message: String) -> ToolItem {
        self.reports += 1;
        let mut progress = Progress::new(self.reports as f64);
        progress.message = Some(message);
        Ok(ToolOutput::progress(progress))
    }
}

impl Stream for AgentToolStream {
    type Item = ToolItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let Some(event) = ready!(Pin::new(&mut self.events).poll_next(cx)) else {
                self.done = true;
                return Poll::Ready(Some(Err(ToolError::failed(
                    "the agent ended without an answer",
                ))));
            };
            let item = match event {
                AgentEvent::TextDelta(text) => self.progress(text),
                AgentEvent::ToolCall(call) => {
                    self.progress(format!("calling `{}` {}", call.name, call.arguments))
                }
                AgentEvent::ToolResult { name, result, .. } => {
                    let outcome = if result.is_error { "failed" } else { "done" };
                    self.progress(format!("`{name}` {outcome}"))
                }
                AgentEvent::Error(err) => {
                    self.done = true;
                    Err(err)
                }
                AgentEvent::Done(done) => {
                    self.done = true;
                    if done.stop != StopReason::Finished {
                        Err(ToolError::failed(format!(
                            "the agent stopped before answering: {:?}",
                            done.stop
                        )))
                    } else if let Some(value) = done.output {
                        // A typed answer is the tool's structured output.
                        Ok(ToolOutput::json(value))
                    } else {
                        let answer = match done.messages.last() {
                            Some(Message::Assistant {
                                content: Some(text),
                                ..
                            }) => text.clone(),
                            _ => String::new(),
                        };
                        Ok(ToolOutput::text(answer))
                    }
                }
                _ => continue,
            };
            return Poll::Ready(Some(item));
        }
    }
}
