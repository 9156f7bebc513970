//! Turns a panicking tool (or model) into a failed call.
//!
//! A panic in the tool's `call`, in its response future or in any poll of
//! its response stream becomes a [`ToolError`] of kind
//! [`ErrorKind::Panicked`] ("the tool panicked: …", "the model panicked: …");
//! the toolbox, other calls and the runtime are unaffected. After a panic
//! the tool's future or stream is dropped and never polled again: the
//! stream yields the error as its last item, then ends.
//!
//! ```
//! use tower::{ServiceBuilder, ServiceExt};
//! use toolstack::{tool, ErrorKind, ToolError, ToolRequest};
//! use toolstack_layers::catch_panic::CatchPanicLayer;
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let boom = tool::from_fn("boom", |_: serde_json::Value| async {
//!     if true {
//!         panic!("out of cheese");
//!     }
//!     Ok::<_, ToolError>("unreachable")
//! });
//! let tool = ServiceBuilder::new().layer(CatchPanicLayer::new()).service(boom);
//! // The function runs in the call's future: the panic fails the call.
//! let err = tool.oneshot(ToolRequest::new("boom", "{}")).await.map(|_| ()).unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Panicked);
//! assert_eq!(err.message(), "the tool panicked: out of cheese");
//! # }).unwrap();
//! ```
//!
//! The default panic hook still prints the panic; install a quieter hook
//! with [`std::panic::set_hook`] if that is unwanted. A panic while the
//! tool's stream is *dropped* by its consumer is not caught.
//!
//! # Differences from tower-http's `CatchPanic`
//!
//! tower-http's catches a panic in the service's future and answers with a
//! `500` response; this one also catches panics in `poll_ready`, in `call`
//! and in every poll of the response stream, and answers with a typed
//! [`ErrorKind::Panicked`] error that the model can read, naming the tool or
//! the model ("the tool panicked: …").

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::{ErrorKind, ToolError};
use tower_layer::Layer;
use tower_service::Service;

use crate::{CallKind, Request};

/// Wraps a tool or a model in [`CatchPanic`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CatchPanicLayer {
    _priv: (),
}

impl CatchPanicLayer {
    /// A layer that catches the panics of the tool it wraps.
    pub fn new() -> Self {
        CatchPanicLayer { _priv: () }
    }
}

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> CatchPanic<S> {
        CatchPanic::new(inner)
    }
}

/// A tool or a model whose panics become [`ErrorKind::Panicked`] errors;
/// see the [module docs](self).
#[derive(Clone, Debug)]
pub struct CatchPanic<S> {
    inner: S,
}

impl<S> CatchPanic<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        CatchPanic { inner }
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

impl<S, R, St, T> Service<R> for CatchPanic<S>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
{
    type Response = ResponseStream<St>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        // A panic here fails the service, as any `poll_ready` error does; a
        // toolbox polls a fresh clone per call, so other calls go on.
        match catch_unwind(AssertUnwindSafe(|| self.inner.poll_ready(cx))) {
            Ok(poll) => poll.map_err(Into::into),
            Err(payload) => Poll::Ready(Err(panicked(R::KIND, payload))),
        }
    }

    fn call(&mut self, request: R) -> Self::Future {
        let kind = match catch_unwind(AssertUnwindSafe(|| self.inner.call(request))) {
            Ok(future) => Kind::Calling { future },
            Err(payload) => Kind::Done {
                error: Some(panicked(R::KIND, payload)),
            },
        };
        ResponseFuture {
            state: kind,
            kind: R::KIND,
        }
    }
}

pin_project! {
    /// The response future of [`CatchPanic`]: the tool's future, with a
    /// panic (in `call` or in a poll) turned into a [`ErrorKind::Panicked`]
    /// error.
    pub struct ResponseFuture<F> {
        #[pin]
        state: Kind<F>,
        // What the panic message calls the callee.
        kind: CallKind,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Calling { #[pin] future: F },
        // The call panicked (the error is waiting) or the future is finished.
        Done { error: Option<ToolError> },
    }
}

impl<F, St, E, T> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
{
    type Output = Result<ResponseStream<St>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let (mut state, kind) = (this.state, *this.kind);
        let result = match state.as_mut().project() {
            KindProj::Calling { future } => {
                // The stream is wrapped inside the closure: what crosses
                // `catch_unwind` (by copy) is then the result itself, not
                // the inner poll's result and then the wrapped one.
                let polled = catch_unwind(AssertUnwindSafe(|| match future.poll(cx) {
                    Poll::Pending => None,
                    Poll::Ready(Ok(stream)) => Some(Ok(ResponseStream::new(stream, kind))),
                    Poll::Ready(Err(err)) => Some(Err(err.into())),
                }));
                match polled {
                    Ok(None) => return Poll::Pending,
                    Ok(Some(result)) => result,
                    Err(payload) => Err(panicked(kind, payload)),
                }
            }
            KindProj::Done { error } => {
                return Poll::Ready(Err(error.take().unwrap_or_else(|| {
                    ToolError::polled_after_completion("catch_panic::ResponseFuture")
                })))
            }
        };
        drop_quietly(|| state.set(Kind::Done { error: None }));
        Poll::Ready(result)
    }
}

pin_project! {
    /// The response stream of [`CatchPanic`]: the tool's stream until it
    /// panics, then one [`ErrorKind::Panicked`] error, then the end.
    pub struct ResponseStream<St> {
        #[pin]
        inner: Option<St>,
        kind: CallKind,
    }
}

impl<St> ResponseStream<St> {
    fn new(stream: St, kind: CallKind) -> Self {
        ResponseStream {
            inner: Some(stream),
            kind,
        }
    }
}

impl<St, T> Stream for ResponseStream<St>
where
    St: Stream<Item = Result<T, ToolError>>,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        let (mut inner, kind) = (this.inner, *this.kind);
        let Some(stream) = inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        match catch_unwind(AssertUnwindSafe(|| stream.poll_next(cx))) {
            Ok(Poll::Ready(None)) => {
                // An ended stream may panic if polled again; never poll it.
                drop_quietly(|| inner.set(None));
                Poll::Ready(None)
            }
            Ok(Poll::Ready(Some(Err(err)))) => {
                // An error is the last item: drop the stream behind it.
                drop_quietly(|| inner.set(None));
                Poll::Ready(Some(Err(err)))
            }
            Ok(poll) => poll,
            Err(payload) => {
                let err = panicked(kind, payload);
                drop_quietly(|| inner.set(None));
                Poll::Ready(Some(Err(err)))
            }
        }
    }
}

impl<St> std::fmt::Debug for ResponseStream<St> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStream")
            .field("done", &self.inner.is_none())
            .finish_non_exhaustive()
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// Drops a tool's state that was left behind by a panic: its destructor may
/// panic as well, and that must not escape either. (An assignment whose drop
/// unwinds still stores the new value, so the slot is left empty.)
fn drop_quietly(drop: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(drop)).is_err() {
        tracing::error!("a tool panicked while its state was dropped");
    }
}

fn panicked(kind: CallKind, payload: Box<dyn Any + Send>) -> ToolError {
    let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
        format!("the {kind} panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("the {kind} panicked: {s}")
    } else {
        format!("the {kind} panicked")
    };
    tracing::error!(%message, "caught a {kind} panic");
    ToolError::new(ErrorKind::Panicked, message)
}
