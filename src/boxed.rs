//! Type-erased tools: [`BoxTool`] and its response stream [`ToolStream`];
//! and [`FuseAfterError`], which ends a stream at its first error.
//!
//! A toolbox holds tools of many types, so it erases them. Erasure here
//! costs **one allocation per call**: the call's response future and its
//! response stream live in one boxed state machine, which is first driven
//! as the call's future (opening) and then handed out, unchanged, as the
//! response stream.
//!
//! Each call gets a handle of its own to the tool and asks that handle's
//! `poll_ready` before calling it, so a tool that applies back-pressure — a
//! `ConcurrencyLimit`, a `Buffer` — is never called while unready, and one
//! busy tool does not make the others wait. The handle is a spare kept
//! from an earlier call on the same thread, or a clone. Ready at once (the
//! common case), the tool is called as the call is made and the handle is
//! kept as a spare; not ready, the handle goes into the call's state
//! machine, which drives its readiness with the caller's waker (tower's
//! `Oneshot`), keeping its place in any queue. A tool's readiness is asked
//! once with a waker that does nothing, so a tool must (as tower asks) wake
//! the waker of its latest poll.
//!
//! ```
//! use futures_util::StreamExt;
//! use tower::ServiceExt;
//! use toolstack::{tool, BoxTool, ToolRequest};
//!
//! # tokio_test_block_on(async {
//! let echo = tool::from_fn("echo", |args: serde_json::Value| async move {
//!     Ok::<_, toolstack::ToolError>(args)
//! });
//! let boxed = BoxTool::new(echo);
//! let mut stream = boxed.oneshot(ToolRequest::new("echo", r#"{"x":1}"#)).await.unwrap();
//! let item = stream.next().await.unwrap().unwrap();
//! assert_eq!(item.as_json().map(toolstack::Json::value), Some(serde_json::json!({"x": 1})));
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     futures_util::FutureExt::now_or_never(f).unwrap()
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};

use futures_core::stream::FusedStream;
use futures_core::Stream;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::{Describe, ToolError, ToolInfo, ToolOutput, ToolRequest};

/// One item of a tool's response stream.
pub type ToolItem = Result<ToolOutput, ToolError>;

/// A call in progress, erased: first opened, then read as a stream.
trait ErasedCall: Send {
    fn poll_open(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>>;
    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>>;
}

pin_project! {
    /// A stream of results that ends at its first error: after the first
    /// `Err` item, or the end (`None`), it yields `None` forever — and the
    /// inner stream is dropped right then, not when this wrapper is, so
    /// nothing the stream would yield afterwards gets through, the work
    /// behind it stops, and it is never polled after its end.
    ///
    /// An error is the last item of a tool's (or a model's) stream; this
    /// enforces it on a stream that may not keep to it (a [`ToolStream`],
    /// the streams of the layers in `toolstack-layers`). It costs a branch
    /// per poll: no allocation, no extra poll, the stream kept in place.
    ///
    /// ```
    /// use futures_util::{stream, StreamExt};
    /// use toolstack::boxed::FuseAfterError;
    ///
    /// # futures_util::FutureExt::now_or_never(async {
    /// let items = stream::iter([Ok(1), Err("broken"), Ok(2)]);
    /// let seen: Vec<Result<u32, &str>> = FuseAfterError::new(items).collect().await;
    /// assert_eq!(seen, [Ok(1), Err("broken")]);
    /// # }).unwrap();
    /// ```
    #[derive(Debug)]
    pub struct FuseAfterError<St> {
        // `None` once the stream ended or failed.
        #[pin]
        inner: Option<St>,
    }
}

impl<St> FuseAfterError<St> {
    /// Ends `stream` at its first error.
    #[inline]
    pub fn new(stream: St) -> Self {
        FuseAfterError {
            inner: Some(stream),
        }
    }
}

impl<St, T, E> Stream for FuseAfterError<St>
where
    St: Stream<Item = Result<T, E>>,
{
    type Item = Result<T, E>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut inner = self.project().inner;
        let Some(stream) = inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(stream.poll_next(cx));
        if !matches!(item, Some(Ok(_))) {
            inner.set(None);
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            // An error may come first and end it: of the inner stream's
            // lower bound, only one item is sure.
            Some(stream) => {
                let (lower, upper) = stream.size_hint();
                (lower.min(1), upper)
            }
            None => (0, Some(0)),
        }
    }
}

