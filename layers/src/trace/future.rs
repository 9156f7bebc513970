use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::ToolError;
use tracing::Span;

use super::callbacks::{OnEarlyDrop, OnEnd, OnFailure, OnOpen, Outcome, StreamSummary};
use crate::CallOutput;

pin_project! {
    /// The response future of [`Trace`](super::Trace): polls the inner
    /// future inside the call's span and reports the opening or the failure.
    ///
    /// Dropping it before it resolves reports an early drop.
    #[derive(Debug)]
    pub struct ResponseFuture<F, OO, OE, OF, OD>
    where
        OE: OnEnd,
        OF: OnFailure,
        OD: OnEarlyDrop,
    {
        #[pin]
        inner: F,
        on_open: OO,
        // Taken when the future resolves: moved into the stream, or ended.
        guard: Option<EndGuard<OE, OF, OD>>,
    }
}

impl<F, OO, OE, OF, OD> ResponseFuture<F, OO, OE, OF, OD>
where
    OE: OnEnd,
    OF: OnFailure,
    OD: OnEarlyDrop,
{
    pub(super) fn new(inner: F, on_open: OO, guard: EndGuard<OE, OF, OD>) -> Self {
        ResponseFuture {
            inner,
            on_open,
            guard: Some(guard),
        }
    }
}

impl<F, St, E, OO, OE, OF, OD> Future for ResponseFuture<F, OO, OE, OF, OD>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    OO: OnOpen,
    OE: OnEnd,
    OF: OnFailure,
    OD: OnEarlyDrop,
{
    type Output = Result<ResponseStream<St, OE, OF, OD>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let EndGuard { span, state } = this
            .guard
            .as_mut()
            .expect("trace::ResponseFuture polled after completion");
        let entered = span.enter();
        match ready!(this.inner.poll(cx)) {
            Ok(inner) => {
                this.on_open
                    .on_open_of(state.subject, state.elapsed(), span);
                drop(entered);
                let guard = this.guard.take().expect("checked above");
                Poll::Ready(Ok(ResponseStream { inner, guard }))
            }
            Err(err) => {
                let err = err.into();
                state.fail(&err, span);
                drop(entered);
                this.guard.take();
                Poll::Ready(Err(err))
            }
        }
    }
}

pin_project! {
    /// The response stream of [`Trace`](super::Trace): polls the inner
    /// stream inside the call's span, counts the items, and reports the end
    /// of the stream, its (terminal) error, or its drop before the end.
    #[derive(Debug)]
    pub struct ResponseStream<St, OE, OF, OD>
    where
        OE: OnEnd,
        OF: OnFailure,
        OD: OnEarlyDrop,
    {
        #[pin]
        inner: St,
        guard: EndGuard<OE, OF, OD>,
    }
}

impl<St, OE, OF, OD> ResponseStream<St, OE, OF, OD>
where
    OE: OnEnd,
    OF: OnFailure,
    OD: OnEarlyDrop,
{
    /// The call's span.
    pub fn span(&self) -> &Span {
        &self.guard.span
    }
}

impl<St, T, OE, OF, OD> Stream for ResponseStream<St, OE, OF, OD>
where
    St: Stream<Item = Result<T, ToolError>>,
    T: CallOutput,
    OE: OnEnd,
    OF: OnFailure,
    OD: OnEarlyDrop,
{
    type Item = Result<T, ToolError>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let EndGuard { span, state } = this.guard;
        let _entered = span.enter();
        let item = ready!(this.inner.poll_next(cx));
        match &item {
            Some(Ok(output)) => state.item(output),
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

/// The per-call bookkeeping, moved from the future into the stream.
///
/// Not pinned, so it can move; its `Drop` notices a consumer that walked
/// away before the call's end.
pub(super) struct EndGuard<OE: OnEnd, OF: OnFailure, OD: OnEarlyDrop> {
    span: Span,
    state: CallState<OE, OF, OD>,
}

impl<OE: OnEnd, OF: OnFailure, OD: OnEarlyDrop> EndGuard<OE, OF, OD> {
    pub(super) fn new(
        span: Span,
        subject: &'static str,
        start: Option<Instant>,
        output: Option<Box<OutputRecorder>>,
        on_end: OE,
        on_failure: OF,
        on_early_drop: OD,
    ) -> Self {
        EndGuard {
            span,
            state: CallState {
                subject,
                start,
                items: 0,
                bytes: 0,
                output,
                on_end,
                on_failure,
                on_early_drop,
                ended: false,
            },
        }
    }
}

impl<OE: OnEnd, OF: OnFailure, OD: OnEarlyDrop> Drop for EndGuard<OE, OF, OD> {
    fn drop(&mut self) {
        if !self.state.ended {
            let _entered = self.span.enter();
            self.state.end(Outcome::Cancelled, &self.span);
        }
    }
}

impl<OE: OnEnd, OF: OnFailure, OD: OnEarlyDrop> fmt::Debug for EndGuard<OE, OF, OD> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndGuard")
            .field("span", &self.span)
            .field("items", &self.state.items)
            .field("ended", &self.state.ended)
            .finish_non_exhaustive()
    }
}

struct CallState<OE, OF, OD> {
    /// What answers the call, for the hooks ([`Call::SUBJECT`](crate::Call::SUBJECT)).
    subject: &'static str,
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
    ended: bool,
}

impl<OE: OnEnd, OF: OnFailure, OD: OnEarlyDrop> CallState<OE, OF, OD> {
    fn elapsed(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |start| start.elapsed())
    }

    fn item<T: CallOutput>(&mut self, output: &T) {
        self.items += 1;
        // `size_hint` serializes JSON items: only worth it when timed.
        if self.start.is_some() {
            self.bytes += output.size_hint() as u64;
        }
        if let Some(recorder) = &mut self.output {
            recorder.push(output);
        }
    }

    fn fail(&mut self, err: &ToolError, span: &Span) {
        if self.ended {
            return;
        }
        span.record("error.type", err.kind().as_str());
        span.record("otel.status_code", "ERROR");
        self.on_failure
            .on_failure_of(self.subject, err, self.elapsed(), span);
        self.end(Outcome::Failed, span);
    }

    fn end(&mut self, outcome: Outcome, span: &Span) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(recorder) = &self.output {
            span.record(recorder.field, tracing::field::display(&recorder.text));
        }
        let summary = StreamSummary {
            items: self.items,
            bytes: self.bytes,
            duration: self.elapsed(),
            outcome,
        };
        match outcome {
            Outcome::Cancelled => self
                .on_early_drop
                .on_early_drop_of(self.subject, &summary, span),
            Outcome::Completed | Outcome::Failed => {
                self.on_end.on_end_of(self.subject, &summary, span)
            }
        }
    }
}

/// The start of a call's output — what its items write for the record —
/// up to a length, and the span field it goes to.
#[derive(Debug)]
pub(super) struct OutputRecorder {
    text: Recorded,
    field: &'static str,
}

impl OutputRecorder {
    pub(super) fn new(max_len: usize, field: &'static str) -> Self {
        OutputRecorder {
            text: Recorded::new(max_len),
            field,
        }
    }

    fn push<T: CallOutput>(&mut self, output: &T) {
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
pub(super) struct Recorded {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl Recorded {
    pub(super) fn new(limit: usize) -> Self {
        Recorded {
            buf: Vec::new(),
            limit,
            overflowed: false,
        }
    }
}

impl io::Write for Recorded {
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

impl fmt::Display for Recorded {
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
