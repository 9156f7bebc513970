//! [`Accumulator`]: tool-call fragments, streamed by index, folded into
//! complete [`ToolCall`]s — robust to any split of the argument text and to
//! interleaved parallel calls, never finished early just because the
//! arguments already parse, and bounded: an index a model (or a hostile
//! endpoint) sends is checked before it sizes anything.

use std::fmt;

use super::{ToolCall, ToolCallDelta};

/// The most tool calls one model answer may hold: a fragment whose index is
/// this or more is refused with [`AccumulateError::TooManyCalls`].
///
/// Real answers hold a handful of parallel calls; the bound is what keeps a
/// fragment with `"index": 4294967295` from sizing the accumulator's table
/// to four billion slots.
pub const MAX_TOOL_CALLS_PER_ANSWER: usize = 128;

/// Folds tool-call fragments by index into complete calls.
///
/// Fragments of several calls may interleave; the id is taken from
/// whichever fragment carries it. The arguments are the fragments' text
/// joined in order. A call is complete only when the response ends
/// ([`finish`](Self::finish)): arguments that already parse as JSON are not
/// taken as a sign that no more fragments will come.
///
/// # The name
///
/// OpenAI-compatible servers send a call's name in three ways: whole, once,
/// in the first fragment (OpenAI itself); in pieces, before the arguments
/// (`"get_"`, `"weather"`); or whole again in every fragment (a few
/// servers re-send the call's id and name with each argument piece). The
/// pieces are joined, except that a name fragment *equal to the whole name
/// so far* is a repeat, and dropped, when
///
/// * it carries the call's id as well (the server re-sends the call's
///   header), or
/// * argument text has already arrived (a model writes a call's name
///   before its arguments, so the name was complete).
///
/// So `"ab"` then `"ab"` before any argument text and without the id is
/// `"abab"`, while a server re-sending `"ab"` with the id or alongside the
/// arguments still gives `"ab"`.
///
/// ```
/// use toolstack::model::{Accumulator, ToolCallDelta};
///
/// let mut acc = Accumulator::new();
/// acc.push(&ToolCallDelta::new(0).id("c1").name("get_"))?;
/// acc.push(&ToolCallDelta::new(0).name("weather").arguments("{}"))?;
/// acc.push(&ToolCallDelta::new(1).id("c2").name("clock"))?;
/// acc.push(&ToolCallDelta::new(1).id("c2").name("clock").arguments("{}"))?;
/// let calls = acc.finish()?;
/// assert_eq!((calls[0].name.as_str(), calls[1].name.as_str()), ("get_weather", "clock"));
///
/// let mut acc = Accumulator::new();
/// assert!(acc.push(&ToolCallDelta::new(u32::MAX).name("x")).is_err());
/// # Ok::<(), toolstack::model::AccumulateError>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct Accumulator {
    // Indexed by the fragment's index: dense in practice, and never longer
    // than `MAX_TOOL_CALLS_PER_ANSWER`.
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
    ///
    /// A fragment whose index is [`MAX_TOOL_CALLS_PER_ANSWER`] or more is
    /// refused, and nothing is stored.
    pub fn push(&mut self, delta: &ToolCallDelta) -> Result<Pushed, AccumulateError> {
        let index = usize::try_from(delta.index)
            .ok()
            .filter(|&index| index < MAX_TOOL_CALLS_PER_ANSWER)
            .ok_or(AccumulateError::TooManyCalls {
                index: u64::from(delta.index),
                max: MAX_TOOL_CALLS_PER_ANSWER,
            })?;
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
        let id = delta.id.as_deref().filter(|id| !id.is_empty());
        if let Some(name) = delta.name.as_deref().filter(|name| !name.is_empty()) {
            let repeat = call.name == name
                && (id.is_some_and(|id| call.id.as_deref() == Some(id))
                    || !call.arguments.is_empty());
            if !repeat {
                call.name.push_str(name);
            }
        }
        if let Some(id) = id {
            if call.id.as_deref() != Some(id) {
                call.id = Some(id.to_owned());
            }
        }
        call.arguments.push_str(&delta.arguments);
        Ok(pushed)
    }

    /// The id and name of call `index` so far, if it has started.
    pub fn get(&self, index: u32) -> Option<(Option<&str>, &str)> {
        let call = self.calls.get(usize::try_from(index).ok()?)?.as_ref()?;
        Some((call.id.as_deref(), &call.name))
    }

    /// Whether no fragment has arrived.
    pub fn is_empty(&self) -> bool {
        self.calls.iter().all(Option::is_none)
    }

    /// The complete calls, in index order. A call that never got an id gets
    /// `call_<index>`; one that never got a name keeps an empty name, so
    /// that it goes to the toolbox like any other and comes back to the
    /// model as an unknown tool (listing the tools it may call) instead of
    /// failing the whole answer.
    pub fn finish(self) -> Result<Vec<ToolCall>, AccumulateError> {
        let mut calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls.into_iter().enumerate() {
            let Some(call) = call else { continue };
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
    /// A fragment's index was beyond the most calls one answer may hold
    /// ([`MAX_TOOL_CALLS_PER_ANSWER`]).
    TooManyCalls {
        /// The index the fragment carried.
        index: u64,
        /// The most calls one answer may hold.
        max: usize,
    },
}

impl fmt::Display for AccumulateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccumulateError::TooManyCalls { index, max } => write!(
                f,
                "a tool-call fragment had index {index}: one answer may hold at most {max} tool calls"
            ),
        }
    }
}

impl std::error::Error for AccumulateError {}
