//! The response stream of a [`FnTool`](super::FnTool).

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;

use super::context::ProgressQueue;
use super::Encode;
use crate::{ToolError, ToolItem, ToolOutput};

pin_project! {
    /// The response stream of a [`FnTool`](super::FnTool), handed out by
    /// its [`ResponseFuture`](super::ResponseFuture) once the call has begun
    /// answering: it starts with the item (or progress) that opened it.
    ///
    /// Each item of the function's stream is encoded only when the consumer
    /// polls for it. Progress reported through the call's
    /// [`ToolContext`](super::ToolContext) is interleaved in report order,
    /// ahead of the item produced in the same poll. An error is the last
    /// item. Dropping this stream drops the function's future or stream.
    pub struct ResponseStream<St, Enc, T> {
        #[pin]
        inner: St,
        encoder: Enc,
        progress: Option<Arc<ProgressQueue>>,
        // An item that waits behind progress reported in the same poll.
        held: Option<ToolItem>,
        inner_done: bool,
        done: bool,
        _item: PhantomData<fn(T)>,
    }
}

impl<St, Enc, T> ResponseStream<St, Enc, T> {
    /// The stream of a call that has begun answering: `first` is the item
    /// the call produced first (it comes after any progress reported
    /// before it), `inner_done` whether the function's stream had ended.
    pub(super) fn opened(
        inner: St,
        encoder: Enc,
        progress: Option<Arc<ProgressQueue>>,
        first: Option<ToolItem>,
        inner_done: bool,
    ) -> Self {
        ResponseStream {
            inner,
            encoder,
            progress,
            held: first,
            inner_done,
            done: false,
            _item: PhantomData,
        }
    }
}

impl<St, Enc, T> Stream for ResponseStream<St, Enc, T>
where
    St: Stream<Item = Result<T, ToolError>>,
    Enc: Encode<T>,
{
    type Item = ToolItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        let this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        if let Some(queue) = this.progress {
            if let Some(p) = queue.pop(cx) {
                return Poll::Ready(Some(Ok(ToolOutput::progress(p))));
            }
        }
        if let Some(item) = this.held.take() {
            *this.done = item.is_err();
            return Poll::Ready(Some(item));
        }
        if *this.inner_done {
            *this.done = true;
            return Poll::Ready(None);
        }
        let item = match this.inner.poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {
                *this.inner_done = true;
                None
            }
            Poll::Ready(Some(result)) => Some(result.and_then(|t| this.encoder.encode(t))),
        };
        if let Some(queue) = this.progress {
            if let Some(p) = queue.pop(cx) {
                *this.held = item;
                return Poll::Ready(Some(Ok(ToolOutput::progress(p))));
            }
        }
        match item {
            Some(item) => {
                *this.done = item.is_err();
                Poll::Ready(Some(item))
            }
            None => {
                *this.done = true;
                Poll::Ready(None)
            }
        }
    }
}

impl<St, Enc, T> std::fmt::Debug for ResponseStream<St, Enc, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