impl<St, T, E> FusedStream for FuseAfterError<St>
where
    St: Stream<Item = Result<T, E>>,
{
    fn is_terminated(&self) -> bool {
        self.inner.is_none()
    }
}

pin_project! {
    #[project = CallStateProj]
    enum CallState<S, Fut, St> {
        Ready { service: S, request: Option<ToolRequest> },
        Opening { #[pin] future: Fut },
        Open { #[pin] stream: St },
        // The tool's readiness failed when the call was made.
        Refused { error: Option<ToolError> },
        // The call failed to open, or its stream ended or failed.
        Done,
    }
}

impl<S, Fut, St> ErasedCall for CallState<S, Fut, St>
where
    S: Service<ToolRequest, Response = St, Future = Fut> + Send,
    S::Error: Into<ToolError>,
    Fut: Future<Output = Result<St, S::Error>> + Send,
    St: Stream<Item = ToolItem> + Send,
{
    fn poll_open(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        loop {
            let next = match self.as_mut().project() {
                CallStateProj::Ready { service, request } => {
                    if let Err(err) = ready!(service.poll_ready(cx)) {
                        self.set(CallState::Done);
                        return Poll::Ready(Err(err.into()));
                    }
                    let Some(request) = request.take() else {
                        self.set(CallState::Done);
                        return Poll::Ready(Err(ToolError::polled_after_completion("a tool call")));
                    };
                    CallState::Opening {
                        future: service.call(request),
                    }
                }
                CallStateProj::Opening { future } => match ready!(future.poll(cx)) {
                    Ok(stream) => CallState::Open { stream },
                    Err(err) => {
                        self.set(CallState::Done);
                        return Poll::Ready(Err(err.into()));
                    }
                },
                CallStateProj::Open { .. } => return Poll::Ready(Ok(())),
                CallStateProj::Refused { error } => {
                    let err = error
                        .take()
                        .unwrap_or_else(|| ToolError::polled_after_completion("a tool call"));
                    self.set(CallState::Done);
                    return Poll::Ready(Err(err));
                }
                CallStateProj::Done => {
                    return Poll::Ready(Err(ToolError::polled_after_completion("a tool call")))
                }
            };
            self.set(next);
        }
    }

    fn poll_item(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        match self.as_mut().project() {
            CallStateProj::Open { stream } => {
                let item = ready!(stream.poll_next(cx));
                // An error is the last item: the tool's stream is dropped
                // here, so nothing it yields afterwards gets through. This is
                // `FuseAfterError`'s rule, kept by the call's own state: `Done`
                // also ends a call that failed to open, and a fuse inside
                // `Open` would add a second tag to every poll of a call.
                if !matches!(item, Some(Ok(_))) {
                    self.set(CallState::Done);
                }
                Poll::Ready(item)
            }
            CallStateProj::Done => Poll::Ready(None),
            // Not opened yet: open first, so a lazily built stream works too.
            _ => match ready!(self.as_mut().poll_open(cx)) {
                Ok(()) => self.poll_item(cx),
                Err(err) => Poll::Ready(Some(Err(err))),
            },
        }
    }
}

// A stream already opened (`ToolStream::new`).
impl<St> ErasedCall for FuseAfterError<St>
where
    St: Stream<Item = ToolItem> + Send,
{
    fn poll_open(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        self.poll_next(cx)
    }
}

/// A type-erased tool response stream.
///
/// Yields [`ToolItem`]s; an error is the last item — enforced, as
/// [`FuseAfterError`] does: after an error the tool's stream is dropped and
/// nothing more is yielded, whatever the tool would have sent. Dropping it
/// drops the tool's own stream, which cancels the tool's work.
pub struct ToolStream {
    inner: Pin<Box<dyn ErasedCall>>,
}

impl ToolStream {
    /// Erases any stream of tool items.
    pub fn new<St>(stream: St) -> Self
    where
        St: Stream<Item = ToolItem> + Send + 'static,
    {
        ToolStream {
            inner: Box::pin(FuseAfterError::new(stream)),
        }
    }

    /// A stream that yields one error and ends.
    pub fn error(err: ToolError) -> Self {
        ToolStream::new(futures_util::stream::once(std::future::ready(Err(err))))
    }

    /// A stream that calls `service` (driving its readiness first) when it
    /// is first polled; a failure to open is yielded as the only item.
    pub fn lazy<S>(service: S, request: ToolRequest) -> Self
    where
        S: Service<ToolRequest> + Send + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        ToolStream {
            inner: Box::pin(CallState::<S, S::Future, S::Response>::Ready {
                service,
                request: Some(request),
            }),
        }
    }
}

impl Stream for ToolStream {
    type Item = ToolItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        self.inner.as_mut().poll_item(cx)
    }
}

