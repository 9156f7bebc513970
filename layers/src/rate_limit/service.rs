use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::ToolError;
use tower_service::Service;

use super::limiter::{CallKey, Direct, Limiter};
use super::mode::{millis_ceil, Mode};
use super::shared::{Asking, SharedStore};
use super::ResponseFuture;
use crate::Request;

/// Rate-limits calls to the inner service — a tool or a model; built by
/// [`RateLimitLayer`](super::RateLimitLayer).
///
/// Clones share the quota of the layer that built them. The response
/// stream is the inner one, untouched: the limit counts calls, not items.
///
/// The inner service must be `Clone`: a call that has to wait gets its own
/// clone, made ready when the wait is over — and so does every call when
/// the quota is kept in Redis, since each waits for Redis's answer.
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    // One reference count per call and clone, whatever the limit.
    shared: Arc<Shared>,
    mode: Mode,
}

#[derive(Debug)]
struct Shared {
    limiter: Arc<dyn Limiter>,
    // The bucket of the one target this service (and its clones) calls,
    // looked up on its first call: a per-tool limit over one tool in a
    // toolbox is then a direct limiter, checked without a lock or a hash.
    pin: OnceLock<Option<Pinned>>,
    // The store shared by processes (Redis), when the quota lives there;
    // `limiter` is then its fallback.
    store: Option<Arc<dyn SharedStore>>,
}

#[derive(Debug)]
struct Pinned {
    target: Box<str>,
    bucket: Arc<Direct>,
}

impl<S> RateLimit<S> {
    pub(super) fn from_parts(
        inner: S,
        limiter: Arc<dyn Limiter>,
        store: Option<Arc<dyn SharedStore>>,
        mode: Mode,
    ) -> Self {
        RateLimit {
            inner,
            shared: Arc::new(Shared {
                limiter,
                pin: OnceLock::new(),
                store,
            }),
            mode,
        }
    }

    /// Takes one unit of quota for `call`'s bucket.
    #[inline]
    fn check(&self, call: CallKey<'_>) -> Result<(), std::time::Instant> {
        let Shared { limiter, pin, .. } = &*self.shared;
        let pinned = pin.get_or_init(|| {
            limiter.pin(call).map(|bucket| Pinned {
                target: call.name().into(),
                bucket,
            })
        });
        match pinned {
            Some(pinned) if *pinned.target == *call.name() => {
                pinned.bucket.check().map_err(|not| not.earliest_possible())
            }
            _ => limiter.check(call),
        }
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

impl<S, R, St, T> Service<R> for RateLimit<S>
where
    R: Request,
    S: Service<R, Response = St> + Clone,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
{
    type Response = St;
    type Error = ToolError;
    type Future = ResponseFuture<S, S::Future, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if let Some(store) = &self.shared.store {
            // Every call asks the shared store, so every call waits for its
            // answer: like a call waiting for quota below, it goes with a
            // fresh clone, readied only once admitted, and the readiness
            // acquired for this call is given back.
            let store = Arc::clone(store);
            let fresh = self.inner.clone();
            drop(std::mem::replace(&mut self.inner, fresh));
            return ResponseFuture::asking(Asking::new(
                self.inner.clone(),
                request,
                store,
                Arc::clone(&self.shared.limiter),
                self.mode,
            ));
        }
        let earliest = match self.check(CallKey::of(&request)) {
            Ok(()) => return ResponseFuture::called(self.inner.call(request)),
            Err(earliest) => earliest,
        };
        let retry_after =
            earliest.saturating_duration_since(tokio::time::Instant::now().into_std());
        match self
            .mode
            .refusal(&*self.shared.limiter, &request, retry_after)
        {
            Some(error) => ResponseFuture::rejected(error),
            None => {
                tracing::debug!(
                    operation = R::KIND.operation(),
                    target = request.name(),
                    wait_ms = millis_ceil(retry_after),
                    "rate limited; waiting"
                );
                // `self.inner` was made ready for this call, but the call has
                // to wait. A fresh clone goes into the future and gets ready
                // only once the wait is over, so that a waiting call holds no
                // capacity of the inner service (a concurrency permit, a
                // buffer slot) that calls to other buckets could use. The
                // readiness already acquired is given back too (the ready
                // handle is dropped for a fresh one): after `call`, a handle
                // holds nothing, as tower's services do, so a caller may
                // keep it for its next call (the toolbox does).
                let fresh = self.inner.clone();
                drop(std::mem::replace(&mut self.inner, fresh));
                ResponseFuture::waiting(
                    self.inner.clone(),
                    request,
                    Arc::clone(&self.shared.limiter),
                    tokio::time::Instant::from_std(earliest),
                )
            }
        }
    }
}
