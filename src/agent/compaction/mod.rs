//! Compaction: an agent's history made shorter without breaking it — the
//! strategies, what must stay whatever the strategy, and the token estimate
//! that says when a history is too long.
//!
//! A strategy is a [`Compact`]: it takes the history and answers with a
//! shorter one, or `None` when it cannot make it smaller (an estimate no
//! lower than the history's own). A *turn* is one assistant message and
//! the tool results that answer its calls.
//!
//! | strategy | what it replaces | the model asked |
//! |---|---|---|
//! | [`ElideToolResults`] | the text of tool results older than the last N turns, by a notice naming the call and its size | no |
//! | [`KeepFirstAndLast`] | everything before the last N turns but the system messages and the first user message, by one note saying how many messages went | no |
//! | [`Summarize`] | the same messages, by one summary a model writes (any model service, e.g. a cheaper one), bounded in time | yes |
//! | a function `Fn(&[Message]) -> Result<Option<Vec<Message>>, CompactionError>` | what it likes: its result is checked by [`check_compaction`] before it is used | — |
//!
//! What must stay true of a history, whatever the strategy ([`check`]):
//! every tool call of an assistant message has exactly one result, among
//! the tool results right after it (both the OpenAI and the Anthropic APIs
//! refuse anything between a call and its result), and every tool result
//! answers a call of the assistant message before it. And of a compaction
//! ([`check_compaction`]): the system messages stay; the latest user
//! message stays; reasoning blocks stay with their assistant message
//! (Anthropic checks the signed blocks of a turn that called tools), never
//! split from it or moved. The built-in strategies cut only at turn
//! boundaries and never touch an assistant message, so their results pass
//! both checks; they refuse a history that does not pass [`check`]
//! ([`CompactionError::InvalidHistory`]).
//!
//! A note a strategy inserts (`[12 earlier messages were removed to save
//! context]`, `[summary of 12 earlier messages]`) is a user message, and
//! not "the latest user message" for the next compaction, which replaces
//! it in turn and counts the messages it stood for.
//!
//! ```
//! use toolstack::agent::compaction::{check, estimate_tokens, Compact, KeepFirstAndLast};
//! use toolstack::model::{Message, ToolCall};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let read = |id: &str| ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() };
//! let history = vec![
//!     Message::system("You are terse."),
//!     Message::user("Read both files."),
//!     Message::assistant_calls(vec![read("call_1")]),
//!     Message::tool("call_1", "a".repeat(4096)),
//!     Message::assistant_calls(vec![read("call_2")]),
//!     Message::tool("call_2", "b".repeat(4096)),
//!     Message::assistant("Both are read."),
//! ];
//! let compacted = KeepFirstAndLast::new(1).compact(&history).await?.expect("a shorter history");
//! assert_eq!(compacted, [
//!     Message::system("You are terse."),
//!     Message::user("Read both files."),
//!     Message::user("[4 earlier messages were removed to save context]"),
//!     Message::assistant("Both are read."),
//! ]);
//! check(&compacted)?;
//! assert!(estimate_tokens(&compacted) < estimate_tokens(&history));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::model::Message;
use crate::ToolError;

mod check;
mod elide;
mod estimate;
mod keep;
mod plan;
mod summarize;

pub use self::check::{check, check_compaction};
pub use self::elide::{ElideToolResults, KeepElided};
pub use self::estimate::estimate_tokens;
pub use self::keep::KeepFirstAndLast;
pub use self::plan::is_note;
pub use self::summarize::{Summarize, DEFAULT_SUMMARY_PROMPT, DEFAULT_SUMMARY_TIMEOUT};

/// A compaction strategy: returns the compacted history, or `Ok(None)`
/// when it cannot make it smaller.
///
/// Implemented by the built-in strategies and by any synchronous function
/// of the history (a user's own strategy):
///
/// ```
/// use toolstack::agent::compaction::{Compact, CompactionError};
/// use toolstack::model::Message;
///
/// /// Drops the assistant's answers that called no tool.
/// fn no_chatter(messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
///     let kept: Vec<Message> = messages
///         .iter()
///         .filter(|m| !matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.is_empty()))
///         .cloned()
///         .collect();
///     Ok((kept.len() < messages.len()).then_some(kept))
/// }
///
/// fn strategy(_: impl Compact) {}
/// strategy(no_chatter);
/// ```
pub trait Compact: Send + Sync + 'static {
    /// Compacts `messages`.
    fn compact<'a>(
        &'a self,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<Vec<Message>>, CompactionError>>;
}

impl<F> Compact for F
where
    F: Fn(&[Message]) -> Result<Option<Vec<Message>>, CompactionError> + Send + Sync + 'static,
{
    fn compact<'a>(
        &'a self,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<Vec<Message>>, CompactionError>> {
        Box::pin(std::future::ready(self(messages)))
    }
}

/// What a run does when its history could not be compacted — the
/// strategy failed (a summary model down or too slow), or its result was
/// refused (it would drop the latest user message, or break a call from
/// its result): [`Agent::compaction_failure`](super::Agent::compaction_failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnCompactionError {
    /// The run goes on with its history as it is, with a warning on the
    /// `compact` span (the default): the next model call may be refused
    /// for its length, which is then tried once more after a compaction.
    #[default]
    Continue,
    /// The run ends ([`StopReason::CompactionFailed`](super::StopReason::CompactionFailed),
    /// after an [`AgentEvent::Error`](super::AgentEvent::Error) naming why).
    Stop,
}

/// Why a history was not compacted.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CompactionError {
    /// The summary model failed: refused the request, broke off its
    /// answer, or answered with no text.
    Model(ToolError),
    /// The summary model did not answer within this bound.
    TimedOut(Duration),
    /// The compacted history does not hold the latest user message.
    WouldDropLatestUserMessage,
    /// The compacted history breaks what must stay (a call without its
    /// result, a system message dropped, reasoning split from its
    /// message): what is wrong.
    Broken(String),
    /// The history given to the strategy is not well-formed ([`check`]):
    /// what is wrong. A strategy that cuts at turn boundaries cannot find
    /// them in it.
    InvalidHistory(String),
    /// A user's strategy failed for a reason of its own.
    Failed(ToolError),
}

impl fmt::Display for CompactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompactionError::Model(err) => write!(f, "the summary model: {err}"),
            CompactionError::TimedOut(bound) => {
                write!(f, "the summary model did not answer within {bound:?}")
            }
            CompactionError::WouldDropLatestUserMessage => {
                f.write_str("the compaction would drop the latest user message")
            }
            CompactionError::Broken(why) => {
                write!(f, "the compacted history breaks what must stay: {why}")
            }
            CompactionError::InvalidHistory(why) => {
                write!(f, "the history to compact is not well-formed: {why}")
            }
            CompactionError::Failed(err) => write!(f, "the compaction strategy: {err}"),
        }
    }
}

impl std::error::Error for CompactionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CompactionError::Model(err) | CompactionError::Failed(err) => Some(err),
            _ => None,
        }
    }
}
