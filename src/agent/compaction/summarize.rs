//! [`Summarize`]: older messages replaced by a model's notes.

use std::borrow::Cow;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tower::ServiceExt;

use crate::model::{thousands, ChatRequest, Message, ModelDelta, ModelService};
use crate::ToolError;

use super::check::check;
use super::plan::{smaller, summary_header, Plan};
use super::Compact;
use super::CompactionError;

/// The default bound on a [`Summarize`] model's answer: 30 seconds.
pub const DEFAULT_SUMMARY_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of one tool result or one call's arguments a summary
/// model reads: the head, and how many bytes were left out.
pub(super) const TRANSCRIPT_PART_BYTES: usize = 2_048;

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
/// [`KeepFirstAndLast`](super::KeepFirstAndLast), it cuts at a turn's start and keeps the latest
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
pub(super) fn transcript(messages: &[Message], plan: &Plan) -> String {
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
pub(super) fn head(text: &str) -> Cow<'_, str> {
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
