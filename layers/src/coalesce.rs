//! Merges runs of small text items into fewer, larger ones.
//!
//! A tool (or a model) that streams text in small pieces — a token, a row —
//! costs a consumer one event per piece: a repaint in a UI, a frame on a
//! wire. [`Coalesce`] passes the pieces on at most once per *window*
//! (100 ms by default), merged:
//!
//! * the first text item passes at once, and so does any text item that
//!   comes a window or more after the last one passed;
//! * text that comes sooner is held and merged, and goes out when the
//!   window since the last item passed is over, or when the merged text
//!   reaches [`max_bytes`](CoalesceLayer::max_bytes) (4 KiB by default);
//! * held text goes out before any item that is not text (JSON, an image,
//!   progress…), before an error, and when the stream ends — items are
//!   never reordered, and nothing is lost.
//!
//! Text items are a tool's [`ToolOutput::Text`](toolstack::ToolOutput) and
//! a model's [`ModelDelta::Text`](toolstack::model::ModelDelta), so the
//! layer works on both; on the model under an agent it merges the agent's
//! text deltas. [`Coalesced::new`] wraps any such stream directly (an HTTP
//! handler's, an agent's).
//!
//! ```
//! use std::time::Duration;
//! use futures_util::{stream, StreamExt};
//! use toolstack::{tool, ToolError, ToolOutput, ToolRequest};
//! use toolstack_layers::coalesce::CoalesceLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! // Five words at once: the first passes, the other four are merged.
//! let words = tool::from_stream("words", |_: serde_json::Value| {
//!     stream::iter(["a ", "b ", "c ", "d ", "e"].map(|w| Ok::<_, ToolError>(ToolOutput::text(w))))
//! });
//! let tool = ServiceBuilder::new()
//!     .layer(CoalesceLayer::new().window(Duration::from_millis(50)))
//!     .service(words);
//! let items: Vec<_> = tool.oneshot(ToolRequest::new("words", "{}")).await?.collect().await;
//! let texts: Vec<_> = items.iter().map(|i| i.as_ref().unwrap().as_text().unwrap()).collect();
//! assert_eq!(texts, ["a ", "b c d e"]);
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use toolstack::ToolError;
use tower_layer::Layer;
use tower_service::Service;

use crate::{Output, Request};

/// Merges runs of small text items: see the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub struct CoalesceLayer {
    window: Duration,
    max_bytes: usize,
}

impl CoalesceLayer {
    /// At most one text item per 100 ms, merged up to 4 KiB.
    pub fn new() -> Self {
        CoalesceLayer {
            window: Duration::from_millis(100),
            max_bytes: 4096,
        }
    }

    /// How long text is held at most, counted from the last item passed
    /// (default 100 ms). `Duration::ZERO` passes every item at once.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Merged text goes out as soon as it reaches `bytes` (default 4 KiB),
    /// before its window is over.
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }
}

impl Default for CoalesceLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for CoalesceLayer {
    type Service = Coalesce<S>;

    fn layer(&self, inner: S) -> Coalesce<S> {
        Coalesce {
            inner,
            config: *self,
        }
    }
}

/// A tool or model whose text items are merged; see the [module
/// docs](self).
#[derive(Clone, Debug)]
pub struct Coalesce<S> {
    inner: S,
    config: CoalesceLayer,
}

impl<S> Coalesce<S> {
    /// Wraps `inner` with the default settings.
    pub fn new(inner: S) -> Self {
        CoalesceLayer::new().layer(inner)
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

impl<S, R, St, T> Service<R> for Coalesce<S>
where
    R: Request,
    S: Service<R, Response = St>,
    S::Error: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Response = Coalesced<St, T>;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        ResponseFuture {
            inner: self.inner.call(request),
            config: self.config,
        }
    }
}

pin_project! {
    /// The response future of [`Coalesce`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        config: CoalesceLayer,
    }
}

