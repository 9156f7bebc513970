//! [`ToolStream`]: a call's response stream, erased, and [`ToolItem`], one
//! item of it.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_service::Service;

use super::erased_call::{CallMachine, ErasedCall};
use super::FuseAfterError;
use crate::{ToolError, ToolOutput, ToolRequest};

/// One item of a tool's response stream.
pub type ToolItem = Result<ToolOutput, ToolError>;

/// A type-erased tool response stream.
///
/// Yields [`ToolItem`]s; an error is the last item — enforced, as
/// [`FuseAfterError`] does: after an error the tool's stream is dropped and
/// nothing more is yielded, whatever the tool would have sent. Dropping it
/// drops the tool's own stream, which cancels the tool's work.
pub struct ToolStream {
    inner: Pin<Box<dyn ErasedCall>>,
}

impl ToolStream {
    /// Erases any stream of tool items.
    pub fn new<St>(stream: St) -> Self
    where
        St: Stream<Item = ToolItem> + Send + 'static,
    {
        ToolStream {
            inner: Box::pin(FuseAfterError::new(stream)),
        }
    }

    /// A stream that yields one error and ends.
    pub fn error(err: ToolError) -> Self {
        ToolStream::new(futures_util::stream::once(std::future::ready(Err(err))))
    }

    /// A stream that calls `service` (driving its readiness first) when it
    /// is first polled; a failure to open is yielded as the only item.
    pub fn lazy<S>(service: S, request: ToolRequest) -> Self
    where
        S: Service<ToolRequest> + Send + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        ToolStream {
            inner: Box::pin(CallMachine::<S, S::Future, S::Response>::Ready {
                service,
                request: Some(request),
            }),
        }
    }

    /// The stream of a call that has opened: the same allocation goes on.
    pub(super) fn opened(call: Pin<Box<dyn ErasedCall>>) -> Self {
        ToolStream { inner: call }
    }
}

impl Stream for ToolStream {
    type Item = ToolItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        self.inner.as_mut().poll_item(cx)
    }
}

impl fmt::Debug for ToolStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolStream").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use futures_util::{FutureExt, StreamExt};

    use super::*;

    fn next<St: Stream + Unpin>(stream: &mut St) -> Option<St::Item> {
        stream.next().now_or_never().expect("the stream is ready")
    }

    #[test]
    fn a_tool_stream_yields_nothing_after_an_error() {
        let items = [
            Ok(ToolOutput::text("a")),
            Err(ToolError::new(crate::ErrorKind::Failed, "broken")),
            Ok(ToolOutput::text("b")),
        ];
        let mut stream = ToolStream::new(futures_util::stream::iter(items));
        assert!(matches!(next(&mut stream), Some(Ok(_))));
        assert!(matches!(next(&mut stream), Some(Err(_))));
        assert!(next(&mut stream).is_none());
        assert!(next(&mut stream).is_none());
    }
}
