//! [`FuseAfterError`]: a stream of results ended at its first error.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::stream::FusedStream;
use futures_core::Stream;
use pin_project_lite::pin_project;

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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

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
}
