use std::task::{Context, Poll};
use std::time::Instant;

use futures_core::Stream;
use toolstack::{Describe, ToolError, ToolInfo, ToolItem, ToolRequest};
use tower_service::Service;

use super::callbacks::{MakeSpan, OnEarlyDrop, OnEnd, OnFailure, OnOpen};
use super::future::{EndGuard, OutputRecorder, ResponseFuture, ResponseStream, Truncated};
use super::TraceLayer;

/// Traces each call of a tool in a span that lives as long as its stream.
/// See the [module docs](super).
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

impl<S, St, M, OO, OE, OF, OD> Service<ToolRequest> for Trace<S, M, OO, OE, OF, OD>
where
    S: Service<ToolRequest, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = ToolItem>,
    M: MakeSpan,
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

    fn call(&mut self, request: ToolRequest) -> Self::Future {
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
            span.record(
                "gen_ai.tool.call.arguments",
                tracing::field::display(Truncated {
                    s: request.arguments(),
                    max,
                }),
            );
        }
        let output = layer
            .record_output
            .filter(|_| span_enabled)
            .map(OutputRecorder::new);

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
        );
        ResponseFuture::new(inner, layer.on_open.clone(), guard)
    }
}
