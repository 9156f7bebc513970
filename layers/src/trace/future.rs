use std::fmt;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use futures_core::stream::FusedStream;
use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::boxed::FuseAfterError;
use toolstack::ToolError;
use tracing::Span;

use super::item::record_finish_reason;
use super::metrics::CallMetrics;
use super::{OnEarlyDrop, OnEnd, OnFailure, OnOpen, Outcome, StreamSummary};
use crate::{CallKind, Output, Request};

pin_project! {
    /// The response future of [`Trace`](super::Trace): polls the inner
    /// future inside the call's span and reports the opening or the failure.
    ///
    /// Dropping it before it resolves reports an early drop. When nothing
    /// listened as the call began (no span, no hook enabled), it is the
    /// inner future and a few words: the span and hooks are boxed (once,
    /// the box then goes to the stream), and only a watched call has them.
    #[derive(Debug)]
    pub struct ResponseFuture<F, R, OO, OE, OF, OD>
    where
        R: Request,
        OE: OnEnd<R>,
        OF: OnFailure<R>,
        OD: OnEarlyDrop<R>,
    {
        #[pin]
        inner: F,
        watch: Watch<OO, Box<EndGuard<R, OE, OF, OD>>>,
    }
}

/// Whether a call is watched (its open hook and the guard the stream
/// takes over); `Done` once the future resolved.
#[derive(Debug)]
enum Watch<OO, G> {
    // Nothing listens: the call passes through, for a branch per poll.
    Off,
    On(OO, G),
    Done,
}

impl<F, R, OO, OE, OF, OD> ResponseFuture<F, R, OO, OE, OF, OD>
where
    R: Request,
    OE: OnEnd<R>,
    OF: OnFailure<R>,
    OD: OnEarlyDrop<R>,
{
    pub(super) fn watched(inner: F, on_open: OO, guard: EndGuard<R, OE, OF, OD>) -> Self {
        ResponseFuture {
            inner,
            watch: Watch::On(on_open, Box::new(guard)),
        }
    }

    pub(super) fn unwatched(inner: F) -> Self {
        ResponseFuture {
            inner,
            watch: Watch::Off,
        }
    }
}

impl<F, St, E, R, OO, OE, OF, OD> Future for ResponseFuture<F, R, OO, OE, OF, OD>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    OO: OnOpen<R>,
    R: Request,
    OE: OnEnd<R>,
    OF: OnFailure<R>,
    OD: OnEarlyDrop<R>,
{
    type Output = Result<ResponseStream<St, R, OE, OF, OD>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let opening = match this.watch {
            Watch::Off => {
                let opened = ready!(this.inner.poll(cx));
                *this.watch = Watch::Done;
                return Poll::Ready(match opened {
                    Ok(inner) => Ok(ResponseStream {
                        inner: FuseAfterError::new(inner),
                        guard: None,
                    }),
                    Err(err) => Err(err.into()),
                });
            }
            Watch::On(on_open, guard) => (on_open, guard),
            Watch::Done => {
                return Poll::Ready(Err(ToolError::polled_after_completion(
                    "trace::ResponseFuture",
                )))
            }
        };
        let (on_open, guard) = opening;
        let EndGuard { span, state } = &mut **guard;
        let entered = span.enter();
        let opened = ready!(this.inner.poll(cx));
        let result = match opened {
            Ok(inner) => {
                on_open.on_open(state.elapsed(), span);
                Ok(inner)
            }
            Err(err) => {
                let err = err.into();
                state.fail(&err, span);
                Err(err)
            }
        };
        drop(entered);
        let Watch::On(_, guard) = std::mem::replace(this.watch, Watch::Done) else {
            unreachable!("matched above")
        };
        Poll::Ready(result.map(|inner| ResponseStream {
            inner: FuseAfterError::new(inner),
            guard: Some(guard),
        }))
    }
}

pin_project! {
    /// The response stream of [`Trace`](super::Trace): polls the inner
    /// stream inside the call's span, counts the items, and reports the end
    /// of the stream, its (terminal) error, or its drop before the end.
    ///
    /// Unwatched (nothing listened as the call began), it is the inner
    /// stream and a word.
    #[derive(Debug)]
    pub struct ResponseStream<St, R, OE, OF, OD>
    where
        R: Request,
        OE: OnEnd<R>,
        OF: OnFailure<R>,
        OD: OnEarlyDrop<R>,
    {
        // Dropped once the stream ended or failed (an error is the last
        // item), and never polled again.
        #[pin]
        inner: FuseAfterError<St>,
        // `None` when the call is not watched.
        guard: Option<Box<EndGuard<R, OE, OF, OD>>>,
    }
}

