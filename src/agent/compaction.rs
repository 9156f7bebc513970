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

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tower::ServiceExt;

use crate::model::{
    thousands, ChatRequest, Message, ModelDelta, ModelService, Reasoning, ToolCall,
};
use crate::ToolError;

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

/// Checks that `messages` pairs every call with its result: each tool call
/// of an assistant message has exactly one result among the tool results
/// right after it (call ids unique in the message), and each tool result
/// answers a call of the assistant message before it. The error names
/// what is wrong, by message index and call id.
///
/// ```
/// use toolstack::agent::compaction::check;
/// use toolstack::model::{Message, ToolCall};
///
/// let call = ToolCall { id: "call_1".into(), name: "read".into(), arguments: "{}".into() };
/// let answered = [Message::user("read"), Message::assistant_calls(vec![call.clone()]), Message::tool("call_1", "text")];
/// assert!(check(&answered).is_ok());
/// let unanswered = [Message::user("read"), Message::assistant_calls(vec![call])];
/// assert_eq!(check(&unanswered).unwrap_err(), "message 1: call `call_1` (read) has no result");
/// ```
pub fn check(messages: &[Message]) -> Result<(), String> {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant { tool_calls, .. } => {
                let mut open: Vec<&ToolCall> = Vec::with_capacity(tool_calls.len());
                for call in tool_calls {
                    if open.iter().any(|c| c.id == call.id) {
                        return Err(format!("message {i}: call `{}` is made twice", call.id));
                    }
                    open.push(call);
                }
                let mut j = i + 1;
                while let Some(Message::Tool { tool_call_id, .. }) = messages.get(j) {
                    match open.iter().position(|c| c.id == *tool_call_id) {
                        Some(at) => {
                            open.remove(at);
                        }
                        None if tool_calls.iter().any(|c| c.id == *tool_call_id) => {
                            return Err(format!(
                                "message {j}: a second result of call `{tool_call_id}`"
                            ));
                        }
                        None => {
                            return Err(format!(
                                "message {j}: the result of call `{tool_call_id}` answers no call of the assistant message before it (message {i})"
                            ));
                        }
                    }
                    j += 1;
                }
                if let Some(call) = open.first() {
                    let later = messages[j..].iter().position(
                        |m| matches!(m, Message::Tool { tool_call_id, .. } if *tool_call_id == call.id),
                    );
                    return Err(match later {
                        Some(k) => format!(
                            "message {}: the result of call `{}` is not right after the assistant message that made it (message {i})",
                            j + k,
                            call.id
                        ),
                        None => format!("message {i}: call `{}` ({}) has no result", call.id, call.name),
                    });
                }
                i = j;
            }
            Message::Tool { tool_call_id, .. } => {
                return Err(format!(
                    "message {i}: the result of call `{tool_call_id}` follows no assistant message that made the call"
                ));
            }
            Message::System { .. } | Message::User { .. } => i += 1,
        }
    }
    Ok(())
}