impl fmt::Debug for ToolStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolStream").finish_non_exhaustive()
    }
}

/// The future of a call to a [`BoxTool`] or a toolbox: resolves to the
/// response stream once the tool is ready and has accepted the call.
pub struct ResponseFuture {
    state: FutureState,
}

enum FutureState {
    Calling(Pin<Box<dyn ErasedCall>>),
    Failed(ToolError),
    Taken,
}

impl ResponseFuture {
    /// A future that fails at once with `err`.
    pub fn error(err: ToolError) -> Self {
        ResponseFuture {
            state: FutureState::Failed(err),
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<ToolStream, ToolError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::mem::replace(&mut self.state, FutureState::Taken) {
            FutureState::Calling(mut call) => match call.as_mut().poll_open(cx) {
                Poll::Pending => {
                    self.state = FutureState::Calling(call);
                    Poll::Pending
                }
                Poll::Ready(Ok(())) => Poll::Ready(Ok(ToolStream { inner: call })),
                Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            },
            FutureState::Failed(err) => Poll::Ready(Err(err)),
            FutureState::Taken => Poll::Ready(Err(ToolError::polled_after_completion(
                "boxed::ResponseFuture",
            ))),
        }
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

trait ErasedTool: Send + Sync {
    fn call(&self, request: ToolRequest) -> Pin<Box<dyn ErasedCall>>;
}

/// A tool erased, with spare handles of it for calls that find it ready.
struct Erased<S> {
    // Never called: each call's handle is a clone of it, or a spare.
    template: S,
    // Handles that were ready and called, kept for the next call made on
    // the same thread (one slot per thread index, so threads do not share
    // a slot's cache line): a call that finds its tool ready at once then
    // costs no clone of the tool — no reference counts taken and dropped
    // on every `Arc` in its stack, which is what made calls from several
    // threads contend.
    spare: Box<[Spare<S>]>,
}

#[repr(align(128))]
struct Spare<S>(Mutex<Option<Box<S>>>);

/// How many spare slots a tool keeps: the threads that can run at once,
/// to a power of two, at most 64.
fn spare_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 64)
            .next_power_of_two()
    })
}

/// This thread's slot index (the spare slot is this modulo their number).
fn thread_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

impl<S: Clone> Erased<S> {
    fn new(template: S) -> Self {
        Erased {
            template,
            spare: (0..spare_slots())
                .map(|_| Spare(Mutex::new(None)))
                .collect(),
        }
    }
}

