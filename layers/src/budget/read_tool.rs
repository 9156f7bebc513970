//! [`read_tool_result`]: the tool a model pages through a kept output with.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use futures_util::{stream, FutureExt, StreamExt};
use serde::Deserialize;
use toolstack::{tool, BoxTool, ErrorKind, ToolAnnotations, ToolError, ToolOutput};

use super::store::{is_handle, Chunk, OutputStore, STORE_TIMEOUT};
use crate::text::{duration_words, thousands};

/// The name of the tool [`read_tool_result`] makes (the default notice
/// names it).
pub const READ_TOOL_NAME: &str = "read_tool_result";

/// How many bytes a page has when the model does not say (≈ 2,000
/// tokens).
pub const DEFAULT_PAGE_BYTES: usize = 8_000;

/// The most bytes one page has, whatever the model asks (≈ 8,000 tokens).
pub const MAX_PAGE_BYTES: usize = 32_000;

/// What a character split by a byte offset may need on either side.
const CHAR_SLACK: usize = 8;

/// Reads a page of a tool's output that was over its budget and kept: the
/// cut notice gives the handle and the offset where the omitted part
/// starts. Offsets count bytes of the whole output; each answer says where
/// the next page starts.
#[derive(Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
#[serde(deny_unknown_fields)]
struct ReadToolResult {
    /// The handle from the cut notice.
    handle: String,
    /// The byte to start from (default 0, the output's beginning).
    #[serde(default)]
    offset: usize,
    /// At most how many bytes to read (default 8000, at most 32000). A
    /// page ends at a line's end when one is near.
    #[serde(default)]
    limit: Option<usize>,
}

/// The tool a model reads the outputs a budget kept in `store` with, a
/// page at a time: `read_tool_result` with `{"handle", "offset",
/// "limit"}`, offsets and limits in bytes of the whole output.
///
/// Add it to the toolbox next to the budgeted tools
/// ([`Toolbox::tool`](toolstack::Toolbox::tool)), over the store their
/// [`BudgetLayer::keep`](super::BudgetLayer::keep) was given. It answers two
/// text items: the page (from a character boundary, at most `limit`
/// bytes, ending after a line when a line ends in its second half), then
/// where it was and how to go on —
/// `[read_tool_result: bytes 8,000 to 16,000 of 190,000 kept; 174,000 bytes left. Next page: {"handle":"…","offset":16000}]`.
///
/// | the model sends | the answer |
/// |---|---|
/// | a handle never given, malformed or expired | [`ErrorKind::NotFound`], saying how long outputs are kept |
/// | an offset past the end | [`ErrorKind::InvalidArguments`], with the length |
/// | `limit` 0 | [`ErrorKind::InvalidArguments`]; above 32,000 it is read as 32,000 |
/// | (the store fails or takes more than 5 s) | [`ErrorKind::Unavailable`], retryable |
pub fn read_tool_result(store: impl OutputStore) -> BoxTool {
    let store: Arc<dyn OutputStore> = Arc::new(store);
    let tool = tool::from_stream(READ_TOOL_NAME, move |args: ReadToolResult| {
        let store = Arc::clone(&store);
        stream::once(async move { read(&*store, args).await }).flat_map(|answer| {
            stream::iter(match answer {
                Ok([page, trailer]) => vec![Ok(page), Ok(trailer)],
                Err(err) => vec![Err(err)],
            })
        })
    })
    .with_description(
        "Reads a page of a tool output that was too large and was kept: call it with the \
         handle and offset a cut notice gave. Offsets and limits are in bytes; each answer \
         ends with where the next page starts.",
    )
    .with_annotations(ToolAnnotations {
        read_only_hint: Some(true),
        idempotent_hint: Some(true),
        ..Default::default()
    });
    BoxTool::new(tool)
}

async fn read(store: &dyn OutputStore, args: ReadToolResult) -> Result<[ToolOutput; 2], ToolError> {
    let limit = match args.limit {
        None => DEFAULT_PAGE_BYTES,
        Some(0) => {
            return Err(ToolError::invalid_arguments(
                "`limit` must be at least 1: it is how many bytes to read",
            ))
        }
        Some(limit) => limit.min(MAX_PAGE_BYTES),
    };
    let gone = || {
        ToolError::not_found(format!(
            "no output is kept under the handle \"{}\": it expired (outputs are kept for {}) \
             or was never given. Call the tool again, asking for less.",
            args.handle,
            duration_words(store.ttl())
        ))
    };
    if !is_handle(&args.handle) {
        return Err(ToolError::not_found(
            "that is not a handle a cut notice gave (they are 32 hex digits): copy it from the \
             notice, or call the tool again, asking for less",
        ));
    }
    let asked = catch_unwind(AssertUnwindSafe(|| {
        store.read(&args.handle, args.offset, limit + 2 * CHAR_SLACK)
    }));
    let chunk = match asked {
        Ok(read) => {
            match tokio::time::timeout(STORE_TIMEOUT, AssertUnwindSafe(read).catch_unwind()).await {
                Ok(Ok(Ok(chunk))) => chunk,
                Ok(Ok(Err(err))) => return Err(unavailable(err.message())),
                Ok(Err(_)) => return Err(unavailable("it panicked")),
                Err(_) => return Err(unavailable("it did not answer in time")),
            }
        }
        Err(_) => return Err(unavailable("it panicked")),
    };
    let chunk = chunk.ok_or_else(gone)?;
    if args.offset > chunk.kept_bytes {
        return Err(ToolError::invalid_arguments(format!(
            "offset {} is past the end of the kept output ({} bytes): read from an offset \
             below {}",
            args.offset,
            thousands(chunk.kept_bytes),
            chunk.kept_bytes
        )));
    }
    let page = Page::cut(&chunk, args.offset, limit);
    let text = String::from_utf8_lossy(&chunk.bytes[page.skip..page.skip + page.len]).into_owned();
    Ok([
        ToolOutput::text(text),
        ToolOutput::text(page.trailer(&chunk, &args.handle, args.offset)),
    ])
}