/// Checks a compaction of `before` into `after`: `after` passes [`check`]
/// ([`CompactionError::Broken`] otherwise), keeps the latest user message
/// ([`CompactionError::WouldDropLatestUserMessage`]) — a compaction's own
/// note is not one —, keeps every system message, in order, and keeps
/// each assistant message's reasoning with it, unchanged
/// ([`CompactionError::Broken`]). What an agent runs on a strategy's
/// result before it uses it.
pub fn check_compaction(before: &[Message], after: &[Message]) -> Result<(), CompactionError> {
    check(after).map_err(CompactionError::Broken)?;
    if let Some(latest) = latest_user(before) {
        if !after.contains(&before[latest]) {
            return Err(CompactionError::WouldDropLatestUserMessage);
        }
    }
    let mut kept = after.iter().filter(|m| matches!(m, Message::System { .. }));
    let system = before
        .iter()
        .filter(|m| matches!(m, Message::System { .. }));
    for message in system {
        if !kept.any(|m| m == message) {
            return Err(CompactionError::Broken(
                "a system message was dropped or moved".to_owned(),
            ));
        }
    }
    // An answer that called tools is known by its first call's id; one
    // that called none and kept reasoning must be one of `before`'s.
    let by_call: HashMap<&str, &Message> = before
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some((tool_calls.first()?.id.as_str(), m)),
            _ => None,
        })
        .collect();
    for message in after {
        let Message::Assistant {
            tool_calls,
            reasoning,
            ..
        } = message
        else {
            continue;
        };
        let origin = match tool_calls.first() {
            Some(call) => by_call.get(call.id.as_str()).copied(),
            None if reasoning.is_empty() => continue,
            None => before.iter().find(|m| *m == message),
        };
        match origin {
            Some(Message::Assistant {
                reasoning: original,
                ..
            }) if original != reasoning => {
                return Err(CompactionError::Broken(
                    "the reasoning of an assistant message was changed or split from it".to_owned(),
                ));
            }
            None if !reasoning.is_empty() => {
                return Err(CompactionError::Broken(
                    "reasoning blocks were moved to a message they did not come with".to_owned(),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Tokens a message costs besides its text: its role and framing.
const MESSAGE_TOKENS: u64 = 4;

/// What an image in a tool result is counted as: about what Anthropic
/// charges for the largest image it takes without scaling it down.
const IMAGE_TOKENS: u64 = 1_600;

/// An estimate of the tokens `messages` cost a model: per message, the
/// bytes of its text, tool calls (id, name, arguments) and reasoning
/// (text, withheld data) divided by 4, rounded up, plus 4; and 1,600 per
/// image of a tool result. No tokenizer: about right for English and
/// code, high for most other text — which errs the safe way. The sum of
/// the estimates of two slices is the estimate of both.
///
/// ```
/// use toolstack::agent::compaction::estimate_tokens;
/// use toolstack::model::Message;
///
/// // 10 bytes: 3 tokens, and 4 for the message.
/// assert_eq!(estimate_tokens(&[Message::user("0123456789")]), 7);
/// ```
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

fn message_tokens(message: &Message) -> u64 {
    let (bytes, images) = match message {
        Message::System { content } | Message::User { content } => (content.len(), 0),
        Message::Assistant {
            content,
            tool_calls,
            reasoning,
        } => {
            let calls: usize = tool_calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                .sum();
            let thought: usize = reasoning
                .iter()
                .map(|block| match block {
                    Reasoning::Thinking { text, .. } => text.len(),
                    Reasoning::Redacted { data } => data.len(),
                })
                .sum();
            (content.as_deref().map_or(0, str::len) + calls + thought, 0)
        }
        Message::Tool {
            tool_call_id,
            content,
            images,
            ..
        } => (tool_call_id.len() + content.len(), images.len()),
    };
    (bytes as u64).div_ceil(4) + MESSAGE_TOKENS + images as u64 * IMAGE_TOKENS
}

/// Replaces the text of tool results older than the last `keep_turns`
/// turns with a short notice naming the call and its size:
///
/// ```text
/// [elided: the result of read_file call call_3 (4,096 bytes) was removed to save context; call the tool again if you need it]
/// ```
///
/// With a place to keep them ([`keep_in`](Self::keep_in): the budget
/// layer's output stores, through `toolstack_layers::budget::ElidedOutputs`),
/// nothing is lost to the model: each result is kept first, and its notice
/// says how to read it back —
///
/// ```text
/// [elided: the result of read_file call call_3 (4,096 bytes) was removed to save context; it is kept: read it with read_tool_result {"handle":"9f…","offset":0}]
/// ```
///
/// — and when one cannot be kept, the compaction fails
/// ([`CompactionError::Failed`]) rather than lose it.
///
/// A result keeps its `is_error` flag and loses its images; a result
/// already elided, or shorter than its notice, is left as it is. Nothing
/// else changes, so every call keeps its result. `None` when no result
/// changes.
#[derive(Clone)]
pub struct ElideToolResults {
    keep_turns: usize,
    keeper: Option<Arc<dyn KeepElided>>,
}

impl fmt::Debug for ElideToolResults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElideToolResults")
            .field("keep_turns", &self.keep_turns)
            .field("keeps", &self.keeper.is_some())
            .finish()
    }
}

/// Where [`ElideToolResults`] keeps what it elides, so that the model can
/// read it back ([`ElideToolResults::keep_in`]).
pub trait KeepElided: Send + Sync + 'static {
    /// Keeps `text`, the result of call `call_id` of tool `tool`; returns
    /// how the model reads it back, as its notice says it: the tool call
    /// to make, e.g. `read_tool_result {"handle":"…","offset":0}`.
    fn keep<'a>(
        &'a self,
        tool: &'a str,
        call_id: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<String, CompactionError>>;
}

/// How an elided result's notice begins.
const ELIDED: &str = "[elided: the result of ";

impl ElideToolResults {
    /// Elides the results of every turn but the last `keep_turns`.
    pub fn new(keep_turns: usize) -> Self {
        ElideToolResults {
            keep_turns,
            keeper: None,
        }
    }

    /// Keeps each result it elides in `keeper` first, and tells the model
    /// how to read it back.
    pub fn keep_in(mut self, keeper: impl KeepElided) -> Self {
        self.keeper = Some(Arc::new(keeper));
        self
    }

    async fn apply(&self, messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
        check(messages).map_err(CompactionError::InvalidHistory)?;
        let old = turns_start(messages, self.keep_turns);
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut compacted: Option<Vec<Message>> = None;
        for (i, message) in messages[..old].iter().enumerate() {
            let notice = match message {
                Message::Assistant { tool_calls, .. } => {
                    names.extend(tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str())));
                    continue;
                }
                Message::Tool {
                    tool_call_id,
                    content,
                    is_error,
                    images,
                } if !content.starts_with(ELIDED) => {
                    let name = names.get(tool_call_id.as_str()).copied().unwrap_or("a");
                    let size = size_words(content.len(), images.len());
                    let mut notice = Message::Tool {
                        tool_call_id: tool_call_id.clone(),
                        content: format!("{ELIDED}{name} call {tool_call_id} ({size}) was removed to save context; call the tool again if you need it]"),
                        is_error: *is_error,
                        images: Vec::new(),
                    };
                    // A kept result's notice is longer by its handle and call.
                    let longer = if self.keeper.is_some() { 30 } else { 0 };
                    if message_tokens(&notice) + longer >= message_tokens(message) {
                        continue;
                    }
                    if let Some(keeper) = &self.keeper {
                        let read = keeper.keep(name, tool_call_id, content).await?;
                        if let Message::Tool { content, .. } = &mut notice {
                            *content = format!("{ELIDED}{name} call {tool_call_id} ({size}) was removed to save context; it is kept: read it with {read}]");
                        }
                    }
                    notice
                }
                _ => continue,
            };
            compacted.get_or_insert_with(|| messages.to_vec())[i] = notice;
        }
        Ok(compacted)
    }
}

