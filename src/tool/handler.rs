//! The shapes of function a tool can be built from, behind one trait.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;

use super::ToolContext;
use crate::ToolError;

/// A function a [`FnTool`](super::FnTool) calls: takes decoded arguments
/// (and, for the `*_with_context` shapes, a [`ToolContext`]) and answers
/// with a stream of typed items.
///
/// Implemented by the wrappers [`AsyncFn`], [`AsyncFnWithContext`],
/// [`StreamFn`] and [`StreamFnWithContext`]; the constructors in
/// [`tool`](super) pick the right one.
pub trait Handler<Args> {
    /// The type of one output item, before encoding.
    type Item;
    /// The stream of output items: polled in place by the tool's response
    /// future until it begins answering, then what is left of it
    /// ([`Running::Rest`]) moves into the response stream.
    type Stream: Running<Item = Result<Self::Item, ToolError>>;
    /// Whether the function reads its context (which then carries a live
    /// progress reporter).
    const WANTS_CONTEXT: bool;
    /// Starts the function. Nothing runs until the stream is polled (by
    /// the tool's response future, until its first item).
    fn call(&self, args: Args, context: ToolContext) -> Self::Stream;
}

/// A handler's stream, polled in place (pinned) by the tool's response
/// future until the call begins answering — its first item, its end, or
/// (for a function that reads its context) its first progress report —
/// and then handed on as [`rest`](Running::rest), which the response
/// stream owns and moves freely.
///
/// A stream whose work may still be under way when it is handed on keeps
/// that work on the heap ([`Movable`]); [`OnceStream`] of a function that
/// reports no progress is handed on only after its one item, so nothing of
/// it is left to move.
pub trait Running: Stream {
    /// What is left of the stream once it has begun answering.
    type Rest: Stream<Item = Self::Item>;
    /// Takes what is left of the stream. Called once, after the stream
    /// yielded an item or ended, or after its call reported progress.
    fn rest(self: Pin<&mut Self>) -> Self::Rest;
}

macro_rules! wrapper {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<F>(pub F);
    };
}

wrapper!(
    /// `Fn(Args) -> impl Future<Output = Result<T, E>>`: one output item.
    AsyncFn
);
wrapper!(
    /// `Fn(Args, ToolContext) -> impl Future<Output = Result<T, E>>`.
    AsyncFnWithContext
);
wrapper!(
    /// `Fn(Args) -> impl Stream<Item = Result<T, E>>`: an item per element.
    StreamFn
);
wrapper!(
    /// `Fn(Args, ToolContext) -> impl Stream<Item = Result<T, E>>`.
    StreamFnWithContext
);

impl<F, Args, Fut, T, E> Handler<Args> for AsyncFn<F>
where
    F: Fn(Args) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    type Stream = OnceStream<Fut, E>;
    const WANTS_CONTEXT: bool = false;

    fn call(&self, args: Args, _context: ToolContext) -> Self::Stream {
        OnceStream::new((self.0)(args))
    }
}

impl<F, Args, Fut, T, E> Handler<Args> for AsyncFnWithContext<F>
where
    F: Fn(Args, ToolContext) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    // Progress may be reported before the function returns: the response
    // stream then takes the function's future with it.
    type Stream = Movable<OnceStream<Fut, E>>;
    const WANTS_CONTEXT: bool = true;

    fn call(&self, args: Args, context: ToolContext) -> Self::Stream {
        movable(OnceStream::new((self.0)(args, context)))
    }
}

impl<F, Args, S, T, E> Handler<Args> for StreamFn<F>
where
    F: Fn(Args) -> S,
    S: Stream<Item = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    type Stream = Movable<ErrInto<S>>;
    const WANTS_CONTEXT: bool = false;

    fn call(&self, args: Args, _context: ToolContext) -> Self::Stream {
        movable(ErrInto {
            stream: (self.0)(args),
        })
    }
}

