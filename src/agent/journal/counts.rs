//! What a run counts — model turns, tool calls, tokens ([`Counts`]) — and
//! the model turn in flight ([`TurnInFlight`]): counted from its ask, recorded
//! with its answer (or the run's end).

use crate::agent::store::{Checkpoint, Record};
use crate::model::Usage;

/// Model turns taken, tool calls made, tokens used: what a run counts.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::agent) struct Counts {
    pub(in crate::agent) steps: usize,
    pub(in crate::agent) tool_calls: usize,
    pub(in crate::agent) usage: Option<Usage>,
}

impl Counts {
    /// The record that sets them.
    pub(super) fn record(self) -> Record {
        Record::Counts {
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
        }
    }

    /// The counts a run's state holds: those last recorded.
    pub(super) fn of(checkpoint: &Checkpoint) -> Self {
        Counts {
            steps: checkpoint.steps,
            tool_calls: checkpoint.tool_calls,
            usage: checkpoint.usage,
        }
    }

    /// These counts with the turn in flight's.
    pub(super) fn with(mut self, turn: &TurnInFlight) -> Self {
        self.steps += usize::from(turn.asked);
        if let Some(used) = turn.usage {
            // Adding up saturates: the sum is the same in any grouping.
            *self.usage.get_or_insert_with(Usage::default) += used;
        }
        self
    }
}

/// The model turn in flight: asked, and the tokens it reported so far (a
/// turn asked again after a break counts once, with the tokens of every
/// try). Counted at once, recorded with the answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TurnInFlight {
    pub(super) asked: bool,
    pub(super) usage: Option<Usage>,
}

impl TurnInFlight {
    /// The model reported `used` tokens.
    pub(super) fn used(&mut self, used: Usage) {
        *self.usage.get_or_insert_with(Usage::default) += used;
    }
}