/// `4,096 bytes`, `4,096 bytes and an image`.
fn size_words(bytes: usize, images: usize) -> String {
    let images = match images {
        0 => String::new(),
        1 => " and an image".to_owned(),
        n => format!(" and {n} images"),
    };
    format!("{} bytes{images}", thousands(bytes as u64))
}

impl Compact for ElideToolResults {
    fn compact<'a>(
        &'a self,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<Vec<Message>>, CompactionError>> {
        Box::pin(self.apply(messages))
    }
}

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

/// The default bound on a [`Summarize`] model's answer: 30 seconds.
pub const DEFAULT_SUMMARY_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of one tool result or one call's arguments a summary
/// model reads: the head, and how many bytes were left out.
const TRANSCRIPT_PART_BYTES: usize = 2_048;

/// The instructions a [`Summarize`] model is given unless set.
pub const DEFAULT_SUMMARY_PROMPT: &str = "You compact the history of a conversation between a user and an AI agent that calls tools, so that the agent can go on with less context. Summarize the transcript you are given as notes for the agent itself: what the user asked for and any constraints they set; what the agent did, and what it found — facts, numbers, names, identifiers, file paths, URLs, the results of tool calls that may matter later; the decisions made; and what was still open or failing. Be concise but keep every detail the agent may need; do not invent anything. Write only the notes, without a preamble, in the language of the conversation. Do not call tools.";