impl<St, R, OE, OF, OD> ResponseStream<St, R, OE, OF, OD>
where
    R: Request,
    OE: OnEnd<R>,
    OF: OnFailure<R>,
    OD: OnEarlyDrop<R>,
{
    /// The call's span (disabled when nothing listened as the call began).
    pub fn span(&self) -> &Span {
        static DISABLED: std::sync::LazyLock<Span> = std::sync::LazyLock::new(Span::none);
        self.guard.as_ref().map_or(&DISABLED, |guard| &guard.span)
    }
}

impl<St, T, R, OE, OF, OD> Stream for ResponseStream<St, R, OE, OF, OD>
where
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
    R: Request,
    OE: OnEnd<R>,
    OF: OnFailure<R>,
    OD: OnEarlyDrop<R>,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let Some(guard) = this.guard.as_deref_mut() else {
            return this.inner.poll_next(cx);
        };
        // The end was reported: the span is not entered again.
        if this.inner.is_terminated() {
            return Poll::Ready(None);
        }
        let EndGuard { span, state } = guard;
        let _entered = span.enter();
        let item = ready!(this.inner.poll_next(cx));
        match &item {
            Some(Ok(output)) => state.item(output, span),
            // An error is the last item of a stream: the call ends here,
            // and dropping the stream afterwards is no early drop.
            Some(Err(err)) => state.fail(err, span),
            None => state.end(Outcome::Completed, span),
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

pub(super) struct EndGuard<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> {
    span: Span,
    state: CallState<R, OE, OF, OD>,
}

impl<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> EndGuard<R, OE, OF, OD> {
    pub(super) fn new(
        span: Span,
        start: Option<Instant>,
        output: Option<Box<OutputRecorder>>,
        on_end: OE,
        on_failure: OF,
        on_early_drop: OD,
        tool_error: bool,
    ) -> Self {
        EndGuard {
            span,
            state: CallState {
                tool_error,
                start,
                items: 0,
                bytes: 0,
                output,
                on_end,
                on_failure,
                on_early_drop,
                finish_reason: false,
                ended: false,
                error_type: None,
                metrics: None,
                _request: PhantomData,
            },
        }
    }
}

impl<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> EndGuard<R, OE, OF, OD> {
    /// Records the call's metrics when it ends.
    pub(super) fn with_metrics(mut self, metrics: Option<CallMetrics>) -> Self {
        self.state.metrics = metrics;
        self
    }
}

impl<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> Drop
    for EndGuard<R, OE, OF, OD>
{
    fn drop(&mut self) {
        if !self.state.ended {
            let _entered = self.span.enter();
            self.state.end(Outcome::Cancelled, &self.span);
        }
    }
}

impl<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> fmt::Debug
    for EndGuard<R, OE, OF, OD>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndGuard")
            .field("span", &self.span)
            .field("items", &self.state.items)
            .field("ended", &self.state.ended)
            .finish_non_exhaustive()
    }
}

struct CallState<R, OE, OF, OD> {
    // Read only when something listens: the clock costs more than the rest.
    start: Option<Instant>,
    items: u64,
    bytes: u64,
    // Boxed: recording is opted into, and the common call should not carry
    // its size.
    output: Option<Box<OutputRecorder>>,
    on_end: OE,
    on_failure: OF,
    on_early_drop: OD,
    // Whether the answer told why it stopped (a model call's).
    finish_reason: bool,
    ended: bool,
    // A call that came over MCP fails with `error.type = "tool_error"`
    // (the OpenTelemetry MCP conventions): MCP sends it as `isError`.
    tool_error: bool,
    // What `error.type` the call failed with, for its metrics.
    error_type: Option<&'static str>,
    // What the call records on the metrics when it ends (none without a
    // meter).
    metrics: Option<CallMetrics>,
    // The hooks are generic over the request type; the call's state only
    // names it.
    _request: PhantomData<fn(R)>,
}

