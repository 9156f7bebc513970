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
use toolstack::model::{ChatRequest, ModelDelta, ReasoningDelta, Usage};
use toolstack::ToolError;
use tower_service::Service;

use super::meter::{Meter, Reserved, SharedCounters, SharedReservation};
use super::rules::{Counted, Refused, Spent, Wanted};
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
    /// What it holds in the shared store until it settles: what it was
    /// admitted with, and what its answer asked for since.
    shared: Vec<SharedReservation>,
    /// Whether the shared store admitted it (so its answer asks the store
    /// for more too), rather than this process's counters.
    on_store: bool,
}

/// What an answer that wrote past its reservation gets.
enum Extended {
    /// More reserved in this process: it goes on.
    Granted,
    /// The shared store is asked for more.
    Asking(BoxFuture<'static, Result<Reserved, SharedStoreError>>),
    /// No limit has room for more: the answer ends with this.
    Cut(ToolError),
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
            shared: Vec::new(),
            on_store: false,
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
        self.reserved =
            self.meter
                .admit_locally(&self.counted, now, self.wanted, Refused::Model)?;
        Ok(())
    }

    /// Lowers `request`'s `max_tokens` to the output the call's
    /// reservation pays for when the limits capped it below what the call
    /// wanted — never raising it, never below 1 — so that a model that
    /// keeps to it ends its answer there, rather than be cut.
    pub(super) fn fit_output(&self, request: &mut ChatRequest) {
        let held = self.held();
        let whole = self.wanted.whole;
        if held.tokens >= whole.tokens && held.cost >= whole.cost {
            return;
        }
        let paid = u32::try_from(self.output_allowed(None, None))
            .unwrap_or(u32::MAX)
            .max(1);
        request.max_tokens = Some(request.max_tokens.map_or(paid, |asked| asked.min(paid)));
    }

    /// What the call holds, here and in the shared store.
    fn held(&self) -> Spent {
        self.shared.iter().fold(self.reserved, |mut all, shared| {
            all.add(shared.amount);
            all
        })
    }

    /// The model its answer is priced for: the one that answered, when
    /// the table prices it, else the one asked for.
    fn priced_model<'a>(&'a self, answered: Option<&'a str>) -> &'a str {
        answered
            .filter(|model| self.meter.prices.prices(model))
            .or(self.model.as_deref())
            .unwrap_or_default()
    }

    /// How many output tokens the answer may write on what the call
    /// holds, its prompt as `usage` reported it (else estimated).
    fn output_allowed(&self, answered: Option<&str>, usage: Option<&Usage>) -> u64 {
        let prompt = usage
            .map(|usage| usage.prompt_tokens)
            .filter(|&tokens| tokens > 0)
            .unwrap_or(self.wanted.prompt.tokens);
        self.meter
            .output_allowed(self.priced_model(answered), prompt, self.held())
    }

    /// Asks for more for an answer that wrote `over` output tokens past
    /// what the call holds (`output` in all): in this process at once, or
    /// in the shared store that admitted the call.
    fn extend(&mut self, answered: Option<&str>, over: u64, output: u64) -> (Extended, Wanted) {
        let more = self.meter.more(self.priced_model(answered), over);
        let now = self.meter.now();
        if let (true, Some(store)) = (self.on_store, &self.meter.store) {
            let limits = self.meter.limits(&self.counted);
            let asking = store.reserve(&self.counted.keys, &limits, more, now, self.meter.run_ttl);
            return (Extended::Asking(asking), more);
        }
        let extended =
            match self
                .meter
                .admit_locally(&self.counted, now, more, Refused::Cut(output))
            {
                Ok(take) => {
                    self.reserved.add(take);
                    Extended::Granted
                }
                Err(cut) => Extended::Cut(cut),
            };
        (extended, more)
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
            std::mem::take(&mut self.shared),
            usage,
            answered,
            self.model.as_deref(),
        )
    }
}

