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
    /// The stream of output items.
    type Stream: Stream<Item = Result<Self::Item, ToolError>>;
    /// Whether the function reads its context (which then carries a live
    /// progress reporter).
    const WANTS_CONTEXT: bool;
    /// Starts the function. Nothing runs until the stream is polled.
    fn call(&self, args: Args, context: ToolContext) -> Self::Stream;
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
    type Stream = OnceStream<Fut, E>;
    const WANTS_CONTEXT: bool = true;

    fn call(&self, args: Args, context: ToolContext) -> Self::Stream {
        OnceStream::new((self.0)(args, context))
    }
}

impl<F, Args, S, T, E> Handler<Args> for StreamFn<F>
where
    F: Fn(Args) -> S,
    S: Stream<Item = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    type Stream = ErrInto<S>;
    const WANTS_CONTEXT: bool = false;

    fn call(&self, args: Args, _context: ToolContext) -> Self::Stream {
        ErrInto {
            stream: (self.0)(args),
        }
    }
}

impl<F, Args, S, T, E> Handler<Args> for StreamFnWithContext<F>
where
    F: Fn(Args, ToolContext) -> S,
    S: Stream<Item = Result<T, E>>,
    E: Into<ToolError>,
{
    type Item = T;
    type Stream = ErrInto<S>;
    const WANTS_CONTEXT: bool = true;

    fn call(&self, args: Args, context: ToolContext) -> Self::Stream {
        ErrInto {
            stream: (self.0)(args, context),
        }
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
