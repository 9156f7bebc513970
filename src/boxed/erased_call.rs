//! One erased call: the state machine a call lives in, from readiness to
//! the end of its stream — the one allocation of an erased call.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::{FuseAfterError, ToolItem};
use crate::{ToolError, ToolRequest};

/// A call in progress, erased: first opened, then read as a stream.
pub(super) trait ErasedCall: Send {
    fn poll_open(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>>;
    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>>;
}

pin_project! {
    /// The state machine one call lives in, from its tool's readiness to
    /// the end of its stream.
    #[project = CallMachineProj]
    pub(super) enum CallMachine<S, Fut, St> {
        Ready { service: S, request: Option<ToolRequest> },
        Opening { #[pin] future: Fut },
        Open { #[pin] stream: St },
        // The tool's readiness failed when the call was made.
        Refused { error: Option<ToolError> },
        // The call failed to open, or its stream ended or failed.
        Done,
    }
}

impl<S, Fut, St> ErasedCall for CallMachine<S, Fut, St>
where
    S: Service<ToolRequest, Response = St, Future = Fut> + Send,
    S::Error: Into<ToolError>,
    Fut: Future<Output = Result<St, S::Error>> + Send,
    St: Stream<Item = ToolItem> + Send,
{
    fn poll_open(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        loop {
            let next = match self.as_mut().project() {
                CallMachineProj::Ready { service, request } => {
                    if let Err(err) = ready!(service.poll_ready(cx)) {
                        self.set(CallMachine::Done);
                        return Poll::Ready(Err(err.into()));
                    }
                    let Some(request) = request.take() else {
                        self.set(CallMachine::Done);
                        return Poll::Ready(Err(ToolError::polled_after_completion("a tool call")));
                    };
                    CallMachine::Opening {
                        future: service.call(request),
                    }
                }
                CallMachineProj::Opening { future } => match ready!(future.poll(cx)) {
                    Ok(stream) => {
                        // Set here, not through `next`: the stream (a
                        // whole stack's) is written into place once.
                        self.set(CallMachine::Open { stream });
                        return Poll::Ready(Ok(()));
                    }
                    Err(err) => {
                        self.set(CallMachine::Done);
                        return Poll::Ready(Err(err.into()));
                    }
                },
                CallMachineProj::Open { .. } => return Poll::Ready(Ok(())),
                CallMachineProj::Refused { error } => {
                    let err = error
                        .take()
                        .unwrap_or_else(|| ToolError::polled_after_completion("a tool call"));
                    self.set(CallMachine::Done);
                    return Poll::Ready(Err(err));
                }
                CallMachineProj::Done => {
                    return Poll::Ready(Err(ToolError::polled_after_completion("a tool call")))
                }
            };
            self.set(next);
        }
    }

    fn poll_item(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        match self.as_mut().project() {
            CallMachineProj::Open { stream } => {
                let item = ready!(stream.poll_next(cx));
                // An error is the last item: the tool's stream is dropped
                // here, so nothing it yields afterwards gets through. This is
                // `FuseAfterError`'s rule, kept by the call's own state: `Done`
                // also ends a call that failed to open, and a fuse inside
                // `Open` would add a second tag to every poll of a call.
                if !matches!(item, Some(Ok(_))) {
                    self.set(CallMachine::Done);
                }
                Poll::Ready(item)
            }
            CallMachineProj::Done => Poll::Ready(None),
            // Not opened yet: open first, so a lazily built stream works too.
            _ => match ready!(self.as_mut().poll_open(cx)) {
                Ok(()) => self.poll_item(cx),
                Err(err) => Poll::Ready(Some(Err(err))),
            },
        }
    }
}

// A stream already opened (`ToolStream::new`).
impl<St> ErasedCall for FuseAfterError<St>
where
    St: Stream<Item = ToolItem> + Send,
{
    fn poll_open(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn poll_item(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        self.poll_next(cx)
    }
}
