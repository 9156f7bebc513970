//! [`ToolResult`]: a finished response stream, collected for the model's
//! history or for an MCP `CallToolResult`.
//!
//! Progress items are transient and left out; structured JSON items become
//! the structured content (and a text copy, for clients that only read
//! text); an error — at the start or after some items — sets `is_error` and
//! adds the model-facing error text, so nothing that was emitted is lost.
//!
//! ```
//! use futures_util::stream;
//! use toolstack::{ToolError, ToolOutput, ToolResult};
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let items = stream::iter(vec![
//!     Ok(ToolOutput::text("partial")),
//!     Err(ToolError::failed("disk full")),
//! ]);
//! let result = ToolResult::collect(items).await;
//! assert!(result.is_error);
//! assert_eq!(result.text(), "partial\n{\"error\":\"disk full\",\"kind\":\"failed\"}");
//! # }).unwrap();
//! ```

use futures_core::stream::FusedStream;
use futures_core::Stream;
use futures_util::StreamExt;
use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::boxed::FuseAfterError;
use crate::{Json, ToolError, ToolOutput};

/// A response stream being collected into a [`ToolResult`], each item
/// shown to the caller as it comes: what every reader of a tool's stream
/// that also wants its result (the agent, the HTTP endpoint, the MCP
/// server) does, by one rule — content items are kept, progress is passed
/// on and not kept, the first error ends the result.
///
/// ```
/// use futures_util::stream;
/// use toolstack::result::{Collecting, Seen};
/// use toolstack::{Progress, ToolError, ToolOutput};
///
/// # futures_util::FutureExt::now_or_never(async {
/// let items = stream::iter(vec![
///     Ok(ToolOutput::progress(Progress::new(1.0))),
///     Ok(ToolOutput::text("partial")),
///     Err(ToolError::failed("disk full")),
///     Ok(ToolOutput::text("never seen")),
/// ]);
/// let mut collecting = Collecting::new(items);
/// assert!(matches!(collecting.next().await, Seen::Progress(_)));
/// assert!(matches!(collecting.next().await, Seen::Output));
/// assert_eq!(collecting.latest().and_then(ToolOutput::as_text), Some("partial"));
/// let Seen::Done(result) = collecting.next().await else { panic!() };
/// assert!(result.is_error);
/// assert_eq!(result.content.len(), 2, "the item and the error's text");
/// // The stream is gone: nothing after the error is read.
/// let Seen::Done(again) = collecting.next().await else { panic!() };
/// assert!(again.error.unwrap().message().contains("polled after"));
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Collecting<S> {
    // Terminated (the stream dropped) once the result has been given.
    stream: FuseAfterError<S>,
    result: ToolResult,
}

/// What [`Collecting`] saw next.
#[derive(Debug)]
pub enum Seen {
    /// A content item, now kept in the result ([`latest`](Collecting::latest)).
    Output,
    /// A progress report (not kept).
    Progress(crate::Progress),
    /// The stream ended, or failed: the result. Given once; after it, the
    /// stream is dropped and each further call gives a result holding a
    /// "polled after completion" error.
    Done(ToolResult),
}

impl<S> Collecting<S>
where
    S: Stream<Item = Result<ToolOutput, ToolError>> + Unpin,
{
    /// Starts collecting `stream`.
    pub fn new(stream: S) -> Self {
        Collecting {
            stream: FuseAfterError::new(stream),
            result: ToolResult::default(),
        }
    }

    /// The next thing seen, once it comes.
    pub fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Seen> {
        use std::task::Poll;
        if self.stream.is_terminated() {
            return Poll::Ready(Seen::Done(ToolResult::from_error(
                ToolError::polled_after_completion("a collected tool stream"),
            )));
        }
        // The fuse drops the stream at its end or its first error.
        match std::task::ready!(self.stream.poll_next_unpin(cx)) {
            Some(Ok(ToolOutput::Progress(progress))) => Poll::Ready(Seen::Progress(*progress)),
            Some(Ok(output)) => {
                self.result.content.push(output);
                Poll::Ready(Seen::Output)
            }
            Some(Err(err)) => {
                self.result.push_error(err);
                Poll::Ready(Seen::Done(std::mem::take(&mut self.result)))
            }
            None => Poll::Ready(Seen::Done(std::mem::take(&mut self.result))),
        }
    }

    /// The next thing seen.
    pub async fn next(&mut self) -> Seen {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// The content item seen last (the one a [`Seen::Output`] announced).
    pub fn latest(&self) -> Option<&ToolOutput> {
        self.result.content.last()
    }
}

/// A collected tool response.
///
/// It serializes in MCP's `CallToolResult` shape, the one the HTTP
/// endpoint's `result` event carries (a JSON item is a text block in
/// `content` and the `structuredContent`):
///
/// ```
/// use toolstack::{ToolOutput, ToolResult};
///
/// let mut result = ToolResult::default();
/// result.push(ToolOutput::json(serde_json::json!(3)));
/// assert_eq!(
///     serde_json::to_string(&result).unwrap(),
///     r#"{"content":[{"type":"text","text":"3"}],"structuredContent":3,"isError":false}"#,
/// );
/// assert_eq!(result.into_text(), "3");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolResult {
    /// The content items in order: no progress; JSON items as they came
    /// (their text is what a model reads, their value the
    /// [structured content](Self::structured_content)).
    pub content: Content,
    /// Whether the call ended in an error.
    pub is_error: bool,
    /// The error that ended the call, if any.
    pub error: Option<ToolError>,
}

impl ToolResult {
    /// Collects a whole response stream. The first error ends collection.
    pub async fn collect<S>(stream: S) -> ToolResult
    where
        S: Stream<Item = Result<ToolOutput, ToolError>>,
    {
        let stream = std::pin::pin!(stream);
        let mut collecting = Collecting::new(stream);
        loop {
            if let Seen::Done(result) = collecting.next().await {
                return result;
            }
        }
    }

    /// The result of a call that failed before producing anything.
    pub fn from_error(err: ToolError) -> ToolResult {
        let mut result = ToolResult::default();
        result.push_error(err);
        result
    }

    /// Adds one stream item (progress is ignored).
    pub fn push(&mut self, output: ToolOutput) {
        if !output.is_progress() {
            self.content.push(output);
        }
    }

    /// Records the error that ended the call.
    pub fn push_error(&mut self, err: ToolError) {
        self.content.push(ToolOutput::text(err.to_model_text()));
        self.is_error = true;
        self.error = Some(err);
    }

    /// The structured output (MCP `structuredContent`): the value of the
    /// one JSON item, an array of the values when there were several,
    /// `None` when there was none. Parsed from the items' JSON text.
    pub fn structured_content(&self) -> Option<serde_json::Value> {
        let mut values = self.json_items().map(Json::value);
        let first = values.next()?;
        match values.next() {
            None => Some(first),
            Some(second) => {
                let mut all = vec![first, second];
                all.extend(values);
                Some(serde_json::Value::Array(all))
            }
        }
    }

    fn json_items(&self) -> impl Iterator<Item = &Json> + '_ {
        self.content.iter().filter_map(ToolOutput::as_json)
    }

    /// The text the model reads as the tool message, taking the result:
    /// [`text`](Self::text), without a copy when there is one item.
    pub fn into_text(self) -> String {
        match self.content.0 {
            Items::One(ToolOutput::Text { text }) => text,
            Items::One(ToolOutput::Json { value }) => value.into_string(),
            _ => self.text(),
        }
    }

    /// All text content joined by newlines (JSON items as their JSON
    /// text): what a model reads as the tool message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for item in self.content.iter() {
            let Some(piece) = item.model_text() else {
                continue;
            };
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(piece);
        }
        out
    }
}

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Blocks<'a>(&'a Content);
        impl Serialize for Blocks<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(None)?;
                for item in self.0.iter() {
                    match item {
                        // A JSON item's text copy, for clients that read text.
                        ToolOutput::Json { value } => seq.serialize_element(&TextBlock {
                            text: value.as_str(),
                        })?,
                        // In `structuredContent` only.
                        ToolOutput::Structured { .. } => {}
                        other => seq.serialize_element(other)?,
                    }
                }
                seq.end()
            }
        }
        #[derive(Serialize)]
        #[serde(tag = "type", rename = "text")]
        struct TextBlock<'a> {
            text: &'a str,
        }
        struct Structured<'a>(&'a ToolResult);
        impl Serialize for Structured<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut items = self.0.json_items();
                match (items.next(), items.next()) {
                    (Some(one), None) => one.serialize(serializer),
                    _ => {
                        let mut seq = serializer.serialize_seq(None)?;
                        for item in self.0.json_items() {
                            seq.serialize_element(item)?;
                        }
                        seq.end()
                    }
                }
            }
        }
        let structured = self.json_items().next().is_some();
        let mut out = serializer.serialize_struct("ToolResult", 2 + usize::from(structured))?;
        out.serialize_field("content", &Blocks(&self.content))?;
        if structured {
            out.serialize_field("structuredContent", &Structured(self))?;
        }
        out.serialize_field("isError", &self.is_error)?;
        out.end()
    }
}