impl<R: Request, OE: OnEnd<R>, OF: OnFailure<R>, OD: OnEarlyDrop<R>> CallState<R, OE, OF, OD> {
    fn elapsed(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |start| start.elapsed())
    }

    fn item<T: Output>(&mut self, output: &T, span: &Span) {
        if R::KIND == CallKind::Model {
            self.model_item(output, span);
        }
        self.items += 1;
        // `byte_len` serializes JSON items: only worth it when timed.
        if self.start.is_some() {
            self.bytes += output.byte_len() as u64;
        }
        if let Some(recorder) = &mut self.output {
            recorder.push(output);
        }
        if let Some(metrics) = &mut self.metrics {
            metrics.item(output);
        }
    }

    /// What a model's delta tells of the whole answer, on the span.
    fn model_item<T: Output>(&mut self, delta: &T, span: &Span) {
        if span.is_disabled() {
            return;
        }
        if let (0, Some(start)) = (self.items, self.start) {
            // Seconds, from the call to the first delta, as the
            // conventions measure it.
            span.record(
                "gen_ai.response.time_to_first_chunk",
                start.elapsed().as_secs_f64(),
            );
        }
        delta.record_on(span);
        // The first only: a key recorded twice is exported twice.
        if let (false, Some(reason)) = (self.finish_reason, delta.finish_reason()) {
            self.finish_reason = true;
            record_finish_reason(span, &reason);
        }
    }

    fn fail(&mut self, err: &ToolError, span: &Span) {
        if self.ended {
            return;
        }
        let error_type = if self.tool_error {
            "tool_error"
        } else {
            err.kind().as_str()
        };
        span.record("error.type", error_type);
        span.record("otel.status_code", "ERROR");
        self.error_type = Some(error_type);
        self.on_failure.on_failure(err, self.elapsed(), span);
        self.end(Outcome::Failed, span);
    }

    fn end(&mut self, outcome: Outcome, span: &Span) {
        if self.ended {
            return;
        }
        self.ended = true;
        // An answer that broke off, or that its consumer left, before its
        // finish reason: the conventions' `error` for that choice.
        if R::KIND == CallKind::Model && !self.finish_reason && outcome != Outcome::Completed {
            record_finish_reason(span, "error");
        }
        if let Some(recorder) = &self.output {
            span.record(recorder.field, tracing::field::display(&recorder.text));
        }
        if R::KIND == CallKind::Tool && self.start.is_some() {
            // What the output adds to the model's next prompt, estimated
            // as the budget counts it: the span ends now, before the next
            // model call could say (the agent's `ToolCost` has that).
            let tokens = self.bytes.div_ceil(crate::budget::BYTES_PER_TOKEN as u64);
            span.record(
                "toolstack.tool.result_tokens",
                i64::try_from(tokens).unwrap_or(i64::MAX),
            );
        }
        if let Some(metrics) = self.metrics.take() {
            let error_type = match outcome {
                Outcome::Cancelled => Some("cancelled"),
                Outcome::Completed | Outcome::Failed => self.error_type,
            };
            metrics.end(self.elapsed(), error_type);
        }
        let summary = StreamSummary {
            items: self.items,
            bytes: self.bytes,
            duration: self.elapsed(),
            outcome,
        };
        match outcome {
            Outcome::Cancelled => self.on_early_drop.on_early_drop(&summary, span),
            Outcome::Completed | Outcome::Failed => self.on_end.on_end(&summary, span),
        }
    }
}

/// The start of a call's output — what its items write for the record —
/// up to a length, and the span field it goes to.
#[derive(Debug)]
pub(super) struct OutputRecorder {
    text: BoundedText,
    field: &'static str,
}

impl OutputRecorder {
    pub(super) fn new(max_len: usize, field: &'static str) -> Self {
        OutputRecorder {
            text: BoundedText::new(max_len),
            field,
        }
    }

    fn push<T: Output>(&mut self, output: &T) {
        if !self.text.overflowed {
            // Fails only when the limit is reached, which is the point.
            let _ = output.write_output(&mut self.text);
        }
    }
}

/// Text written up to `limit` bytes; a write past it keeps what fits and
/// fails, which stops a serializer. Displays as the valid UTF-8 written,
/// with `…` when something was cut.
#[derive(Debug)]
pub(super) struct BoundedText {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl BoundedText {
    pub(super) fn new(limit: usize) -> Self {
        BoundedText {
            buf: Vec::new(),
            limit,
            overflowed: false,
        }
    }
}

impl io::Write for BoundedText {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.limit - self.buf.len();
        if bytes.len() > room {
            self.buf.extend_from_slice(&bytes[..room]);
            self.overflowed = true;
            return Err(io::Error::new(io::ErrorKind::WriteZero, "record limit"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Display for BoundedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the cut can leave a character unfinished, at the end.
        let text = match std::str::from_utf8(&self.buf) {
            Ok(text) => text,
            Err(err) => std::str::from_utf8(&self.buf[..err.valid_up_to()]).unwrap_or_default(),
        };
        f.write_str(text)?;
        if self.overflowed {
            f.write_str("…")?;
        }
        Ok(())
    }
}