/// Asks a model to summarize the messages before the last `keep_turns`
/// turns (all but the system messages and the first user message), and
/// puts its summary in their place, as one user message marked as such:
///
/// ```text
/// [summary of 12 earlier messages]
/// The user asked for …
/// ```
///
/// The model is any model service — a cheaper one than the agent's will
/// do. It is sent a system message with the instructions
/// ([`DEFAULT_SUMMARY_PROMPT`] unless [set](Self::prompt)) and the
/// messages as one transcript in a user message (no tools: calls and
/// results are text in it, each result's and arguments' first 2 KiB).
/// The whole answer is bounded by [`timeout`](Self::timeout), 30 seconds
/// unless set. The model's failure is [`CompactionError::Model`], no
/// answer in time [`CompactionError::TimedOut`]. Like
/// [`KeepFirstAndLast`], it cuts at a turn's start and keeps the latest
/// user message; `None`, without asking the model, when there is nothing
/// to summarize, and `None` when the summary is no smaller than what it
/// would replace.
///
/// ```
/// use std::time::Duration;
/// use toolstack::agent::compaction::Summarize;
/// use toolstack::model::{ScriptedModel, Turn};
///
/// let model = ScriptedModel::new([Turn::new().text("The user wants a report; two files were read.")]);
/// let strategy = Summarize::new(model, 4).timeout(Duration::from_secs(10));
/// # let _ = strategy;
/// ```
pub struct Summarize<M> {
    // Behind a mutex only to be `Sync` for any model service: it is locked
    // to clone the model, never across an await.
    model: Mutex<M>,
    keep_turns: usize,
    timeout: Duration,
    prompt: Cow<'static, str>,
}

impl<M> Summarize<M> {
    /// Summarizes with `model` everything before the last `keep_turns`
    /// turns.
    pub fn new(model: M, keep_turns: usize) -> Self {
        Summarize {
            model: Mutex::new(model),
            keep_turns,
            timeout: DEFAULT_SUMMARY_TIMEOUT,
            prompt: Cow::Borrowed(DEFAULT_SUMMARY_PROMPT),
        }
    }

    /// Bounds the model's whole answer, from the request to its last
    /// delta, by `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Gives the model `prompt` as its instructions, in place of
    /// [`DEFAULT_SUMMARY_PROMPT`].
    pub fn prompt(mut self, prompt: impl Into<Cow<'static, str>>) -> Self {
        self.prompt = prompt.into();
        self
    }