/// The items of a [`ToolResult`]: a list that holds one item without a
/// separate allocation (most tools answer with one).
///
/// It dereferences to a slice and iterates like a `Vec`; two contents are
/// equal when their items are, however they were built.
#[derive(Debug, Clone, Default)]
pub struct Content(Items);

#[derive(Debug, Clone, Default)]
enum Items {
    #[default]
    None,
    One(ToolOutput),
    Many(Vec<ToolOutput>),
}

impl Content {
    /// Appends an item.
    pub fn push(&mut self, item: ToolOutput) {
        self.0 = match std::mem::take(&mut self.0) {
            Items::None => Items::One(item),
            Items::One(first) => Items::Many(vec![first, item]),
            Items::Many(mut all) => {
                all.push(item);
                Items::Many(all)
            }
        };
    }

    /// The items as a slice.
    pub fn as_slice(&self) -> &[ToolOutput] {
        match &self.0 {
            Items::None => &[],
            Items::One(item) => std::slice::from_ref(item),
            Items::Many(all) => all,
        }
    }

    /// The items as a `Vec`.
    pub fn into_vec(self) -> Vec<ToolOutput> {
        match self.0 {
            Items::None => Vec::new(),
            Items::One(item) => vec![item],
            Items::Many(all) => all,
        }
    }
}

