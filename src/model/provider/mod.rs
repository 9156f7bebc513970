//! What the HTTP model clients share: the rules a provider's answer is
//! read by, kept in one place so that the OpenAI-compatible client and the
//! Anthropic one cannot drift apart.
//!
//! | rule | where |
//! |---|---|
//! | one server-sent event at most [`MAX_SSE_EVENT_BYTES`], lines re-cut and checked to be UTF-8 as they arrive | `sse.rs`: `WholeLines` |
//! | a provider's events read into deltas (its [`Dialect`](sse::Dialect)); the answering model named once, before the first delta; a stream that ends before its end mark, or breaks, is unavailable; a malformed event before the first delta is retryable, after one it fails | `sse.rs`: `deltas_from_sse` |
//! | a refused request: the kind from the status and the body's error type (an overload or a rate limit retryable, an invalid request not), the body read at most [`ERROR_BODY_BYTES`](refusal::ERROR_BODY_BYTES) | `refusal.rs`: `status_error`, `error_body` |
//! | an error reported mid-stream, typed by its error type | `refusal.rs`: `stream_error` |
//! | `retry-after-ms`, then `Retry-After` in seconds or as an HTTP date | `refusal.rs`: `retry_after` |
//! | a tool-call index below [`MAX_TOOL_CALLS_PER_ANSWER`] | [`tool_call_index`] |
//! | the request sent, the status checked, the body handed to the dialect | [`send`] |

use futures_core::Stream;

use crate::model::{AccumulateError, ModelDelta, MAX_TOOL_CALLS_PER_ANSWER};
use crate::{ErrorKind, ToolError};

pub(crate) mod refusal;
pub(crate) mod sse;

/// The most bytes one server-sent event of a model's answer may take (its
/// lines up to the blank line that ends it): 1 MiB.
///
/// An event of a model's stream is a few hundred bytes; an endpoint that
/// sends an endless line gets a typed error (kind failed) instead of an
/// ever-growing buffer. The OpenAI-compatible and the Anthropic clients
/// both hold to it.
pub const MAX_SSE_EVENT_BYTES: usize = 1 << 20;

/// A tool call's index as the provider sent it, checked against the bound
/// before it becomes a `u32` (so no value wraps into range).
pub(crate) fn tool_call_index(index: u64) -> Result<u32, ToolError> {
    if index < MAX_TOOL_CALLS_PER_ANSWER as u64 {
        return Ok(index as u32);
    }
    let err = AccumulateError::TooManyCalls {
        index,
        max: MAX_TOOL_CALLS_PER_ANSWER,
    };
    Err(ToolError::failed(format!("the model's answer was refused: {err}")).with_source(err))
}

/// Sends `post` with `body`; a success's body is read by `dialect` into
/// deltas, any other status is its typed refusal (with the wait the
/// endpoint asked for).
pub(crate) async fn send<D: sse::Dialect>(
    post: reqwest::RequestBuilder,
    body: &serde_json::Value,
    dialect: D,
) -> Result<impl Stream<Item = Result<ModelDelta, ToolError>> + Send, ToolError> {
    let body = serde_json::to_vec(body)
        .map_err(|e| ToolError::failed(format!("cannot encode the request: {e}")))?;
    let response = post.body(body).send().await.map_err(|e| {
        ToolError::new(
            ErrorKind::Unavailable,
            format!("cannot reach the model endpoint: {e}"),
        )
        .with_source(e)
    })?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let retry_after = refusal::retry_after(response.headers());
        let text = refusal::error_body(response.bytes_stream()).await;
        return Err(refusal::status_error(status, retry_after, &text));
    }
    Ok(sse::deltas_from_sse(response.bytes_stream(), dialect))
}

/// The deltas of `pieces`, a body as the transport split it, as `dialect`
/// reads them: for the fuzz targets (built with `--cfg fuzzing`, which
/// the plain build does not know of) and the unit tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn parse_pieces<D: sse::Dialect>(
    pieces: Vec<Vec<u8>>,
    dialect: D,
) -> Vec<Result<ModelDelta, ToolError>> {
    use futures_util::{FutureExt, StreamExt};
    let body =
        futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>));
    // Every piece is ready, so the whole parse completes in one poll.
    sse::deltas_from_sse(body, dialect)
        .collect()
        .now_or_never()
        .expect("a body whose pieces are all ready parses in one poll")
}
