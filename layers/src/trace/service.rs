use std::task::{Context, Poll};
use std::time::Instant;

use futures_core::Stream;
use toolstack::ToolError;
use tower_service::Service;

use super::future::{BoundedText, EndGuard, OutputRecorder, ResponseFuture, ResponseStream};
use super::TraceLayer;
use super::{
    DefaultMakeSpan, DefaultOnEarlyDrop, DefaultOnEnd, DefaultOnFailure, DefaultOnOpen, MakeSpan,
    OnEarlyDrop, OnEnd, OnFailure, OnOpen,
};
use crate::{Output, Request};

/// Traces each call of a tool or a model in a span that lives as long as
/// its stream. See the [module docs](super).
#[derive(Debug, Clone)]
pub struct Trace<
    S,
    M = DefaultMakeSpan,
    OO = DefaultOnOpen,
    OE = DefaultOnEnd,
    OF = DefaultOnFailure,
    OD = DefaultOnEarlyDrop,
> {
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

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R, St, T, M, OO, OE, OF, OD> Service<R> for Trace<S, M, OO, OE, OF, OD>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
    M: MakeSpan<R>,
    OO: OnOpen<R> + Clone,
    OE: OnEnd<R> + Clone,
    OF: OnFailure<R> + Clone,
    OD: OnEarlyDrop<R> + Clone,
{
    type Response = ResponseStream<St, R, OE, OF, OD>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future, R, OO, OE, OF, OD>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let layer = &mut self.layer;
        // Asked first, and cheaply: with no subscriber (or one that filters
        // these levels out) the call passes through, building no span and
        // no field, reading no clock, sizing no item.
        let watched = layer.make_span.is_enabled()
            || layer.on_open.is_enabled()
            || layer.on_end.is_enabled()
            || layer.on_failure.is_enabled()
            || layer.on_early_drop.is_enabled()
            || layer.metrics.is_enabled();
        if !watched {
            return ResponseFuture::unwatched(self.inner.call(request));
        }
        let span = layer.make_span.make_span(&request);
        let span_enabled = !span.is_disabled();
        // A call from another process continues its caller's trace.
        #[cfg(feature = "opentelemetry")]
        if let (Some(parent), true) = (
            request.extensions().get::<toolstack::TraceContext>(),
            span_enabled,
        ) {
            use tracing_opentelemetry::OpenTelemetrySpanExt;
            let _ = span.set_parent(parent.to_otel_context());
        }
        let tool_error = request
            .extensions()
            .get::<toolstack::McpAttributes>()
            .is_some();
        let metrics = layer.metrics.call(&request);
        let start = Some(Instant::now());
        if let (Some(max), true) = (layer.record_arguments, span_enabled) {
            let mut input = BoundedText::new(max);
            // Fails only when the limit is reached, which is the point.
            let _ = request.write_input(&mut input);
            span.record(R::KIND.input_field(), tracing::field::display(&input));
        }
        let output = layer
            .record_output
            .filter(|_| span_enabled)
            .map(|max| Box::new(OutputRecorder::new(max, R::KIND.output_field())));

        let inner = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        let guard = EndGuard::new(
            span,
            start,
            output,
            layer.on_end.clone(),
            layer.on_failure.clone(),
            layer.on_early_drop.clone(),
            tool_error,
        )
        .with_metrics(metrics);
        ResponseFuture::watched(inner, layer.on_open.clone(), guard)
    }
}
