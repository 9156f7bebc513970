//! Admission through a store that several processes share (Redis, see
//! [`RedisLimiter`](super::RedisLimiter)): a call asks the store for one
//! cell of its bucket, sleeps for as long as the store says when the bucket
//! is empty, and — when the store gives no answer in time — falls back as
//! configured: to the layer's own in-process limiter (fail open) or to an
//! [`Unavailable`](toolstack::ErrorKind::Unavailable) error (fail closed).
//!
//! Nothing here knows Redis: the store is a [`SharedStore`], asked with a
//! key and answering a [`StoreVerdict`]. Without the `redis` feature no
//! store exists, and none of this is reached.

#![cfg_attr(not(feature = "redis"), allow(dead_code))]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::{Instant, Sleep};
use toolstack::{ErrorKind, ToolError};
use tower_service::Service;

use super::limiter::{BucketKey, CallKey, Limiter};
use super::mode::{millis_ceil, Mode};
pub(super) use crate::shared_store::{Fallback, SharedStoreError};
use crate::Request;

/// What a shared store answers when asked for one cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StoreVerdict {
    /// The cell was taken: the call may go.
    Allowed,
    /// The bucket is empty; one cell comes back after this long.
    Wait(Duration),
}

/// A store of buckets that several processes share.
pub(super) trait SharedStore: fmt::Debug + Send + Sync {
    /// The store's name in events and messages: `redis`.
    fn name(&self) -> &'static str;

    /// What a call does when the store gives no verdict.
    fn fallback(&self) -> Fallback;

    /// The store's key for `bucket`.
    fn key(&self, bucket: BucketKey<'_>) -> Arc<str>;

    /// Takes one cell from the bucket under `key`, or says how long until
    /// one comes back. Resolves within the store's command timeout.
    fn take(&self, key: &Arc<str>) -> BoxFuture<'static, Result<StoreVerdict, SharedStoreError>>;
}

/// A call being admitted through a shared store: the state of
/// [`ResponseFuture`](super::ResponseFuture) until the call is made.
pub(super) struct Asking<S, R> {
    step: AdmissionStep,
    // Slept on when the store (or, failing open, the local limiter) says
    // to wait; one timer for the call, reset for each wait.
    sleep: Option<Pin<Box<Sleep>>>,
    // A clone of the inner service, made ready only once the call is
    // admitted: a waiting call holds none of the inner service's capacity.
    service: S,
    request: Option<R>,
    store: Arc<dyn SharedStore>,
    key: Arc<str>,
    limiter: Arc<dyn Limiter>,
    mode: Mode,
    // Only the first refusal is weighed against `wait_at_most`, as on the
    // local path: later ones mean another call took the cell woken for.
    refused: bool,
    // The call's deadline, lent to `call`: past it, no quota is asked for
    // and the call is not made.
    deadline: Option<crate::call_context::Deadline>,
}

/// Where a call's admission through the store is.
enum AdmissionStep {
    /// Waiting for the store's verdict.
    Ask(BoxFuture<'static, Result<StoreVerdict, SharedStoreError>>),
    /// Sleeping until the store may allow the call; then ask again.
    SleepThenAsk,
    /// The store failed and the call fails open: the local limiter decides.
    Local,
    /// Sleeping until the local limiter may allow the call.
    SleepThenLocal,
    /// Admitted: the service is made ready and called.
    Admitted,
}

impl<S, R: Request> Asking<S, R> {
    pub(super) fn new(
        service: S,
        request: R,
        store: Arc<dyn SharedStore>,
        limiter: Arc<dyn Limiter>,
        mode: Mode,
    ) -> Self {
        let key = store.key(limiter.bucket_key(CallKey::of(&request)));
        Asking {
            step: AdmissionStep::Ask(store.take(&key)),
            sleep: None,
            service,
            request: Some(request),
            store,
            key,
            limiter,
            mode,
            refused: false,
            deadline: crate::call_context::deadline(),
        }
    }

