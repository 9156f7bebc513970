//! [`ResponseFuture`]: the readiness of the service below, then its call, for arguments that passed.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use toolstack::{ToolError, ToolRequest};
use tower_service::Service;

pin_project! {
    /// The response future of [`Validate`]: the tool made ready and called,
    /// or an invalid-arguments error when the arguments did not match.
    pub struct ResponseFuture<S>
    where
        S: Service<ToolRequest>,
    {
        #[pin]
        pub(super) kind: Kind<S, S::Future>,
    }
}

pin_project! {
    #[project = KindProj]
    pub(super) enum Kind<S, F> {
        // Waiting for the tool's readiness (a permit below), which is
        // reported as such; past the call's deadline the call is held,
        // never made (`call_context.rs`).
        Readying {
            service: S,
            request: Option<ToolRequest>,
            deadline: Option<crate::call_context::Deadline>,
        },
        Called { #[pin] future: F },
        Rejected { error: Option<ToolError> },
    }
}

impl<S, St> Future for ResponseFuture<S>
where
    S: Service<ToolRequest, Response = St>,
    S::Error: Into<ToolError>,
{
    type Output = Result<St, ToolError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        loop {
            match kind.as_mut().project() {
                KindProj::Readying {
                    service,
                    request,
                    deadline,
                } => {
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) if !crate::call_context::too_late(*deadline) => {}
                        Poll::Ready(Err(err)) => {
                            kind.set(Kind::Rejected { error: None });
                            return Poll::Ready(Err(err.into()));
                        }
                        Poll::Ready(Ok(())) | Poll::Pending => {
                            crate::call_context::report(crate::call_context::Wait::Permit);
                            return Poll::Pending;
                        }
                    }
                    let Some(request) = request.take() else {
                        kind.set(Kind::Rejected { error: None });
                        continue;
                    };
                    let future =
                        crate::call_context::lend_later(*deadline, || service.call(request));
                    kind.set(Kind::Called { future });
                }
                KindProj::Called { future } => {
                    let result = ready!(future.poll(cx));
                    kind.set(Kind::Rejected { error: None });
                    return Poll::Ready(result.map_err(Into::into));
                }
                KindProj::Rejected { error } => {
                    return Poll::Ready(Err(error.take().unwrap_or_else(|| {
                        ToolError::polled_after_completion("validate::ResponseFuture")
                    })))
                }
            }
        }
    }
}

impl<S: Service<ToolRequest>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
