//! [`ElideToolResults`]: older tool results replaced by a notice, kept where the caller says.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::model::{thousands, Message};

use super::check::check;
use super::estimate::message_tokens;
use super::plan::turns_start;
use super::Compact;
use super::CompactionError;

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
pub(super) const ELIDED: &str = "[elided: the result of ";

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
pub(super) fn size_words(bytes: usize, images: usize) -> String {
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