fn unavailable(why: &str) -> ToolError {
    tracing::warn!(why, "the store of kept outputs failed a read");
    ToolError::new(
        ErrorKind::Unavailable,
        format!("the store of kept outputs failed ({why}); try again in a moment"),
    )
    .with_retryable(true)
}

/// Where a page is in the bytes read for it.
#[derive(Debug, PartialEq, Eq)]
struct Page {
    /// Bytes skipped to the first character boundary.
    skip: usize,
    /// The page's length.
    len: usize,
    /// Where the page starts in the kept text.
    start: usize,
}

fn continues(b: u8) -> bool {
    b & 0xC0 == 0x80
}

impl Page {
    /// The page of at most `limit` bytes in `chunk` (read from `offset`):
    /// whole characters only (one at least), ended after a line when one
    /// ends in its second half and the kept text goes on.
    fn cut(chunk: &Chunk, offset: usize, limit: usize) -> Page {
        let bytes = &chunk.bytes;
        let skip = bytes.iter().take(3).take_while(|b| continues(**b)).count();
        let body = &bytes[skip..];
        let mut len = limit.min(body.len());
        while len > 0 && len < body.len() && continues(body[len]) {
            len -= 1;
        }
        if len == 0 && !body.is_empty() {
            len = 1;
            while len < body.len() && continues(body[len]) {
                len += 1;
            }
        }
        let start = offset + skip;
        if start + len < chunk.kept_bytes {
            if let Some(newline) = body[..len].iter().rposition(|b| *b == b'\n') {
                if newline + 1 >= len / 2 {
                    len = newline + 1;
                }
            }
        }
        Page { skip, len, start }
    }

    fn trailer(&self, chunk: &Chunk, handle: &str, offset: usize) -> String {
        let end = self.start + self.len;
        let from = if self.start == offset {
            String::new()
        } else {
            format!(" (offset {offset} was inside a character)")
        };
        let where_ = format!(
            "[{READ_TOOL_NAME}: bytes {} to {}{from}",
            thousands(self.start),
            thousands(end)
        );
        if end < chunk.kept_bytes {
            format!(
                "{where_} of {} kept; {} bytes left. Next page: {{\"handle\":\"{handle}\",\"offset\":{end}}}]",
                thousands(chunk.kept_bytes),
                thousands(chunk.kept_bytes - end)
            )
        } else if chunk.kept_bytes < chunk.output_bytes {
            format!(
                "{where_}: the end of the kept copy. The output was {} bytes; the rest was over \
                 what the store keeps of one output and was not kept.]",
                thousands(chunk.output_bytes)
            )
        } else {
            format!(
                "{where_} of {}: the end of the output.]",
                thousands(chunk.output_bytes)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(text: &str, offset: usize, limit: usize) -> (String, usize) {
        let chunk = Chunk::of(text.as_bytes(), offset, limit + 2 * CHAR_SLACK, text.len());
        let page = Page::cut(&chunk, offset, limit);
        let bytes = &chunk.bytes[page.skip..page.skip + page.len];
        (String::from_utf8(bytes.to_vec()).unwrap(), page.start)
    }

    #[test]
    fn a_page_is_whole_characters_from_a_boundary() {
        let text = "é".repeat(10);
        // From inside a character: its end; at most 5 bytes: 2 characters.
        assert_eq!(cut(&text, 1, 5), ("éé".into(), 2));
        // A limit smaller than a character still reads one.
        assert_eq!(cut(&text, 0, 1), ("é".into(), 0));
    }

    #[test]
    fn a_page_ends_after_a_line_in_its_second_half() {
        let text = "row 1\nrow 2\nrow 3\n";
        assert_eq!(cut(text, 0, 14), ("row 1\nrow 2\n".into(), 0));
        // No line ends in the second half: the limit.
        assert_eq!(cut("a\nbcdefghij", 0, 8), ("a\nbcdefg".into(), 0));
        // At the end of the text, the end.
        assert_eq!(cut(text, 12, 100), ("row 3\n".into(), 12));
    }
}
