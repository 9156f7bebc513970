//! The answer's server-sent events, framed with a bound on each event,
//! read into a stream of deltas; a malformed or broken stream is a typed
//! error (retryable before the first delta).

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use eventsource_stream::{EventStreamError, Eventsource};
use futures_core::Stream;
use futures_util::{stream, StreamExt};
use pin_project_lite::pin_project;
use serde_json::Value;

use crate::model::ModelDelta;
use crate::{ErrorKind, ToolError};

use super::chunk::deltas_of;
use super::MAX_SSE_EVENT_BYTES;

/// Why the body stopped before the SSE parser saw it: the transport, the
/// bound on one event, or a line that is not UTF-8.
#[derive(Debug)]
pub(super) enum BodyError<E> {
    Transport(E),
    EventTooLarge,
    NotUtf8(std::str::Utf8Error),
}

impl<E: fmt::Display> fmt::Display for BodyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Transport(err) => err.fmt(f),
            BodyError::EventTooLarge => write!(
                f,
                "a server-sent event was longer than {MAX_SSE_EVENT_BYTES} bytes"
            ),
            BodyError::NotUtf8(err) => err.fmt(f),
        }
    }
}

impl<E: StdError + 'static> StdError for BodyError<E> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            BodyError::Transport(err) => Some(err),
            BodyError::EventTooLarge => None,
            BodyError::NotUtf8(err) => Some(err),
        }
    }
}

/// Counts the bytes of the event being received, however the body is
/// split. CR, LF and CRLF end a line; an empty line ends an event.
#[derive(Debug, Default)]
pub(super) struct EventBytes {
    pub(super) event: usize,
    pub(super) line: usize,
    pub(super) after_cr: bool,
}

impl EventBytes {
    /// Whether the event being received is still within the bound.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    if self.line == 0 {
                        self.event = 0;
                    }
                    self.line = 0;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.after_cr = false;
                    self.line += 1;
                    self.event += 1;
                }
            }
        }
        self.event <= MAX_SSE_EVENT_BYTES
    }
}

/// Where `piece` can be cut after its last complete line, if it has one.
pub(super) fn after_last_line(piece: &[u8]) -> Option<usize> {
    let is_end = |b: &u8| *b == b'\n' || *b == b'\r';
    let last = piece.iter().rposition(is_end)?;
    if piece[last] == b'\r' && last + 1 == piece.len() {
        // The LF of a CRLF may be in the next piece.
        return piece[..last].iter().rposition(is_end).map(|i| i + 1);
    }
    Some(last + 1)
}

/// Where the line that starts `lines[at..]` ends: after its LF, CRLF or
/// lone CR (`lines` holds whole lines, so a CR is never its last byte but
/// at the body's end), or at the end of `lines`.
pub(super) fn line_end(lines: &[u8], at: usize) -> usize {
    match lines[at..].iter().position(|b| *b == b'\n' || *b == b'\r') {
        Some(i) if lines[at + i] == b'\r' && lines.get(at + i + 1) == Some(&b'\n') => at + i + 2,
        Some(i) => at + i + 1,
        None => lines.len(),
    }
}

/// The UTF-8 byte-order mark.
pub(super) const BOM: &[u8] = "\u{feff}".as_bytes();

pin_project! {
    /// The body re-cut into lines, one line per item, each event bounded
    /// to [`MAX_SSE_EVENT_BYTES`], each line checked to be UTF-8.
    ///
    /// eventsource-stream 0.2.3, which parses what this hands it, buffers
    /// without a bound and must be handed no more than it can take:
    ///
    /// * it re-parses its buffer from the start whenever bytes arrive in
    ///   the middle of a line (a long line costs quadratic time), and
    ///   copies the rest of its buffer after each line it parses (many
    ///   short lines at once cost quadratic time too): handed one whole
    ///   line at a time, it parses each byte once, while the partial line
    ///   waits here, bounded;
    /// * it holds bytes that are not UTF-8, with everything after them,
    ///   until the body ends: a line that is not UTF-8 is refused here, as
    ///   it arrives;
    /// * it panics on a leading byte-order mark (which it slices one byte
    ///   of three off): the marks the body starts with are dropped here
    ///   (the SSE specification ignores one).
    struct WholeLines<S> {
        #[pin]
        body: S,
        // The start of a line whose end has not arrived.
        partial: Vec<u8>,
        // Whole lines, handed on one at a time from `at`.
        lines: Vec<u8>,
        at: usize,
        event: EventBytes,
        started: bool,
        ended: bool,
    }
}

impl<S> WholeLines<S> {
    pub(super) fn new(body: S) -> Self {
        WholeLines {
            body,
            partial: Vec::new(),
            lines: Vec::new(),
            at: 0,
            event: EventBytes::default(),
            started: false,
            ended: false,
        }
    }
}

