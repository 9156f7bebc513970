//! The answer's server-sent events, framed with a bound on each event,
//! read by a provider's [`Dialect`] into a stream of deltas; a malformed
//! or broken stream is a typed error (retryable before the first delta).

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_core::Stream;
use futures_util::{stream, StreamExt};
use pin_project_lite::pin_project;

use crate::model::ModelDelta;
use crate::{ErrorKind, ToolError};

use super::MAX_SSE_EVENT_BYTES;

/// Why the body stopped before the SSE parser saw it: the transport, the
/// bound on one event, or a line that is not UTF-8.
#[derive(Debug)]
pub(crate) enum BodyError<E> {
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
pub(crate) struct EventBytes {
    pub(crate) event: usize,
    pub(crate) line: usize,
    pub(crate) after_cr: bool,
}

impl EventBytes {
    /// Whether the event being received is still within the bound.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> bool {
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
pub(crate) fn after_last_line(piece: &[u8]) -> Option<usize> {
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
pub(crate) fn line_end(lines: &[u8], at: usize) -> usize {
    match lines[at..].iter().position(|b| *b == b'\n' || *b == b'\r') {
        Some(i) if lines[at + i] == b'\r' && lines.get(at + i + 1) == Some(&b'\n') => at + i + 2,
        Some(i) => at + i + 1,
        None => lines.len(),
    }
}

/// The UTF-8 byte-order mark.
pub(crate) const BOM: &[u8] = "\u{feff}".as_bytes();

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
    pub(crate) fn new(body: S) -> Self {
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
pub(crate) fn malformed(message: String, emitted: bool) -> ToolError {
    let kind = if emitted {
        ErrorKind::Failed
    } else {
        ErrorKind::Unavailable
    };
    ToolError::new(kind, message)
}

/// The error of a body the SSE parser could not read.
pub(crate) fn broken<E>(err: EventStreamError<BodyError<E>>, emitted: bool) -> ToolError
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

/// What one event of a provider's stream says.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// The deltas it holds (often none: a keep-alive, a block's start).
    pub(crate) deltas: Vec<ModelDelta>,
    /// The answering model, if the event names it.
    pub(crate) model: Option<String>,
    /// Whether it ends the answer (OpenAI's `[DONE]`, Anthropic's
    /// `message_stop`): nothing after it is read.
    pub(crate) end: bool,
}

impl Read {
    /// An event that holds `deltas`.
    pub(crate) fn deltas(deltas: Vec<ModelDelta>) -> Self {
        Read {
            deltas,
            ..Read::default()
        }
    }

    /// The event that ends the answer.
    pub(crate) fn end() -> Self {
        Read {
            end: true,
            ..Read::default()
        }
    }
}

/// Why an event was not read.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Its data is not JSON: retryable before the first delta, like a
    /// dropped connection.
    Malformed(serde_json::Error),
    /// It says the answer failed (an error event, a bound exceeded, an
    /// event out of place): the error as it is.
    Refused(ToolError),
}

impl From<ToolError> for Unread {
    fn from(err: ToolError) -> Self {
        Unread::Refused(err)
    }
}

/// A provider's stream format: how one event reads as deltas. The framing,
/// its bounds, the order of the answering model's name and the rule for a
/// malformed event are [`deltas_from_sse`]'s, the same for every provider.
pub(crate) trait Dialect: Send + 'static {
    /// What an answer must end with (`[DONE]`, `message_stop`), named in
    /// the error of a stream that ends before it.
    const END: &'static str;

    /// Reads one event.
    fn read(&mut self, event: &Event) -> Result<Read, Unread>;
}

/// Parses an SSE body, however its bytes are split, into deltas as
/// `dialect` reads its events; the stream ends at the dialect's end, or
/// with one error.
pub(crate) fn deltas_from_sse<S, B, E, D>(
    bytes: S,
    dialect: D,
) -> impl Stream<Item = Result<ModelDelta, ToolError>> + Send
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: StdError + Send + Sync + 'static,
    D: Dialect,
{
    struct Parse<T, D> {
        events: Pin<Box<T>>,
        dialect: D,
        ended: bool,
        /// Whether a delta has been yielded: it decides whether a
        /// malformed event is worth asking again.
        emitted: bool,
        /// The answering model, once an event names it, until it is told
        /// (once per answer, just before the first delta: an event that
        /// only names it is no delta, so a failure after it is still a
        /// failure before the answer began).
        model: Option<String>,
        named: bool,
    }
    let start = Parse {
        events: Box::pin(WholeLines::new(bytes).eventsource()),
        dialect,
        ended: false,
        emitted: false,
        model: None,
        named: false,
    };
    stream::unfold(start, |mut parse| async move {
        if parse.ended {
            return None;
        }
        let read = match parse.events.next().await {
            None => Err(ToolError::new(
                ErrorKind::Unavailable,
                format!("the model's stream ended before {}", D::END),
            )),
            Some(Err(err)) => Err(broken(err, parse.emitted)),
            Some(Ok(event)) => match parse.dialect.read(&event) {
                Ok(read) => Ok(read),
                Err(Unread::Refused(err)) => Err(err),
                Err(Unread::Malformed(err)) => Err(malformed(
                    format!(
                        "malformed event from the model: {err}: {}",
                        event.data.chars().take(200).collect::<String>()
                    ),
                    parse.emitted,
                )
                .with_source(err)),
            },
        };
        let items: Vec<Result<ModelDelta, ToolError>> = match read {
            Ok(Read { end: true, .. }) => return None,
            Ok(Read { deltas, model, .. }) => {
                if parse.model.is_none() && !parse.named {
                    // Bounded as a name is.
                    parse.model = model
                        .filter(|m| !m.is_empty())
                        .map(|m| m.chars().take(256).collect());
                }
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