    fn sleep_until(&mut self, until: Instant) {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(until),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(until))),
        }
    }

    /// A refusal of the call, when its mode does not let it wait
    /// `retry_after` (only the first time it is told to wait).
    fn refuse(&mut self, request: &R, retry_after: Duration) -> Option<ToolError> {
        if std::mem::replace(&mut self.refused, true) {
            return None;
        }
        self.mode.refusal(&*self.limiter, request, retry_after)
    }

    /// Drives the admission; resolves to the inner service's response
    /// future once the call is made, or to the error that refused it.
    pub(super) fn poll_call(&mut self, cx: &mut Context<'_>) -> Poll<Result<S::Future, ToolError>>
    where
        S: Service<R>,
        S::Error: Into<ToolError>,
    {
        loop {
            match &mut self.step {
                AdmissionStep::Ask(ask) => {
                    let verdict = ready!(ask.as_mut().poll(cx));
                    let Some(request) = self.request.take() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let outcome = self.decide(&request, verdict);
                    self.request = Some(request);
                    if let Err(err) = outcome {
                        return Poll::Ready(Err(err));
                    }
                }
                AdmissionStep::SleepThenAsk | AdmissionStep::SleepThenLocal => {
                    if let Some(sleep) = &mut self.sleep {
                        // Past the deadline the call is held, and asks for
                        // no quota (`call_context.rs`).
                        if sleep.as_mut().poll(cx).is_pending()
                            || crate::call_context::too_late(self.deadline)
                        {
                            // A timeout above that expires now says so.
                            crate::call_context::report(crate::call_context::Wait::Quota {
                                ready_at: sleep.deadline(),
                            });
                            return Poll::Pending;
                        }
                    }
                    self.step = match self.step {
                        AdmissionStep::SleepThenAsk => {
                            AdmissionStep::Ask(self.store.take(&self.key))
                        }
                        _ => AdmissionStep::Local,
                    };
                }
                AdmissionStep::Local => {
                    let Some(request) = self.request.take() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let outcome = match self.limiter.check(CallKey::of(&request)) {
                        Ok(()) => {
                            self.step = AdmissionStep::Admitted;
                            Ok(())
                        }
                        Err(earliest) => {
                            let until = Instant::from_std(earliest);
                            let retry_after = until.saturating_duration_since(Instant::now());
                            match self.refuse(&request, retry_after) {
                                Some(err) => Err(err),
                                None => {
                                    self.sleep_until(until);
                                    self.step = AdmissionStep::SleepThenLocal;
                                    Ok(())
                                }
                            }
                        }
                    };
                    self.request = Some(request);
                    if let Err(err) = outcome {
                        return Poll::Ready(Err(err));
                    }
                }
                AdmissionStep::Admitted => {
                    match self.service.poll_ready(cx) {
                        Poll::Ready(Ok(())) if !crate::call_context::too_late(self.deadline) => {}
                        Poll::Ready(Err(err)) => return Poll::Ready(Err(err.into())),
                        Poll::Ready(Ok(())) | Poll::Pending => {
                            crate::call_context::report(crate::call_context::Wait::Permit);
                            return Poll::Pending;
                        }
                    }
                    let Some(request) = self.request.take() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let service = &mut self.service;
                    return Poll::Ready(Ok(crate::call_context::lend_later(self.deadline, || {
                        service.call(request)
                    })));
                }
            }
        }
    }

    /// The next step after the store's `verdict`, or the error that ends
    /// the call.
    fn decide(
        &mut self,
        request: &R,
        verdict: Result<StoreVerdict, SharedStoreError>,
    ) -> Result<(), ToolError> {
        match verdict {
            Ok(StoreVerdict::Allowed) => self.step = AdmissionStep::Admitted,
            Ok(StoreVerdict::Wait(retry_after)) => {
                if let Some(err) = self.refuse(request, retry_after) {
                    return Err(err);
                }
                tracing::debug!(
                    operation = R::KIND.operation(),
                    target = request.name(),
                    toolstack.rate_limit.store = self.store.name(),
                    wait_ms = millis_ceil(retry_after),
                    "rate limited by the shared quota; waiting"
                );
                self.sleep_until(Instant::now() + retry_after);
                self.step = AdmissionStep::SleepThenAsk;
            }
            Err(err) => {
                let fallback = self.store.fallback();
                // On the call's span (polled inside the trace layer's), so a
                // trace shows which calls the shared quota did not decide.
                tracing::warn!(
                    operation = R::KIND.operation(),
                    target = request.name(),
                    toolstack.rate_limit.store = self.store.name(),
                    toolstack.rate_limit.fallback = fallback.as_str(),
                    error = %err,
                    "the shared rate limit's store is unreachable"
                );
                match fallback {
                    Fallback::Open => self.step = AdmissionStep::Local,
                    Fallback::Closed => {
                        return Err(ToolError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "the shared rate limit for {} could not be checked: its store ({}) is unreachable; the {} never started",
                                self.limiter.bucket_name(CallKey::of(request)),
                                self.store.name(),
                                R::KIND,
                            ),
                        )
                        .with_source(err));
                    }
                }
            }
        }
        Ok(())
    }
}

impl<S, R> fmt::Debug for Asking<S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            AdmissionStep::Ask(_) => "ask",
            AdmissionStep::SleepThenAsk => "sleep, then ask",
            AdmissionStep::Local => "local",
            AdmissionStep::SleepThenLocal => "sleep, then local",
            AdmissionStep::Admitted => "admitted",
        };
        f.debug_struct("Asking")
            .field("store", &self.store)
            .field("key", &self.key)
            .field("step", &step)
            .finish()
    }
}

fn polled_after_completion() -> ToolError {
    ToolError::polled_after_completion("rate_limit::ResponseFuture")
}
