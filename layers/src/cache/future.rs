//! [`ResponseFuture`]: the tool's own future, or the lookup and the call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use futures_util::future::BoxFuture;
use pin_project_lite::pin_project;
use toolstack::{ToolError, ToolItem, ToolStream};

pin_project! {
    /// The response future of [`Cache`]: the tool's own for a call that is
    /// not cached, else the lookup and the call.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Pass { #[pin] future: F },
        Cached { future: BoxFuture<'static, Result<ToolStream, ToolError>> },
    }
}

impl<F> ResponseFuture<F> {
    /// A call that is not cached: the tool's own future.
    pub(crate) fn pass(future: F) -> Self {
        ResponseFuture {
            state: State::Pass { future },
        }
    }

    /// A cached call: the lookup and, on a miss, the call.
    pub(crate) fn cached(future: BoxFuture<'static, Result<ToolStream, ToolError>>) -> Self {
        ResponseFuture {
            state: State::Cached { future },
        }
    }
}

impl<F, St, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    type Output = Result<ToolStream, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Pass { future } => future
                .poll(cx)
                .map(|r| r.map(ToolStream::new).map_err(Into::into)),
            StateProj::Cached { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cache::ResponseFuture")
    }
}