impl<F, Args, S, T, E> Handler<Args> for StreamFnWithContext<F>
where
    F: Fn(Args, ToolContext) -> S,
    S: Stream<Item = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    type Stream = Movable<ErrInto<S>>;
    const WANTS_CONTEXT: bool = true;

    fn call(&self, args: Args, context: ToolContext) -> Self::Stream {
        movable(ErrInto {
            stream: (self.0)(args, context),
        })
    }
}

pin_project! {
    /// A stream of the one result of a future.
    pub struct OnceStream<Fut, E> {
        #[pin]
        future: Option<Fut>,
        _error: PhantomData<fn() -> E>,
    }
}

impl<Fut, E> OnceStream<Fut, E> {
    fn new(future: Fut) -> Self {
        OnceStream {
            future: Some(future),
            _error: PhantomData,
        }
    }
}

impl<Fut, T, E> Stream for OnceStream<Fut, E>
where
    Fut: Future<Output = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = Result<T, ToolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(future) = self.as_mut().project().future.as_pin_mut() else {
            return Poll::Ready(None);
        };
        let result = std::task::ready!(future.poll(cx));
        // Drop the finished future now: it may hold resources.
        self.project().future.set(None);
        Poll::Ready(Some(result.map_err(Into::into)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.future.is_some());
        (n, Some(n))
    }
}

impl<Fut, T, E> Running for OnceStream<Fut, E>
where
    Fut: Future<Output = Result<T, E>>,
    E: Into<ToolError>,
{
    type Rest = futures_util::stream::Empty<Result<T, ToolError>>;

    /// Nothing: a function that reports no progress is handed on only
    /// once it has returned its one item. Were it asked before, its
    /// future would be dropped here, unfinished — which is why a function
    /// that reads its context runs in a [`Movable`].
    fn rest(self: Pin<&mut Self>) -> Self::Rest {
        debug_assert!(self.future.is_none(), "a OnceStream handed on unfinished");
        futures_util::stream::empty()
    }
}

/// A stream kept on the heap, so that it can be polled, then moved on with
/// its work under way: what a streaming tool's response stream continues
/// with after its first item (one allocation per call).
pub type Movable<S> = Unpinned<Pin<Box<S>>>;

/// `stream` on the heap, as a [`Movable`].
pub(super) fn movable<S>(stream: S) -> Movable<S> {
    Unpinned::new(Box::pin(stream))
}

/// A stream that moves freely (`Unpin`), handed on as it is: how a
/// hand-written tool whose stream is `Unpin` (a [`ToolStream`](crate::ToolStream), a boxed
/// stream) opens at its first item, with no allocation (see
/// [`open_at_first_item`](super::open_at_first_item)).
pub struct Unpinned<S> {
    stream: Option<S>,
}

impl<S> Unpinned<S> {
    pub(super) fn new(stream: S) -> Self {
        Unpinned {
            stream: Some(stream),
        }
    }
}

impl<S: Stream + Unpin> Stream for Unpinned<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        match self.stream.as_mut() {
            Some(stream) => Pin::new(stream).poll_next(cx),
            None => Poll::Ready(None),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.stream.as_ref().map_or((0, Some(0)), |s| s.size_hint())
    }
}

impl<S: Stream + Unpin> Running for Unpinned<S> {
    type Rest = Unpinned<S>;

    fn rest(mut self: Pin<&mut Self>) -> Unpinned<S> {
        Unpinned {
            stream: self.stream.take(),
        }
    }
}

pin_project! {
    /// A stream whose error type is converted into [`ToolError`].
    pub struct ErrInto<S> {
        #[pin]
        stream: S,
    }
}

impl<S, T, E> Stream for ErrInto<S>
where
    S: Stream<Item = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = Result<T, ToolError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project()
            .stream
            .poll_next(cx)
            .map(|item| item.map(|r| r.map_err(Into::into)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.stream.size_hint()
    }
}

impl<S> std::fmt::Debug for Unpinned<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unpinned")
            .field("taken", &self.stream.is_none())
            .finish_non_exhaustive()
    }
}
