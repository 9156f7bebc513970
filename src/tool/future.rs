//! The response future of a [`FnTool`](super::FnTool): the call until it
//! begins answering.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::context::ProgressQueue;
use super::handler::Running;
use super::{Encode, ResponseStream};
use crate::{ToolError, ToolItem};

pin_project! {
    /// The response future of a [`FnTool`](super::FnTool): runs the
    /// function until the call **begins answering**, then resolves to the
    /// [`ResponseStream`] of the rest.
    ///
    /// It resolves when the function has produced its first item (for an
    /// async function: when it has returned), when its stream ended with
    /// none, or when it reported progress (a function that reads its
    /// [`ToolContext`](super::ToolContext)); it fails with the call's error
    /// when arguments do not decode or when the function fails before
    /// answering anything. So tower's own layers bound the tool's work:
    /// `Timeout` bounds the time to the first item, `ConcurrencyLimit`
    /// holds its permit while the function works toward it, `Retry` sees a
    /// call that failed before answering, and a balancer's pending-request
    /// count counts a call that is working. What happens after the first
    /// item is the stream's, watched by the stream-aware layers.
    ///
    /// Dropping the future drops the function's future or stream.
    pub struct ResponseFuture<St, Enc, T> {
        #[pin]
        state: State<St>,
        encoder: Option<Enc>,
        progress: Option<Arc<ProgressQueue>>,
        _item: PhantomData<fn(T)>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<St> {
        Running { #[pin] stream: St },
        Failed { error: Option<ToolError> },
    }
}

impl<St, Enc, T> ResponseFuture<St, Enc, T> {
    pub(crate) fn running(stream: St, encoder: Enc, progress: Option<Arc<ProgressQueue>>) -> Self {
        ResponseFuture {
            state: State::Running { stream },
            encoder: Some(encoder),
            progress,
            _item: PhantomData,
        }
    }

    pub(crate) fn failed(error: ToolError) -> Self {
        ResponseFuture {
            state: State::Failed { error: Some(error) },
            encoder: None,
            progress: None,
            _item: PhantomData,
        }
    }
}

impl<St, Enc, T> Future for ResponseFuture<St, Enc, T>
where
    St: Running<Item = Result<T, ToolError>>,
    Enc: Encode<T>,
{
    type Output = Result<ResponseStream<St::Rest, Enc, T>, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut stream = match this.state.project() {
            StateProj::Running { stream } => stream,
            StateProj::Failed { error } => {
                return Poll::Ready(Err(error.take().unwrap_or_else(|| {
                    ToolError::polled_after_completion("tool::ResponseFuture")
                })))
            }
        };
        let Some(encoder) = this.encoder.as_ref() else {
            return Poll::Ready(Err(ToolError::polled_after_completion(
                "tool::ResponseFuture",
            )));
        };
        let polled = stream.as_mut().poll_next(cx);
        // Asked after the function's poll, so that progress it reported in
        // that poll counts, and with this waker, so that a report made
        // while it waits wakes the call.
        let reported = this.progress.as_ref().is_some_and(|q| q.has_items(cx));
        let (first, ended): (Option<ToolItem>, bool) = match polled {
            Poll::Pending if !reported => return Poll::Pending,
            Poll::Pending => (None, false),
            Poll::Ready(None) => (None, true),
            Poll::Ready(Some(result)) => {
                let item = result.and_then(|t| encoder.encode(t));
                match item {
                    // A call that fails before answering anything fails
                    // its future: nothing reached the caller, so a layer
                    // above may try it again.
                    Err(err) if !reported => {
                        *this.encoder = None;
                        return Poll::Ready(Err(err));
                    }
                    item => (Some(item), false),
                }
            }
        };
        let rest = stream.rest();
        Poll::Ready(match this.encoder.take() {
            Some(encoder) => Ok(ResponseStream::opened(
                rest,
                encoder,
                this.progress.take(),
                first,
                ended,
            )),
            None => Err(ToolError::polled_after_completion("tool::ResponseFuture")),
        })
    }
}

impl<St, Enc, T> std::fmt::Debug for ResponseFuture<St, Enc, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("tool::ResponseFuture")
            .field("answered", &self.encoder.is_none())
            .finish_non_exhaustive()
    }
}