impl<S, B, E> Stream for WholeLines<S>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    type Item = Result<Vec<u8>, BodyError<E>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if *this.at < this.lines.len() {
                let start = *this.at;
                *this.at = line_end(this.lines, start);
                let mut line = &this.lines[start..*this.at];
                if !*this.started {
                    *this.started = true;
                    while let Some(rest) = line.strip_prefix(BOM) {
                        line = rest;
                    }
                    if line.is_empty() {
                        continue;
                    }
                }
                if let Err(err) = std::str::from_utf8(line) {
                    *this.ended = true;
                    this.lines.clear();
                    *this.at = 0;
                    return Poll::Ready(Some(Err(BodyError::NotUtf8(err))));
                }
                return Poll::Ready(Some(Ok(line.to_vec())));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            this.lines.clear();
            *this.at = 0;
            let piece = match ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(piece)) => piece,
                Some(Err(err)) => {
                    *this.ended = true;
                    return Poll::Ready(Some(Err(BodyError::Transport(err))));
                }
                // What is held back (a final CR, say) is the parser's to
                // judge.
                None => {
                    *this.ended = true;
                    std::mem::swap(this.lines, this.partial);
                    continue;
                }
            };
            let piece = piece.as_ref();
            if !this.event.feed(piece) {
                *this.ended = true;
                return Poll::Ready(Some(Err(BodyError::EventTooLarge)));
            }
            match after_last_line(piece) {
                None => this.partial.extend_from_slice(piece),
                Some(cut) => {
                    std::mem::swap(this.lines, this.partial);
                    this.lines.extend_from_slice(&piece[..cut]);
                    this.partial.extend_from_slice(&piece[cut..]);
                }
            }
        }
    }
}

/// An unreadable chunk. Before any delta it is as retryable as a dropped
/// connection (a proxy's error page, a garbled first chunk): nothing has
/// reached the consumer, so asking again is safe. After a delta the answer
/// is broken, and failed.
pub(super) fn malformed(message: String, emitted: bool) -> ToolError {
    let kind = if emitted {
        ErrorKind::Failed
    } else {
        ErrorKind::Unavailable
    };
    ToolError::new(kind, message)
}

/// The error of a body the SSE parser could not read.
pub(super) fn broken<E>(err: EventStreamError<BodyError<E>>, emitted: bool) -> ToolError
where
    E: StdError + Send + Sync + 'static,
{
    match err {
        EventStreamError::Transport(BodyError::Transport(err)) => ToolError::new(
            ErrorKind::Unavailable,
            "the connection to the model endpoint broke off mid-answer",
        )
        .with_source(err),
        EventStreamError::Transport(too_large @ BodyError::EventTooLarge) => ToolError::failed(
            format!("the model endpoint's answer was refused: {too_large}"),
        )
        .with_source(too_large),
        EventStreamError::Transport(BodyError::NotUtf8(err)) => malformed(
            "the model endpoint sent text that is not UTF-8".into(),
            emitted,
        )
        .with_source(err),
        EventStreamError::Utf8(err) => malformed(
            "the model endpoint sent text that is not UTF-8".into(),
            emitted,
        )
        .with_source(err),
        EventStreamError::Parser(err) => malformed(
            format!("the model endpoint sent a malformed server-sent event: {err}"),
            emitted,
        ),
    }
}

/// Parses a chat-completions SSE body, however its bytes are split, into
/// deltas; the stream ends at `[DONE]`, or with one error.
pub(super) fn deltas_from_sse<S, B, E>(
    bytes: S,
) -> impl Stream<Item = Result<ModelDelta, ToolError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: StdError + Send + Sync + 'static,
{
    struct Parse<T> {
        events: Pin<Box<T>>,
        ended: bool,
        /// Whether a delta has been yielded: it decides whether a
        /// malformed chunk is worth asking again.
        emitted: bool,
        /// The answering model, once a chunk names it, until it is told
        /// (once per answer, just before the first delta: a chunk that
        /// only names it is no delta, so a failure after it is still a
        /// failure before the answer began).
        model: Option<String>,
        named: bool,
    }
    let start = Parse {
        events: Box::pin(WholeLines::new(bytes).eventsource()),
        ended: false,
        emitted: false,
        model: None,
        named: false,
    };
    stream::unfold(start, |mut parse| async move {
        if parse.ended {
            return None;
        }
        let batch = match parse.events.next().await {
            None => Err(ToolError::new(
                ErrorKind::Unavailable,
                "the model's stream ended before [DONE]",
            )),
            Some(Err(err)) => Err(broken(err, parse.emitted)),
            Some(Ok(event)) if event.data.trim() == "[DONE]" => return None,
            Some(Ok(event)) => match serde_json::from_str::<Value>(&event.data) {
                Ok(chunk) if chunk.get("error").is_some() => Err(ToolError::failed(format!(
                    "the model reported an error mid-stream: {}",
                    chunk["error"]
                ))),
                Ok(chunk) => {
                    if parse.model.is_none() && !parse.named {
                        // Bounded as a name is.
                        parse.model = chunk
                            .get("model")
                            .and_then(Value::as_str)
                            .filter(|m| !m.is_empty())
                            .map(|m| m.chars().take(256).collect());
                    }
                    deltas_of(&chunk)
                }
                Err(err) => Err(malformed(
                    format!(
                        "malformed chunk from the model: {err}: {}",
                        event.data.chars().take(200).collect::<String>()
                    ),
                    parse.emitted,
                )
                .with_source(err)),
            },
        };
        let items: Vec<Result<ModelDelta, ToolError>> = match batch {
            Ok(deltas) => {
                parse.emitted |= !deltas.is_empty();
                let model = (!deltas.is_empty())
                    .then(|| parse.model.take())
                    .flatten()
                    .map(ModelDelta::Model);
                parse.named |= model.is_some();
                model.into_iter().chain(deltas).map(Ok).collect()
            }
            Err(err) => {
                parse.ended = true;
                vec![Err(err)]
            }
        };
        Some((stream::iter(items), parse))
    })
    .flatten()
}
