//! [`ScriptedModel`]: a deterministic model that plays planned [`Turn`]s —
//! text streamed a word at a time, tool calls in fragments — so examples
//! and tests run with no network and no key.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{ready, Ready};
use futures_util::stream::{iter, Iter};
use tower_service::Service;

use super::{ChatRequest, FinishReason, ModelDelta, ToolCallDelta, Usage};
use crate::{ErrorKind, ToolError};

/// One planned answer of a [`ScriptedModel`]: text and tool calls, and
/// how it ends — a finish reason and usage, or a fault mid-stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    text: Vec<String>,
    calls: Vec<(String, String)>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    fault: Option<ToolError>,
}

// `ToolError`'s equality (kind and message) is an equivalence.
impl Eq for Turn {}

impl Turn {
    /// An empty answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds text to the answer (streamed a word at a time).
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text.push(text.into());
        self
    }

    /// Adds a tool call with its argument text exactly as given (it need
    /// not be valid JSON: a model can write anything).
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.calls.push((name.into(), arguments.into()));
        self
    }

    /// Ends the answer with `reason` (by default `stop`, or `tool_calls`
    /// when the turn has calls) — say, [`FinishReason::Length`] for an
    /// answer cut off at the token limit.
    pub fn finish_reason(mut self, reason: FinishReason) -> Self {
        self.finish = Some(reason);
        self
    }

    /// Reports `usage` at the end of the answer, in place of the default
    /// (the request's message count as prompt tokens, the answer's delta
    /// count as completion tokens).
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Breaks the answer off with `error` after its text and tool calls,
    /// in place of the finish reason and usage: a connection that drops
    /// mid-stream. A turn with nothing else fails before its first delta.
    pub fn fail(mut self, error: ToolError) -> Self {
        self.fault = Some(error);
        self
    }
}

/// The stream of a [`ScriptedModel`] answer.
pub type ScriptedStream = Iter<std::vec::IntoIter<Result<ModelDelta, ToolError>>>;

/// A deterministic model that replays planned [`Turn`]s, one per call, in
/// order — the offline default for examples and tests.
///
/// Each answer is streamed the way a real model streams: text a word at a
/// time, each tool call as fragments (id and name in the first, the
/// arguments cut every few characters), then the finish reason and usage
/// (or the turn's [fault](Turn::fail)); the usage is the
/// [turn's](Turn::usage), or by default the request's message count as
/// prompt tokens and the answer's delta count as completion tokens.
/// Call ids are `call_<turn>_<index>`. Clones share the position in the
/// script; a call after the last turn fails with kind unavailable.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    turns: Arc<[Turn]>,
    next: Arc<AtomicUsize>,
    fragment_chars: usize,
}

impl ScriptedModel {
    /// A model that answers with `turns`, in order.
    pub fn new(turns: impl IntoIterator<Item = Turn>) -> Self {
        ScriptedModel {
            turns: turns.into_iter().collect(),
            next: Arc::new(AtomicUsize::new(0)),
            fragment_chars: 7,
        }
    }

    /// Cuts argument text every `chars` characters (default 7).
    pub fn fragment_chars(mut self, chars: usize) -> Self {
        self.fragment_chars = chars.max(1);
        self
    }

    /// How many turns have been played.
    pub fn turns_played(&self) -> usize {
        self.next.load(Ordering::SeqCst).min(self.turns.len())
    }

    fn replay(
        &self,
        number: usize,
        turn: &Turn,
        request: &ChatRequest,
    ) -> Vec<Result<ModelDelta, ToolError>> {
        let mut deltas = Vec::new();
        for text in &turn.text {
            let mut start = 0;
            for (i, c) in text.char_indices() {
                if c == ' ' && i > start {
                    deltas.push(Ok(ModelDelta::Text(text[start..i].to_owned())));
                    start = i;
                }
            }
            if start < text.len() {
                deltas.push(Ok(ModelDelta::Text(text[start..].to_owned())));
            }
        }
        for (index, (name, arguments)) in turn.calls.iter().enumerate() {
            let chars: Vec<char> = arguments.chars().collect();
            let mut pieces = chars
                .chunks(self.fragment_chars)
                .map(|c| c.iter().collect::<String>());
            let first = ToolCallDelta::new(index as u32)
                .id(format!("call_{number}_{index}"))
                .name(name.clone())
                .arguments(pieces.next().unwrap_or_default());
            deltas.push(Ok(ModelDelta::ToolCall(first)));
            for piece in pieces {
                deltas.push(Ok(ModelDelta::ToolCall(
                    ToolCallDelta::new(index as u32).arguments(piece),
                )));
            }
        }
        if let Some(fault) = &turn.fault {
            deltas.push(Err(fault.clone()));
            return deltas;
        }
        let reason = turn.finish.clone().unwrap_or(if turn.calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
        let completion_tokens = deltas.len() as u64;
        deltas.push(Ok(ModelDelta::Finish(reason)));
        let usage = turn
            .usage
            .unwrap_or_else(|| Usage::new(request.messages.len() as u64, completion_tokens));
        deltas.push(Ok(ModelDelta::Usage(usage)));
        deltas
    }
}

impl Service<ChatRequest> for ScriptedModel {
    type Response = ScriptedStream;
    type Error = ToolError;
    type Future = Ready<Result<ScriptedStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let number = self.next.fetch_add(1, Ordering::SeqCst);
        ready(match self.turns.get(number) {
            Some(turn) => Ok(iter(self.replay(number, turn, &request))),
            None => Err(ToolError::new(
                ErrorKind::Unavailable,
                format!(
                    "the scripted model has no turn left: it was called {} times for a script of {} turns",
                    number + 1,
                    self.turns.len()
                ),
            )),
        })
    }
}