impl<S> ErasedTool for Erased<S>
where
    S: Service<ToolRequest> + Clone + Send + Sync + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    S::Response: Stream<Item = ToolItem> + Send + 'static,
{
    fn call(&self, request: ToolRequest) -> Pin<Box<dyn ErasedCall>> {
        let slot = &self.spare[thread_slot() & (self.spare.len() - 1)].0;
        let mut service = slot
            .try_lock()
            .ok()
            .and_then(|mut spare| spare.take())
            .unwrap_or_else(|| Box::new(self.template.clone()));
        // Asked with a waker that does nothing: a tool that is not ready
        // now goes into the call, whose polls drive its readiness with the
        // caller's waker (keeping its place in any queue).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match service.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {
                let future = service.call(request);
                // Called, so unready again and holding nothing: a spare.
                if let Ok(mut spare) = slot.try_lock() {
                    if spare.is_none() {
                        *spare = Some(service);
                    }
                }
                Box::pin(CallState::<S, S::Future, S::Response>::Opening { future })
            }
            Poll::Ready(Err(err)) => Box::pin(CallState::<S, S::Future, S::Response>::Refused {
                error: Some(err.into()),
            }),
            Poll::Pending => Box::pin(CallState::<S, S::Future, S::Response>::Ready {
                service: *service,
                request: Some(request),
            }),
        }
    }
}

/// A type-erased tool with its [`ToolInfo`]: `Clone`, `Send` and `Sync`,
/// so it fits a toolbox, an axum state or a `Buffer`.
///
/// Its `poll_ready` is always ready; each call drives the readiness of its
/// own clone of the wrapped service (see the [module docs](self)).
#[derive(Clone)]
pub struct BoxTool {
    info: Arc<ToolInfo>,
    // Set when the tool is listed under another name than the one it was
    // built with (a nested or renamed toolbox tool): a call goes in under
    // this description's name, as axum strips a nested prefix, so the tool
    // and the layers inside it never see a name they do not know.
    target: Option<Arc<ToolInfo>>,
    inner: Arc<dyn ErasedTool>,
}

impl BoxTool {
    /// Erases a described tool.
    pub fn new<S>(tool: S) -> Self
    where
        S: Describe + Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let info = Arc::new(tool.info().clone());
        BoxTool::with_info(info, tool)
    }

    /// Erases any tool service, described by `info` (for services that do
    /// not carry their own description, such as one wrapped in tower's
    /// stock layers).
    pub fn with_info<S>(info: impl Into<Arc<ToolInfo>>, service: S) -> Self
    where
        S: Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        BoxTool {
            info: info.into(),
            target: None,
            inner: Arc::new(Erased::new(service)),
        }
    }

    /// The same tool, listed as `info` (a new name), still called with the
    /// name and description it was built with.
    ///
    /// Renaming a renamed tool keeps the first target, so however deep a
    /// tool is nested a call rewrites its name once.
    pub(crate) fn renamed(&self, info: Arc<ToolInfo>) -> BoxTool {
        BoxTool {
            target: Some(self.target.clone().unwrap_or_else(|| self.info.clone())),
            info,
            inner: self.inner.clone(),
        }
    }

    /// The tool's description.
    pub fn info(&self) -> &ToolInfo {
        &self.info
    }

    /// The tool's description, shared.
    pub fn info_shared(&self) -> &Arc<ToolInfo> {
        &self.info
    }

    /// Starts a call without `&mut self` (the toolbox's dispatch path).
    ///
    /// The request carries the tool's description from here on
    /// ([`ToolRequest::info`]). A tool listed under another name (see
    /// [`Toolbox::nest`](crate::Toolbox::nest) and
    /// [`Toolbox::rename`](crate::Toolbox::rename)) gets the request under
    /// its own name, with its own description.
    pub fn call_shared(&self, mut request: ToolRequest) -> ResponseFuture {
        match &self.target {
            None => request.set_info(self.info.clone()),
            Some(target) => {
                // `set_name` copies the request's shared call data when a
                // clone holds it too (a retry layer outside): the one cost
                // of a renamed tool, paid only by renamed tools.
                if request.name() != target.name() {
                    request.set_name(target.name().to_owned());
                }
                request.set_info(target.clone());
            }
        }
        ResponseFuture {
            state: FutureState::Calling(self.inner.call(request)),
        }
    }
}

