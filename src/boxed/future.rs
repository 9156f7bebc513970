//! [`ResponseFuture`]: an erased call while it opens.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::erased_call::ErasedCall;
use super::ToolStream;
use crate::ToolError;

/// The future of a call to a [`BoxTool`](super::BoxTool) or a toolbox:
/// resolves to the response stream once the tool is ready and has accepted
/// the call.
pub struct ResponseFuture {
    state: FutureState,
}

enum FutureState {
    Calling(Pin<Box<dyn ErasedCall>>),
    Failed(ToolError),
    Taken,
}

impl ResponseFuture {
    /// A future that fails at once with `err`.
    pub fn error(err: ToolError) -> Self {
        ResponseFuture {
            state: FutureState::Failed(err),
        }
    }

    /// The future of a call just made.
    pub(super) fn calling(call: Pin<Box<dyn ErasedCall>>) -> Self {
        ResponseFuture {
            state: FutureState::Calling(call),
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<ToolStream, ToolError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::mem::replace(&mut self.state, FutureState::Taken) {
            FutureState::Calling(mut call) => match call.as_mut().poll_open(cx) {
                Poll::Pending => {
                    self.state = FutureState::Calling(call);
                    Poll::Pending
                }
                Poll::Ready(Ok(())) => Poll::Ready(Ok(ToolStream::opened(call))),
                Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            },
            FutureState::Failed(err) => Poll::Ready(Err(err)),
            FutureState::Taken => Poll::Ready(Err(ToolError::polled_after_completion(
                "boxed::ResponseFuture",
            ))),
        }
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
