use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::stream::FusedStream;
use futures_core::Stream;
use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use toolstack::boxed::FuseAfterError;
use toolstack::model::{ChatRequest, ModelDelta, Usage};
use toolstack::ToolError;
use tower_service::Service;

use super::meter::{Meter, Reserved, SharedCounters, SharedReservation};
use super::rules::{Counted, Spent, Wanted};
use crate::shared_store::{Fallback, SharedStoreError};

/// What a call reserved, and adds to its counters when its answer ends.
/// Dropped unsettled — the call failed, was refused by the store, or its
/// future or answer was dropped — it gives its reservation back.
pub(super) struct Metering {
    meter: Arc<Meter>,
    /// The call's counters, and which limit reads which.
    counted: Counted,
    /// The model asked for (priced unless the answer names another).
    model: Option<Arc<str>>,
    /// What the call may spend at most.
    wanted: Wanted,
    /// What it holds in this process's counters until it settles.
    reserved: Spent,
    /// What it holds in the shared store until it settles.
    shared: Option<SharedReservation>,
}

impl Metering {
    pub(super) fn new(
        meter: Arc<Meter>,
        counted: Counted,
        model: Option<Arc<str>>,
        wanted: Wanted,
    ) -> Self {
        Metering {
            meter,
            counted,
            model,
            wanted,
            reserved: Spent::default(),
            shared: None,
        }
    }

    /// Asks the shared store to reserve what the call may spend.
    pub(super) fn reserve_shared(
        &self,
        store: &dyn SharedCounters,
        now: u64,
    ) -> BoxFuture<'static, Result<Reserved, SharedStoreError>> {
        let limits = self.meter.limits(&self.counted);
        store.reserve(
            &self.counted.keys,
            &limits,
            self.wanted,
            now,
            self.meter.run_ttl,
        )
    }

    /// Admits the call on this process's counters, holding what it
    /// reserved until it settles.
    pub(super) fn admit_locally(&mut self, now: u64) -> Result<(), ToolError> {
        self.reserved = self.meter.admit_locally(&self.counted, now, self.wanted)?;
        Ok(())
    }

    /// Gives the reservation back and adds `usage` (if the answer
    /// reported any), priced for the model that answered; the future adds
    /// it to the shared store.
    fn settle(
        mut self,
        usage: Option<Usage>,
        answered: Option<&str>,
    ) -> Option<BoxFuture<'static, ()>> {
        let reserved = std::mem::take(&mut self.reserved);
        self.meter.settle(
            &self.counted.keys,
            reserved,
            self.shared.take(),
            usage,
            answered,
            self.model.as_deref(),
        )
    }
}

impl Drop for Metering {
    fn drop(&mut self) {
        if self.reserved == Spent::default() && self.shared.is_none() {
            return;
        }
        let reserved = std::mem::take(&mut self.reserved);
        let shared = self.shared.take();
        let release = self
            .meter
            .settle(&self.counted.keys, reserved, shared, None, None, None);
        spawn(release);
    }
}

pin_project! {
    /// The response future of [`SpendLimit`](super::SpendLimit): the
    /// refusal of a call over a limit, or — after the shared store's
    /// answer, when the counters are there — the inner call.
    pub struct ResponseFuture<S, F> {
        #[pin]
        called: Option<F>,
        state: State<S>,
        metering: Option<Metering>,
    }
}

enum State<S> {
    Refused(ToolError),
    Reading {
        reading: BoxFuture<'static, Result<Reserved, SharedStoreError>>,
        service: S,
        request: ChatRequest,
        now: u64,
        // The call's deadline, lent to `call`: past it, the call is held,
        // never made (`call_context.rs`).
        deadline: Option<crate::call_context::Deadline>,
    },
    Admitted {
        service: S,
        request: ChatRequest,
        deadline: Option<crate::call_context::Deadline>,
    },
    Called,
    Done,
}

impl<S, F> ResponseFuture<S, F> {
    pub(super) fn called(future: F, metering: Option<Metering>) -> Self {
        ResponseFuture {
            called: Some(future),
            state: State::Called,
            metering,
        }
    }

    pub(super) fn refused(error: ToolError) -> Self {
        ResponseFuture {
            called: None,
            state: State::Refused(error),
            metering: None,
        }
    }

    pub(super) fn reading(
        reading: BoxFuture<'static, Result<Reserved, SharedStoreError>>,
        service: S,
        request: ChatRequest,
        now: u64,
        metering: Metering,
    ) -> Self {
        ResponseFuture {
            called: None,
            state: State::Reading {
                reading,
                service,
                request,
                now,
                deadline: crate::call_context::deadline(),
            },
            metering: Some(metering),
        }
    }
}