impl<F, St, E, T> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Output = Result<Coalesced<St, T>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let stream = ready!(this.inner.poll(cx)).map_err(Into::into)?;
        Poll::Ready(Ok(Coalesced::with(stream, *this.config)))
    }
}

pin_project! {
    /// A stream whose runs of text items are merged; see the [module
    /// docs](self).
    pub struct Coalesced<St, T> {
        #[pin]
        inner: St,
        config: CoalesceLayer,
        // Text held for the end of its window.
        held: Option<T>,
        // An item (or the error) that comes after the held text.
        next: Option<Result<T, ToolError>>,
        // When the last item went out.
        last: Option<Instant>,
        // The held text's deadline; made the first time text is held.
        timer: Option<Pin<Box<Sleep>>>,
        // The inner stream ended, or failed: nothing more is read.
        done: bool,
    }
}

impl<St, T> Coalesced<St, T> {
    /// `stream` with its text items merged by the default settings.
    pub fn new(stream: St) -> Self {
        Self::with(stream, CoalesceLayer::new())
    }

    /// `stream` with its text items merged as `config` says.
    pub fn with(stream: St, config: CoalesceLayer) -> Self {
        Coalesced {
            inner: stream,
            config,
            held: None,
            next: None,
            last: None,
            timer: None,
            done: false,
        }
    }
}

impl<St, T> Stream for Coalesced<St, T>
where
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Item = Result<T, ToolError>;

    #[inline(always)]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(next) = this.next.take() {
                return Poll::Ready(Some(next));
            }
            if *this.done {
                // The held text was flushed before `next`; the end.
                return Poll::Ready(this.held.take().map(Ok));
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(mut item))) => {
                    let Some(text) = item.text_mut() else {
                        // Not text: the held text goes first. (The clock
                        // is read only for text.)
                        return Poll::Ready(Some(Ok(match this.held.take() {
                            Some(held) => {
                                *this.next = Some(Ok(item));
                                *this.last = Some(Instant::now());
                                held
                            }
                            None => item,
                        })));
                    };
                    let now = Instant::now();
                    if let Some(held) = this.held.as_mut() {
                        let merged = held.text_mut().expect("held items are text");
                        merged.push_str(text);
                        if merged.len() >= this.config.max_bytes {
                            *this.last = Some(now);
                            return Poll::Ready(this.held.take().map(Ok));
                        }
                        continue;
                    }
                    let quiet = this
                        .last
                        .is_none_or(|last| now.duration_since(last) >= this.config.window);
                    if quiet || text.len() >= this.config.max_bytes {
                        *this.last = Some(now);
                        return Poll::Ready(Some(Ok(item)));
                    }
                    // Held until the window since the last item is over.
                    let deadline = this.last.unwrap_or(now) + this.config.window;
                    match this.timer.as_mut() {
                        Some(timer) => timer.as_mut().reset(deadline),
                        None => *this.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                    *this.held = Some(item);
                }
                Poll::Ready(Some(Err(err))) => {
                    // The error is the last item; held text goes first.
                    *this.done = true;
                    match this.held.take() {
                        Some(held) => {
                            *this.next = Some(Err(err));
                            return Poll::Ready(Some(Ok(held)));
                        }
                        None => return Poll::Ready(Some(Err(err))),
                    }
                }
                Poll::Ready(None) => {
                    *this.done = true;
                    return Poll::Ready(this.held.take().map(Ok));
                }
                Poll::Pending => {
                    if this.held.is_none() {
                        return Poll::Pending;
                    }
                    let timer = this.timer.as_mut().expect("held text has a timer");
                    ready!(timer.as_mut().poll(cx));
                    *this.last = Some(Instant::now());
                    return Poll::Ready(this.held.take().map(Ok));
                }
            }
        }
    }
}

impl<St, T> fmt::Debug for Coalesced<St, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalesced")
            .field("config", &self.config)
            .field("holding", &self.held.is_some())
            .field("done", &self.done)
            .finish()
    }
}
