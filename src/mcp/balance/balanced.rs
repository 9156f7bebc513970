//! The balancer over the replica set: the set's changes as a `Discover`
//! stream, weighed by peak-EWMA until each call's stream ends, and
//! [`Balanced`], the service every tool of the toolbox is.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tower::balance::p2c::Balance;
use tower::discover::Change;
use tower::load::{PeakEwmaDiscover, TrackCompletion};
use tower_service::Service;

use super::set::Replica;
use crate::{ErrorKind, ToolError, ToolRequest, ToolStream};

/// The replica set's changes as a `Discover` stream.
pub(super) struct Changes(pub(super) mpsc::UnboundedReceiver<Change<Arc<str>, Replica>>);

impl Stream for Changes {
    type Item = Result<Change<Arc<str>, Replica>, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|change| change.map(Ok))
    }
}

/// Peak-EWMA's completion: a call's load lasts until its stream ends or
/// is dropped, not until its first answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct UntilStreamEnds;

impl<H: Send + 'static> TrackCompletion<H, ToolStream> for UntilStreamEnds {
    type Output = ToolStream;

    fn track_completion(&self, handle: H, stream: ToolStream) -> ToolStream {
        ToolStream::new(stream.map(move |item| {
            let _ = &handle;
            item
        }))
    }
}

type Balancer = Balance<PeakEwmaDiscover<Changes, UntilStreamEnds>, ToolRequest>;

/// A tool of the balanced toolbox: each call takes the balancer for as
/// long as it takes to pick a ready replica and hand it the call.
#[derive(Clone)]
pub(super) struct Balanced {
    pub(super) balance: Arc<tokio::sync::Mutex<Balancer>>,
    pub(super) ready_timeout: Duration,
}

impl Service<ToolRequest> for Balanced {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = BoxFuture<'static, Result<ToolStream, ToolError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let (balance, wait) = (Arc::clone(&self.balance), self.ready_timeout);
        Box::pin(async move {
            let call = {
                let mut balance = balance.lock().await;
                let ready = std::future::poll_fn(|cx| balance.poll_ready(cx));
                match tokio::time::timeout(wait, ready).await {
                    Ok(Ok(())) => balance.call(request),
                    Ok(Err(err)) => return Err(ToolError::from_box_error(err)),
                    Err(_) => {
                        return Err(ToolError::new(
                            ErrorKind::Overloaded,
                            format!(
                                "no replica was ready within {wait:?}, so the call was not sent"
                            ),
                        ))
                    }
                }
            };
            call.await.map_err(ToolError::from_box_error)
        })
    }
}

impl fmt::Debug for Balanced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Balanced").finish_non_exhaustive()
    }
}
