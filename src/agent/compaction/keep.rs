//! [`KeepFirstAndLast`]: the first user message and the last turns, a note for the rest.

use futures_util::future::BoxFuture;

use crate::model::Message;

use super::check::check;
use super::plan::{removed_note, smaller, Plan};
use super::Compact;
use super::CompactionError;

/// Keeps the system messages, the first user message and the messages
/// from the start of the `last_turns`-th last turn, and puts one user
/// message in place of the rest, saying how many messages were removed:
///
/// ```text
/// [12 earlier messages were removed to save context]
/// ```
///
/// It cuts at a turn's start, never between a call and its result, and
/// never drops the latest user message: when the cut would, it keeps from
/// that message. `None` when nothing would be removed, or when what would
/// be is no larger than the note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepFirstAndLast {
    last_turns: usize,
}

impl KeepFirstAndLast {
    /// Keeps the last `last_turns` turns (and the latest user message).
    pub fn new(last_turns: usize) -> Self {
        KeepFirstAndLast { last_turns }
    }

    fn apply(&self, messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
        check(messages).map_err(CompactionError::InvalidHistory)?;
        let Some(plan) = Plan::new(messages, self.last_turns) else {
            return Ok(None);
        };
        let note = Message::user(removed_note(plan.stands_for));
        Ok(smaller(messages, plan.assemble(messages, note)))
    }
}

impl Compact for KeepFirstAndLast {
    fn compact<'a>(
        &'a self,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<Vec<Message>>, CompactionError>> {
        Box::pin(std::future::ready(self.apply(messages)))
    }
}
