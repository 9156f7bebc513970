use std::task::{Context, Poll};
use std::time::Instant;

use futures_core::Stream;
use toolstack::{Describe, ToolError, ToolInfo};
use tower_service::Service;

use super::callbacks::{MakeSpan, OnEarlyDrop, OnEnd, OnFailure, OnOpen};
use super::future::{EndGuard, OutputRecorder, Recorded, ResponseFuture, ResponseStream};
use super::TraceLayer;
use crate::{Call, CallOutput};

/// Traces each call of a tool or a model in a span that lives as long as
/// its stream. See the [module docs](super).
#[derive(Debug, Clone)]
pub struct Trace<S, M, OO, OE, OF, OD> {
    inner: S,
    layer: TraceLayer<M, OO, OE, OF, OD>,
}

impl<S, M, OO, OE, OF, OD> Trace<S, M, OO, OE, OF, OD> {
    /// Traces the calls of `inner` as `layer` says.
    pub fn new(inner: S, layer: TraceLayer<M, OO, OE, OF, OD>) -> Self {
        Trace { inner, layer }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Describe, M, OO, OE, OF, OD> Describe for Trace<S, M, OO, OE, OF, OD> {
    fn info(&self) -> &ToolInfo {
        self.inner.info()
    }
}

impl<S, R, St, T, M, OO, OE, OF, OD> Service<R> for Trace<S, M, OO, OE, OF, OD>
where
    R: Call,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: CallOutput,
    M: MakeSpan<R>,
    OO: OnOpen + Clone,
    OE: OnEnd + Clone,
    OF: OnFailure + Clone,
    OD: OnEarlyDrop + Clone,
{
    type Response = ResponseStream<St, OE, OF, OD>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, OO, OE, OF, OD>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let layer = &mut self.layer;
        let span = layer.make_span.make_span(&request);
        let span_enabled = !span.is_disabled();
        let listening = span_enabled
            || layer.on_open.is_enabled()
            || layer.on_end.is_enabled()
            || layer.on_failure.is_enabled()
            || layer.on_early_drop.is_enabled();
        let start = listening.then(Instant::now);
        if let (Some(max), true) = (layer.record_arguments, span_enabled) {
            let mut input = Recorded::new(max);
            // Fails only when the limit is reached, which is the point.
            let _ = request.write_input(&mut input);
            span.record(R::INPUT_FIELD, tracing::field::display(&input));
        }
        let output = layer
            .record_output
            .filter(|_| span_enabled)
            .map(|max| Box::new(OutputRecorder::new(max, R::OUTPUT_FIELD)));

        let inner = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        let guard = EndGuard::new(
            span,
            R::SUBJECT,
            start,
            output,
            layer.on_end.clone(),
            layer.on_failure.clone(),
            layer.on_early_drop.clone(),
        );
        ResponseFuture::new(inner, layer.on_open.clone(), guard)
    }
}
