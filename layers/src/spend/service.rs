use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::model::{ChatRequest, ModelDelta};
use toolstack::ToolError;
use tower_service::Service;

use super::future::{Metering, ResponseFuture};
use super::meter::Meter;

/// Limits what the model calls through it spend; built by
/// [`SpendLimitLayer`](super::SpendLimitLayer).
///
/// Clones share the counters of the layer that built them. The answer is
/// the inner one, item for item; its usage is added to the counters when
/// it ends.
///
/// The inner service must be `Clone`: with the counters in Redis, each
/// call waits for Redis's answer with a clone of its own, made ready only
/// once the call is admitted.
#[derive(Clone, Debug)]
pub struct SpendLimit<S> {
    inner: S,
    meter: Arc<Meter>,
}

impl<S> SpendLimit<S> {
    pub(super) fn new(inner: S, meter: Arc<Meter>) -> Self {
        SpendLimit { inner, meter }
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

impl<S, St> Service<ChatRequest> for SpendLimit<S>
where
    S: Service<ChatRequest, Response = St> + Clone,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<ModelDelta, ToolError>>,
{
    type Response = super::ResponseStream<St>;
    type Error = ToolError;
    type Future = ResponseFuture<S, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        let now = self.meter.now();
        let counted = self.meter.counted(&request.extensions, now);
        let model = request.model.clone();
        if counted.keys.is_empty() {
            return ResponseFuture::called(self.inner.call(request), None);
        }
        if let Err(refused) = self.meter.check_priced(&counted, model.as_deref()) {
            return ResponseFuture::refused(refused);
        }
        let mut metering = Metering::new(
            Arc::clone(&self.meter),
            counted,
            model,
            self.meter.wanted(&request),
        );
        let Some(store) = &self.meter.store else {
            if let Err(refused) = metering.admit_locally(now) {
                return ResponseFuture::refused(refused);
            }
            metering.fit_output(&mut request);
            return ResponseFuture::called(self.inner.call(request), Some(metering));
        };
        // Every call waits for the store's answer: it goes with a fresh
        // clone, readied only once admitted, and the readiness acquired
        // for this call is given back (as the rate limit's shared path).
        let reading = metering.reserve_shared(&**store, now);
        let fresh = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, fresh);
        drop(service);
        ResponseFuture::reading(reading, self.inner.clone(), request, now, metering)
    }
}