impl Drop for Metering {
    fn drop(&mut self) {
        if self.reserved == Spent::default() && self.shared.is_empty() {
            return;
        }
        let reserved = std::mem::take(&mut self.reserved);
        let shared = std::mem::take(&mut self.shared);
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
                        mut request,
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
                    metering.fit_output(&mut request);
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
    let wanted = metering.wanted;
    if metering.meter.store.is_none() {
        return metering.admit_locally(now);
    }
    metering.on_store = true;
    granted(metering, now, verdict, wanted, Refused::Model)
}

/// Takes what the shared store reserved for the call (`wanted`, admitted
/// or more for its answer) — or refuses it; when the store gave no
/// answer, reserves on this process's count (fail open) or refuses
/// (fail closed).
fn granted(
    metering: &mut Metering,
    now: u64,
    verdict: Result<Reserved, SharedStoreError>,
    wanted: Wanted,
    refused: Refused,
) -> Result<(), ToolError> {
    let meter = Arc::clone(&metering.meter);
    let Some(store) = &meter.store else {
        return Ok(());
    };
    match verdict {
        Ok(reserved) if reserved.admitted => {
            if let Some(reservation) = reserved.reservation {
                super::meter::reserved_event(reservation.amount, wanted);
                metering.shared.push(reservation);
            }
            Ok(())
        }
        Ok(reserved) => meter.refused(&metering.counted, &reserved.held, wanted, refused),
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
                Fallback::Open => {
                    let take = meter.admit_locally(&metering.counted, now, wanted, refused)?;
                    metering.reserved.add(take);
                    Ok(())
                }
                Fallback::Closed => Err(Meter::unchecked(&**store, err, refused)),
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
    /// inner stream, item for item, watched for what it spends. Its output
    /// is counted as it streams (bytes / 4, or the endpoint's own count
    /// when it reports one); an answer that writes past what its call
    /// reserved asks for more, and ends with a `SpendLimited` error when
    /// no limit has room. When it ends (after its last delta or an error),
    /// what it spent is added to the call's counters — to a shared store
    /// before the end is passed on, so that the next call reads it.
    /// Dropped before its end, it adds what it had written so far.
    pub struct ResponseStream<St> {
        // Dropped once the stream ended or failed (an error is the last
        // item), and never polled again.
        #[pin]
        inner: FuseAfterError<St>,
        metering: Option<Metering>,
        usage: Option<Usage>,
        model: Option<String>,
        // The output's bytes so far: text, reasoning, tool calls.
        written: u64,
        // The output tokens the call's reservation pays for.
        allowed: u64,
        // More asked of the shared store, for the delta held.
        extending: Option<(BoxFuture<'static, Result<Reserved, SharedStoreError>>, Wanted, u64)>,
        // The cut, passed on after the delta that crossed.
        cut: Option<ToolError>,
        // Whether the answer was cut: the inner stream is not polled again.
        ended: bool,
        adding: Option<BoxFuture<'static, ()>>,
        // The end (`None`) or error passed on once the usage is added, or
        // the delta passed on once more is reserved.
        held: Option<Result<ModelDelta, ToolError>>,
    }

    impl<St> PinnedDrop for ResponseStream<St> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let Some(metering) = this.metering.take() else {
                return;
            };
            let spent = spent(this.usage.as_ref(), *this.written, &metering, false);
            spawn(metering.settle(spent, this.model.as_deref()));
        }
    }
}

impl<St> ResponseStream<St> {
    fn new(inner: St, metering: Option<Metering>) -> Self {
        let allowed = metering
            .as_ref()
            .map_or(u64::MAX, |metering| metering.output_allowed(None, None));
        ResponseStream {
            inner: FuseAfterError::new(inner),
            metering,
            usage: None,
            model: None,
            written: 0,
            allowed,
            extending: None,
            cut: None,
            ended: false,
            adding: None,
            held: None,
        }
    }
}

/// The output tokens an answer has written: as the endpoint counted them,
/// or `written` bytes / 4, whichever is more.
fn output_tokens(usage: Option<&Usage>, written: u64) -> u64 {
    usage
        .map_or(0, |usage| usage.completion_tokens)
        .max(written.div_ceil(BYTES_PER_TOKEN))
}

/// About how many bytes a token is, as the prompt is estimated.
const BYTES_PER_TOKEN: u64 = 4;

/// The bytes of output a delta adds.
fn output_bytes(delta: &ModelDelta) -> u64 {
    let bytes = match delta {
        ModelDelta::Text(text) => text.len(),
        ModelDelta::Reasoning(ReasoningDelta::Text(text)) => text.len(),
        ModelDelta::ToolCall(call) => {
            call.arguments.len() + call.name.as_deref().map_or(0, str::len)
        }
        _ => 0,
    };
    bytes as u64
}

/// What an answer spent: the endpoint's report, when it ended with one;
/// else what it wrote (`written` bytes, counted as the endpoint counts,
/// when more) on its prompt (reported, else estimated) — a provider bills
/// an answer cut or dropped for what it wrote. Nothing when it neither
/// wrote nor reported anything.
fn spent(usage: Option<&Usage>, written: u64, metering: &Metering, ended: bool) -> Option<Usage> {
    if ended {
        if let Some(usage) = usage {
            return Some(*usage);
        }
    }
    if written == 0 && usage.is_none() {
        return None;
    }
    let mut spent = usage.copied().unwrap_or_default();
    if spent.prompt_tokens == 0 {
        spent.prompt_tokens = metering.wanted.prompt.tokens;
    }
    spent.completion_tokens = output_tokens(usage, written);
    Some(spent)
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
        if let Some((extending, more, output)) = this.extending {
            let verdict = ready!(extending.as_mut().poll(cx));
            let (more, output) = (*more, *output);
            *this.extending = None;
            if let Some(metering) = this.metering.as_mut() {
                let now = metering.meter.now();
                match granted(metering, now, verdict, more, Refused::Cut(output)) {
                    Ok(()) => {
                        *this.allowed =
                            metering.output_allowed(this.model.as_deref(), this.usage.as_ref());
                    }
                    Err(cut) => *this.cut = Some(cut),
                }
            }
            return Poll::Ready(this.held.take());
        }
        let item = match this.cut.take() {
            // Cut: the answer ends here, its spending added first.
            Some(cut) => {
                *this.ended = true;
                Some(Err(cut))
            }
            None if *this.ended || this.inner.is_terminated() => return Poll::Ready(None),
            None => ready!(this.inner.as_mut().poll_next(cx)),
        };
        match &item {
            Some(Ok(ModelDelta::Usage(usage))) => {
                *this.usage.get_or_insert_with(Usage::default) += *usage;
                if let Some(metering) = this.metering.as_ref() {
                    *this.allowed =
                        metering.output_allowed(this.model.as_deref(), this.usage.as_ref());
                }
                return Poll::Ready(item);
            }
            Some(Ok(ModelDelta::Model(model))) => {
                *this.model = Some(model.clone());
                if let Some(metering) = this.metering.as_ref() {
                    *this.allowed =
                        metering.output_allowed(this.model.as_deref(), this.usage.as_ref());
                }
                return Poll::Ready(item);
            }
            Some(Ok(delta)) => {
                *this.written += output_bytes(delta);
                let output = output_tokens(this.usage.as_ref(), *this.written);
                let over = output.saturating_sub(*this.allowed);
                let Some(metering) = this.metering.as_mut().filter(|_| over > 0) else {
                    return Poll::Ready(item);
                };
                // Past what the call reserved: more, or the cut after this
                // delta (written, so paid for).
                match metering.extend(this.model.as_deref(), over, output) {
                    (Extended::Granted, _) => {
                        *this.allowed =
                            metering.output_allowed(this.model.as_deref(), this.usage.as_ref());
                    }
                    (Extended::Cut(cut), _) => *this.cut = Some(cut),
                    (Extended::Asking(asking), more) => {
                        *this.extending = Some((asking, more, output));
                        *this.held = item;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                return Poll::Ready(item);
            }
            Some(Err(_)) | None => {}
        }
        // The end, or the error that ends it: the spending is added first.
        let Some(metering) = this.metering.take() else {
            return Poll::Ready(item);
        };
        let ended = item.is_none();
        let spent = spent(this.usage.as_ref(), *this.written, &metering, ended);
        match metering.settle(spent, this.model.as_deref()) {
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
