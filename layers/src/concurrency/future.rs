use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::boxed::FuseAfterError;
use toolstack::ToolError;

use super::permits::Permit;

pin_project! {
    /// The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit):
    /// holds the permit while the stream opens.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        // `None` when the call was shed: it never reached the service.
        #[pin]
        inner: Option<F>,
        permit: Option<Permit>,
        shed: Option<ToolError>,
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(inner: F, permit: Permit) -> Self {
        ResponseFuture {
            inner: Some(inner),
            permit: Some(permit),
            shed: None,
        }
    }

    /// A call that waited too long for a permit: it fails with `error`.
    pub(super) fn overloaded(error: ToolError) -> Self {
        ResponseFuture {
            inner: None,
            permit: None,
            shed: Some(error),
        }
    }
}

impl<F, St, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
{
    type Output = Result<ResponseStream<St>, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(error) = this.shed.take() {
            return Poll::Ready(Err(error));
        }
        // The permit is taken when the future completes.
        let (Some(inner), true) = (this.inner.as_pin_mut(), this.permit.is_some()) else {
            return Poll::Ready(Err(ToolError::polled_after_completion(
                "concurrency::ResponseFuture",
            )));
        };
        match ready!(inner.poll(cx)) {
            Ok(inner) => Poll::Ready(Ok(ResponseStream {
                inner: FuseAfterError::new(inner),
                permit: this.permit.take(),
            })),
            Err(err) => {
                this.permit.take();
                Poll::Ready(Err(err.into()))
            }
        }
    }
}

pin_project! {
    /// The response stream of [`ConcurrencyLimit`](super::ConcurrencyLimit):
    /// holds the permit until the stream ends, yields an error (the last
    /// item of a stream) or is dropped.
    #[derive(Debug)]
    pub struct ResponseStream<St> {
        // Dropped once the stream ended or failed, so the work behind it
        // stops before the permit goes.
        #[pin]
        inner: FuseAfterError<St>,
        permit: Option<Permit>,
    }
}

impl<St> ResponseStream<St> {
    /// Whether this stream still holds its permit.
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
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
        let item = ready!(this.inner.poll_next(cx));
        // After the end or an error (the last item) the call is over: the
        // permit goes back, after the stream (the fuse has dropped it).
        if !matches!(item, Some(Ok(_))) {
            this.permit.take();
        }
        Poll::Ready(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}