impl std::ops::Deref for Content {
    type Target = [ToolOutput];

    fn deref(&self) -> &[ToolOutput] {
        self.as_slice()
    }
}

impl PartialEq for Content {
    fn eq(&self, other: &Content) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl From<Vec<ToolOutput>> for Content {
    fn from(mut items: Vec<ToolOutput>) -> Self {
        // The same form as the items pushed one by one.
        Content(match items.len() {
            0 => Items::None,
            1 => Items::One(items.remove(0)),
            _ => Items::Many(items),
        })
    }
}

impl FromIterator<ToolOutput> for Content {
    fn from_iter<I: IntoIterator<Item = ToolOutput>>(iter: I) -> Self {
        let mut content = Content::default();
        for item in iter {
            content.push(item);
        }
        content
    }
}

impl IntoIterator for Content {
    type Item = ToolOutput;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<ToolOutput>, std::vec::IntoIter<ToolOutput>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self.0 {
            Items::None => (None, Vec::new()),
            Items::One(item) => (Some(item), Vec::new()),
            Items::Many(all) => (None, all),
        };
        one.into_iter().chain(many)
    }
}

impl<'a> IntoIterator for &'a Content {
    type Item = &'a ToolOutput;
    type IntoIter = std::slice::Iter<'a, ToolOutput>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_the_same_however_it_is_built() {
        let item = ToolOutput::text("a");
        let mut pushed = Content::default();
        pushed.push(item.clone());
        assert_eq!(Content::from(vec![item.clone()]), pushed);
        assert!(matches!(Content::from(vec![item.clone()]).0, Items::One(_)));
        assert_eq!(Content::from(Vec::new()), Content::default());
        assert!(matches!(Content::from(Vec::new()).0, Items::None));
        let two: Content = [item.clone(), item.clone()].into_iter().collect();
        assert_eq!(Content::from(vec![item.clone(), item]), two);
        // Equal by items, whatever the form inside.
        assert_eq!(Content(Items::Many(Vec::new())), Content::default());
    }
}
