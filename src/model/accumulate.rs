//! [`Accumulator`]: tool-call fragments, streamed by index, folded into
//! complete [`ToolCall`]s — robust to any split of the argument text and to
//! interleaved parallel calls, and never finished early just because the
//! arguments already parse.

use std::fmt;

use super::{ToolCall, ToolCallDelta};

/// Folds tool-call fragments by index into complete calls.
///
/// Fragments of several calls may interleave; the id and name are taken from
/// whichever fragment carries them (a name sent again whole is kept once; a
/// name streamed in pieces is joined). A call is complete only when the
/// response ends ([`finish`](Self::finish)): arguments that already parse as
/// JSON are not taken as a sign that no more fragments will come.
#[derive(Debug, Default, Clone)]
pub struct Accumulator {
    // Indexed by the fragment's index; small and dense in practice.
    calls: Vec<Option<Partial>>,
}

#[derive(Debug, Default, Clone)]
struct Partial {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// What [`Accumulator::push`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The first fragment of a new call.
    Started,
    /// A further fragment of a known call.
    Continued,
}

impl Accumulator {
    /// No call yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one fragment; says whether it started a new call.
    pub fn push(&mut self, delta: &ToolCallDelta) -> Pushed {
        let index = delta.index as usize;
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, || None);
        }
        let slot = &mut self.calls[index];
        let pushed = if slot.is_some() {
            Pushed::Continued
        } else {
            Pushed::Started
        };
        let call = slot.get_or_insert_with(Partial::default);
        if let Some(id) = &delta.id {
            if !id.is_empty() {
                call.id = Some(id.clone());
            }
        }
        if let Some(name) = &delta.name {
            // Most servers send the name once; some repeat it whole in
            // every fragment, a few stream it in pieces.
            if call.name != *name {
                call.name.push_str(name);
            }
        }
        call.arguments.push_str(&delta.arguments);
        pushed
    }

    /// The id and name of call `index` so far, if it has started.
    pub fn get(&self, index: u32) -> Option<(Option<&str>, &str)> {
        let call = self.calls.get(index as usize)?.as_ref()?;
        Some((call.id.as_deref(), &call.name))
    }

    /// Whether no fragment has arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.iter().all(Option::is_none)
    }

    /// The complete calls, in index order. A call that never got a name is
    /// an error; one that never got an id gets `call_<index>`.
    pub fn finish(self) -> Result<Vec<ToolCall>, AccumulateError> {
        let mut calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls.into_iter().enumerate() {
            let Some(call) = call else { continue };
            if call.name.is_empty() {
                return Err(AccumulateError::MissingName { index });
            }
            calls.push(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{index}")),
                name: call.name,
                arguments: call.arguments,
            });
        }
        Ok(calls)
    }
}

/// A tool-call stream that cannot be folded into calls.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccumulateError {
    /// No fragment of call `index` carried the tool's name.
    MissingName {
        /// The call's index in the response.
        index: usize,
    },
}

impl fmt::Display for AccumulateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccumulateError::MissingName { index } => {
                write!(f, "tool call {index} was streamed without a tool name")
            }
        }
    }
}

impl std::error::Error for AccumulateError {}