    fn model(&self) -> M
    where
        M: Clone,
    {
        self.model
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl<M: Clone> Clone for Summarize<M> {
    fn clone(&self) -> Self {
        Summarize {
            model: Mutex::new(self.model()),
            keep_turns: self.keep_turns,
            timeout: self.timeout,
            prompt: self.prompt.clone(),
        }
    }
}

impl<M> fmt::Debug for Summarize<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summarize")
            .field("keep_turns", &self.keep_turns)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<M: ModelService> Compact for Summarize<M> {
    fn compact<'a>(
        &'a self,
        messages: &'a [Message],
    ) -> BoxFuture<'a, Result<Option<Vec<Message>>, CompactionError>> {
        Box::pin(async move {
            check(messages).map_err(CompactionError::InvalidHistory)?;
            let Some(plan) = Plan::new(messages, self.keep_turns) else {
                return Ok(None);
            };
            let request = ChatRequest::new(vec![
                Message::system(self.prompt.clone()),
                Message::user(transcript(messages, &plan)),
            ]);
            let answer = summary(self.model(), request);
            let summary = tokio::time::timeout(self.timeout, answer)
                .await
                .map_err(|_| CompactionError::TimedOut(self.timeout))??;
            let note = Message::user(format!(
                "{}\n{}",
                summary_header(plan.stands_for),
                summary.trim()
            ));
            Ok(smaller(messages, plan.assemble(messages, note)))
        })
    }
}

/// The text of `model`'s answer to `request`.
async fn summary<M: ModelService>(
    model: M,
    request: ChatRequest,
) -> Result<String, CompactionError> {
    let answer = model
        .oneshot(request)
        .await
        .map_err(|err| CompactionError::Model(err.into()))?;
    let mut answer = std::pin::pin!(answer);
    let mut text = String::new();
    while let Some(delta) = answer.next().await {
        if let ModelDelta::Text(piece) = delta.map_err(CompactionError::Model)? {
            text.push_str(&piece);
        }
    }
    if text.trim().is_empty() {
        return Err(CompactionError::Model(ToolError::failed(
            "the summary model answered with no text",
        )));
    }
    Ok(text)
}

/// The messages a plan removes, as the text a summary model reads.
fn transcript(messages: &[Message], plan: &Plan) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "The transcript of {} earlier messages to summarize:\n",
        plan.stands_for
    );
    for (i, message) in messages[..plan.cut].iter().enumerate() {
        if !plan.removed[i] {
            continue;
        }
        out.push('\n');
        let _ = match message {
            Message::User { content } => writeln!(out, "user: {content}"),
            Message::System { content } => writeln!(out, "system: {content}"),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                    let _ = writeln!(out, "assistant: {text}");
                }
                for call in tool_calls {
                    let _ = writeln!(
                        out,
                        "assistant called {} (call {}) with: {}",
                        call.name,
                        call.id,
                        head(&call.arguments)
                    );
                }
                Ok(())
            }
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                images,
            } => {
                let failed = if *is_error { ", failed" } else { "" };
                let images = match images.len() {
                    0 => String::new(),
                    n => format!(" [{n} image(s) not shown]"),
                };
                writeln!(
                    out,
                    "result of call {tool_call_id}{failed}: {}{images}",
                    head(content)
                )
            }
        };
    }
    out
}

/// `text`, or its first [`TRANSCRIPT_PART_BYTES`] and how many more there
/// were.
fn head(text: &str) -> Cow<'_, str> {
    if text.len() <= TRANSCRIPT_PART_BYTES {
        return Cow::Borrowed(text);
    }
    let end = text.floor_char_boundary(TRANSCRIPT_PART_BYTES);
    Cow::Owned(format!(
        "{} … [{} more bytes]",
        &text[..end],
        thousands((text.len() - end) as u64)
    ))
}

/// What a strategy that replaces older messages by one note does to a
/// history: where the kept tail starts (`cut`), which messages before it
/// go (all but the system messages and the first user message), and how
/// many messages the note stands for (an earlier note counting for the
/// messages it stood for).
struct Plan {
    cut: usize,
    removed: Vec<bool>,
    stands_for: usize,
}