impl<S, F, St, E> Future for ResponseFuture<S, F>
where
    S: Service<ChatRequest, Future = F, Error = E>,
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
{
    type Output = Result<ResponseStream<St>, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Some(called) = this.called.as_mut().as_pin_mut() {
                let answer = ready!(called.poll(cx));
                this.called.set(None);
                *this.state = State::Done;
                return Poll::Ready(match answer {
                    Ok(stream) => Ok(ResponseStream::new(stream, this.metering.take())),
                    Err(err) => {
                        // The call failed: its reservation goes back now.
                        this.metering.take();
                        Err(err.into())
                    }
                });
            }
            match this.state {
                State::Reading { reading, .. } => {
                    let verdict = ready!(reading.as_mut().poll(cx));
                    let State::Reading {
                        service,
                        request,
                        now,
                        deadline,
                        ..
                    } = std::mem::replace(this.state, State::Done)
                    else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let Some(metering) = this.metering.as_mut() else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let admitted = decide(metering, now, verdict);
                    if let Err(err) = admitted {
                        return Poll::Ready(Err(err));
                    }
                    *this.state = State::Admitted {
                        service,
                        request,
                        deadline,
                    };
                }
                State::Admitted {
                    service, deadline, ..
                } => {
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) if !crate::call_context::too_late(*deadline) => {}
                        Poll::Ready(Err(err)) => {
                            *this.state = State::Done;
                            return Poll::Ready(Err(err.into()));
                        }
                        Poll::Ready(Ok(())) | Poll::Pending => {
                            crate::call_context::report(crate::call_context::Wait::Permit);
                            return Poll::Pending;
                        }
                    }
                    let State::Admitted {
                        mut service,
                        request,
                        deadline,
                    } = std::mem::replace(this.state, State::Called)
                    else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    let called =
                        crate::call_context::lend_later(deadline, || service.call(request));
                    this.called.set(Some(called));
                }
                State::Refused(_) => {
                    let State::Refused(err) = std::mem::replace(this.state, State::Done) else {
                        return Poll::Ready(Err(polled_after_completion()));
                    };
                    return Poll::Ready(Err(err));
                }
                State::Called | State::Done => {
                    return Poll::Ready(Err(polled_after_completion()));
                }
            }
        }
    }
}

/// Whether the call goes, after the shared store's `verdict`: on what it
/// says was spent, or — when it gave no answer — on this process's count
/// (fail open) or not at all (fail closed).
fn decide(
    metering: &mut Metering,
    now: u64,
    verdict: Result<Reserved, SharedStoreError>,
) -> Result<(), ToolError> {
    let meter = Arc::clone(&metering.meter);
    let Some(store) = &meter.store else {
        return metering.admit_locally(now);
    };
    match verdict {
        Ok(reserved) if reserved.admitted => {
            metering.shared = reserved.reservation;
            Ok(())
        }
        Ok(reserved) => meter.refused(&metering.counted, &reserved.held, metering.wanted),
        Err(err) => {
            let fallback = store.fallback();
            // On the call's span (polled inside the trace layer's), so a
            // trace shows which calls the shared counters did not check.
            tracing::warn!(
                toolstack.spend.store = store.name(),
                toolstack.spend.fallback = fallback.as_str(),
                error = %err,
                "the shared spend limit's store is unreachable"
            );
            match fallback {
                Fallback::Open => metering.admit_locally(now),
                Fallback::Closed => Err(Meter::unchecked(&**store, err)),
            }
        }
    }
}

impl<S, F> fmt::Debug for ResponseFuture<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Refused(_) => "refused",
            State::Reading { .. } => "reading",
            State::Admitted { .. } => "admitted",
            State::Called => "called",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// The answer of a call through [`SpendLimit`](super::SpendLimit): the
    /// inner stream, item for item, watched for its usage. When it ends
    /// (after its last delta or an error), the usage reported is added to
    /// the call's counters — to a shared store before the end is passed
    /// on, so that the next call reads it. Dropped before its end, it adds
    /// what was reported so far.
    pub struct ResponseStream<St> {
        // Dropped once the stream ended or failed (an error is the last
        // item), and never polled again.
        #[pin]
        inner: FuseAfterError<St>,
        metering: Option<Metering>,
        usage: Option<Usage>,
        model: Option<String>,
        adding: Option<BoxFuture<'static, ()>>,
        // The end (`None`) or error passed on once the usage is added.
        held: Option<Result<ModelDelta, ToolError>>,
    }

    impl<St> PinnedDrop for ResponseStream<St> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let Some(metering) = this.metering.take() else {
                return;
            };
            spawn(metering.settle(this.usage.take(), this.model.as_deref()));
        }
    }
}

impl<St> ResponseStream<St> {
    fn new(inner: St, metering: Option<Metering>) -> Self {
        ResponseStream {
            inner: FuseAfterError::new(inner),
            metering,
            usage: None,
            model: None,
            adding: None,
            held: None,
        }
    }
}

impl<St> Stream for ResponseStream<St>
where
    St: Stream<Item = Result<ModelDelta, ToolError>>,
{
    type Item = Result<ModelDelta, ToolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if let Some(adding) = this.adding {
            ready!(adding.as_mut().poll(cx));
            *this.adding = None;
            return Poll::Ready(this.held.take());
        }
        if this.inner.is_terminated() {
            return Poll::Ready(None);
        }
        let item = ready!(this.inner.as_mut().poll_next(cx));
        match &item {
            Some(Ok(ModelDelta::Usage(usage))) => {
                *this.usage.get_or_insert_with(Usage::default) += *usage;
                return Poll::Ready(item);
            }
            Some(Ok(ModelDelta::Model(model))) => {
                *this.model = Some(model.clone());
                return Poll::Ready(item);
            }
            Some(Ok(_)) => return Poll::Ready(item),
            Some(Err(_)) | None => {}
        }
        // The end, or the error that ends it: the usage is added first.
        let Some(metering) = this.metering.take() else {
            return Poll::Ready(item);
        };
        match metering.settle(this.usage.take(), this.model.as_deref()) {
            None => Poll::Ready(item),
            Some(mut adding) => match adding.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(item),
                Poll::Pending => {
                    *this.adding = Some(adding);
                    *this.held = item;
                    Poll::Pending
                }
            },
        }
    }
}

impl<St> fmt::Debug for ResponseStream<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseStream")
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

/// Runs what a drop cannot wait for — telling the shared store — on a
/// task of its own, when there is a runtime to run it (this process
/// counted it already).
fn spawn(telling: Option<BoxFuture<'static, ()>>) {
    if let (Some(telling), Ok(runtime)) = (telling, tokio::runtime::Handle::try_current()) {
        runtime.spawn(telling);
    }
}

fn polled_after_completion() -> ToolError {
    ToolError::polled_after_completion("spend::ResponseFuture")
}
