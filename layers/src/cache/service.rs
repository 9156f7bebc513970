//! [`Cache`]: a tool whose results are cached.

use std::fmt;
use std::task::{Context, Poll};

use futures_core::Stream;
use toolstack::{ToolError, ToolItem, ToolRequest, ToolStream};
use tower_layer::Layer;
use tower_service::Service;

use super::flight::cached_call;
use super::future::ResponseFuture;
use super::layer::CacheLayer;

/// A tool whose results are cached; see the [module docs](super).
#[derive(Clone)]
pub struct Cache<S> {
    inner: S,
    config: CacheLayer,
}

impl<S> Cache<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Cache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, St> Service<ToolRequest> for Cache<S>
where
    S: Service<ToolRequest, Response = St> + Clone + Send + 'static,
    S::Error: Into<ToolError>,
    S::Future: Send + 'static,
    St: Stream<Item = ToolItem> + Send + 'static,
{
    type Response = ToolStream;
    type Error = ToolError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        let Some(key) = self.config.key(&request) else {
            return ResponseFuture::pass(self.inner.call(request));
        };
        // The ready service goes with the call; a clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        ResponseFuture::cached(Box::pin(cached_call(inner, request, key, config)))
    }
}

impl<S> Layer<S> for CacheLayer {
    type Service = Cache<S>;

    fn layer(&self, inner: S) -> Cache<S> {
        Cache {
            inner,
            config: self.clone(),
        }
    }
}