impl Plan {
    /// The plan that keeps the last `keep_turns` turns and the latest user
    /// message; `None` when it would remove nothing.
    fn new(messages: &[Message], keep_turns: usize) -> Option<Plan> {
        let first = first_user(messages);
        let mut cut = turns_start(messages, keep_turns);
        if let Some(latest) = latest_user(messages) {
            // The first user message stays anyway.
            if latest < cut && Some(latest) != first {
                cut = latest;
            }
        }
        let removed: Vec<bool> = messages[..cut]
            .iter()
            .enumerate()
            .map(|(i, m)| !matches!(m, Message::System { .. }) && Some(i) != first)
            .collect();
        let stands_for = messages[..cut]
            .iter()
            .zip(&removed)
            .filter(|(_, removed)| **removed)
            .map(|(m, _)| note_stands_for(m).unwrap_or(1))
            .sum();
        (stands_for > 0).then_some(Plan {
            cut,
            removed,
            stands_for,
        })
    }

    /// The history with the removed messages replaced by `note`, where the
    /// first of them was.
    fn assemble(&self, messages: &[Message], note: Message) -> Vec<Message> {
        let kept = self.removed.iter().filter(|r| !**r).count();
        let mut out = Vec::with_capacity(kept + 1 + messages.len() - self.cut);
        let mut note = Some(note);
        for (message, removed) in messages[..self.cut].iter().zip(&self.removed) {
            if *removed {
                out.extend(note.take());
            } else {
                out.push(message.clone());
            }
        }
        out.extend_from_slice(&messages[self.cut..]);
        out
    }
}

/// `compacted` if it is estimated smaller than `messages`.
fn smaller(messages: &[Message], compacted: Vec<Message>) -> Option<Vec<Message>> {
    (estimate_tokens(&compacted) < estimate_tokens(messages)).then_some(compacted)
}

/// Where the last `keep_turns` turns start: the index of the
/// `keep_turns`-th last assistant message; the end when `keep_turns` is
/// 0, the start when there are fewer turns.
fn turns_start(messages: &[Message], keep_turns: usize) -> usize {
    let Some(nth) = keep_turns.checked_sub(1) else {
        return messages.len();
    };
    messages
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, m)| matches!(m, Message::Assistant { .. }))
        .nth(nth)
        .map_or(0, |(i, _)| i)
}

fn is_user(message: &Message) -> bool {
    matches!(message, Message::User { .. }) && note_stands_for(message).is_none()
}

/// The first user message that is not a compaction's note.
fn first_user(messages: &[Message]) -> Option<usize> {
    messages.iter().position(is_user)
}

/// The latest user message that is not a compaction's note.
fn latest_user(messages: &[Message]) -> Option<usize> {
    messages.iter().rposition(is_user)
}

fn removed_note(n: usize) -> String {
    match n {
        1 => "[1 earlier message was removed to save context]".to_owned(),
        n => format!("[{n} earlier messages were removed to save context]"),
    }
}

fn summary_header(n: usize) -> String {
    match n {
        1 => "[summary of 1 earlier message]".to_owned(),
        n => format!("[summary of {n} earlier messages]"),
    }
}

/// Whether `message` is a note a compaction put in (a removal note or a
/// summary), not something the user said.
pub fn is_note(message: &Message) -> bool {
    note_stands_for(message).is_some()
}

/// How many messages `message` stands for, if it is a compaction's note:
/// a removal note (all of it) or a summary (its first line).
fn note_stands_for(message: &Message) -> Option<usize> {
    let Message::User { content } = message else {
        return None;
    };
    let (n, rest) = match content.strip_prefix("[summary of ") {
        Some(summary) => {
            let (n, rest) = leading_number(summary)?;
            let header = rest.split_once('\n').map_or(rest, |(header, _)| header);
            (n, header)
        }
        None => leading_number(content.strip_prefix('[')?)?,
    };
    let expected = match (content.starts_with("[summary of "), n) {
        (true, 1) => " earlier message]",
        (true, _) => " earlier messages]",
        (false, 1) => " earlier message was removed to save context]",
        (false, _) => " earlier messages were removed to save context]",
    };
    (rest == expected).then_some(n)
}

fn leading_number(text: &str) -> Option<(usize, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let n = text[..digits].parse().ok()?;
    Some((n, &text[digits..]))
}