impl Describe for BoxTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl Service<ToolRequest> for BoxTool {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> ResponseFuture {
        self.call_shared(request)
    }
}

impl fmt::Debug for BoxTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("BoxTool");
        f.field("name", &self.info.name());
        if let Some(target) = &self.target {
            f.field("calls", &target.name());
        }
        f.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;

    use futures_util::{FutureExt, StreamExt};

    use super::*;

    /// Yields its items, then `None` once; polled again after that, it
    /// panics. Says when it is dropped.
    struct Scripted {
        items: VecDeque<Result<u32, &'static str>>,
        ended: bool,
        dropped: Arc<AtomicBool>,
    }

    impl Scripted {
        fn new(items: &[Result<u32, &'static str>]) -> (Self, Arc<AtomicBool>) {
            let dropped = Arc::new(AtomicBool::new(false));
            let stream = Scripted {
                items: items.iter().copied().collect(),
                ended: false,
                dropped: Arc::clone(&dropped),
            };
            (stream, dropped)
        }
    }

    impl Stream for Scripted {
        type Item = Result<u32, &'static str>;

        fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            assert!(!self.ended, "polled after its end");
            let item = self.items.pop_front();
            self.ended = item.is_none();
            Poll::Ready(item)
        }
    }

    impl Drop for Scripted {
        fn drop(&mut self) {
            self.dropped.store(true, Ordering::SeqCst);
        }
    }

    fn next<St: Stream + Unpin>(stream: &mut St) -> Option<St::Item> {
        stream.next().now_or_never().expect("the stream is ready")
    }

    #[test]
    fn nothing_is_yielded_after_an_error_and_the_stream_behind_it_is_dropped_at_once() {
        let (inner, dropped) = Scripted::new(&[Ok(1), Err("broken"), Ok(2), Err("again")]);
        let mut fused = FuseAfterError::new(inner);
        assert_eq!(next(&mut fused), Some(Ok(1)));
        assert!(!dropped.load(Ordering::SeqCst));
        assert_eq!(next(&mut fused), Some(Err("broken")));
        assert!(dropped.load(Ordering::SeqCst), "dropped with the error");
        assert!(fused.is_terminated());
        for _ in 0..3 {
            assert_eq!(next(&mut fused), None);
        }
        assert_eq!(fused.size_hint(), (0, Some(0)));
    }

    #[test]
    fn an_ended_stream_is_dropped_and_never_polled_again() {
        let (inner, dropped) = Scripted::new(&[Ok(1)]);
        let mut fused = FuseAfterError::new(inner);
        assert_eq!(next(&mut fused), Some(Ok(1)));
        assert_eq!(next(&mut fused), None);
        assert!(dropped.load(Ordering::SeqCst));
        // `Scripted` would panic here.
        assert_eq!(next(&mut fused), None);
    }

    #[test]
    fn a_tool_stream_yields_nothing_after_an_error() {
        let items = [
            Ok(ToolOutput::text("a")),
            Err(ToolError::new(crate::ErrorKind::Failed, "broken")),
            Ok(ToolOutput::text("b")),
        ];
        let mut stream = ToolStream::new(futures_util::stream::iter(items));
        assert!(matches!(next(&mut stream), Some(Ok(_))));
        assert!(matches!(next(&mut stream), Some(Err(_))));
        assert!(next(&mut stream).is_none());
        assert!(next(&mut stream).is_none());
    }
}
