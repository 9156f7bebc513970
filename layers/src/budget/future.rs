use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use toolstack::ToolError;

use super::{BudgetLayer, Budgeted, Tap};
use crate::Output;

pin_project! {
    /// The response future of [`Budget`](super::Budget).
    pub struct ResponseFuture<F, T> {
        #[pin]
        inner: F,
        config: Option<BudgetLayer>,
        tap: Option<Tap<T>>,
    }
}

impl<F, T> ResponseFuture<F, T> {
    pub(super) fn new(inner: F, config: BudgetLayer, tap: Option<Tap<T>>) -> Self {
        ResponseFuture {
            inner,
            config: Some(config),
            tap,
        }
    }
}

impl<F, St, E, T> Future for ResponseFuture<F, T>
where
    F: Future<Output = Result<St, E>>,
    E: Into<ToolError>,
    St: Stream<Item = Result<T, ToolError>>,
    T: Output,
{
    type Output = Result<Budgeted<St, T>, ToolError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let stream = ready!(this.inner.poll(cx)).map_err(Into::into)?;
        let config = this
            .config
            .take()
            .ok_or_else(|| ToolError::polled_after_completion("budget::ResponseFuture"))?;
        Poll::Ready(Ok(Budgeted::new(stream, config, this.tap.take())))
    }
}
