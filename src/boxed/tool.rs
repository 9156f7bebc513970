//! [`BoxTool`]: a tool erased, with its description.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tower_service::Service;

use super::erased_tool::{spare_slots, thread_slot, Erased, ErasedTool};
use super::{ResponseFuture, ToolItem, ToolStream};
use crate::{Describe, ToolError, ToolInfo, ToolRequest};

/// A type-erased tool with its [`ToolInfo`]: `Clone`, `Send` and `Sync`,
/// so it fits a toolbox, an axum state or a `Buffer`.
///
/// Its `poll_ready` is always ready; each call drives the readiness of its
/// own clone of the wrapped service (see the [module docs](super)).
#[derive(Clone)]
pub struct BoxTool {
    info: Arc<ToolInfo>,
    // Set when the tool is listed under another name than the one it was
    // built with (a nested or renamed toolbox tool): a call goes in under
    // this description's name, as axum strips a nested prefix, so the tool
    // and the layers inside it never see a name they do not know.
    target: Option<Arc<ToolInfo>>,
    // The description each call carries (the target's, else `info`), one
    // copy per thread slot: a call takes a reference count on its thread's
    // copy, so calls on several threads do not all write one count.
    carried: Arc<[Arc<ToolInfo>]>,
    inner: Arc<dyn ErasedTool>,
}

/// One copy of `info` per thread slot (the first is `info` itself).
fn per_thread(info: &Arc<ToolInfo>) -> Arc<[Arc<ToolInfo>]> {
    (0..spare_slots())
        .map(|slot| match slot {
            0 => Arc::clone(info),
            _ => Arc::new(ToolInfo::clone(info)),
        })
        .collect()
}

impl BoxTool {
    /// Erases a described tool.
    pub fn new<S>(tool: S) -> Self
    where
        S: Describe + Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let info = Arc::new(tool.info().clone());
        BoxTool::with_info(info, tool)
    }

    /// Erases `tool` wrapped in `layer` (a `ServiceBuilder` works), the
    /// description taken from the tool before it is wrapped: what a
    /// function returns for a tool with its own stack, without naming the
    /// stack's type.
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolstack::{tool, BoxTool, ToolError, Toolbox};
    /// use toolstack_layers::{timeout::TimeoutLayer, ServiceBuilderExt};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Query { q: String }
    ///
    /// fn search() -> BoxTool {
    ///     let search = tool::from_fn("search", |Query { q }| async move { Ok::<_, ToolError>(q) });
    ///     let stack = tower::ServiceBuilder::new()
    ///         .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(5)));
    ///     BoxTool::layered(search, stack)
    /// }
    ///
    /// let toolbox = Toolbox::new().boxed(search());
    /// # let _ = toolbox;
    /// ```
    pub fn layered<T, L>(tool: T, layer: L) -> Self
    where
        T: Describe,
        L: tower_layer::Layer<T>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let info = Arc::new(tool.info().clone());
        BoxTool::with_info(info, layer.layer(tool))
    }

    /// Erases any tool service, described by `info` (for services that do
    /// not carry their own description, such as one wrapped in tower's
    /// stock layers).
    pub fn with_info<S>(info: impl Into<Arc<ToolInfo>>, service: S) -> Self
    where
        S: Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let info = info.into();
        BoxTool {
            carried: per_thread(&info),
            info,
            target: None,
            inner: Arc::new(Erased::new(service)),
        }
    }

    /// The same tool, listed as `info` (a new name), still called with the
    /// name and description it was built with.
    ///
    /// Renaming a renamed tool keeps the first target, so however deep a
    /// tool is nested a call rewrites its name once.
    pub(crate) fn renamed(&self, info: Arc<ToolInfo>) -> BoxTool {
        let target = self.target.clone().unwrap_or_else(|| self.info.clone());
        BoxTool {
            carried: per_thread(&target),
            target: Some(target),
            info,
            inner: self.inner.clone(),
        }
    }

    /// The tool's description.
    pub fn info(&self) -> &ToolInfo {
        &self.info
    }

    /// The tool's description, shared.
    pub fn info_shared(&self) -> &Arc<ToolInfo> {
        &self.info
    }

    /// Starts a call without `&mut self` (the toolbox's dispatch path).
    ///
    /// The request carries the tool's description from here on
    /// ([`ToolRequest::info`]). A tool listed under another name (see
    /// [`Toolbox::nest`](crate::Toolbox::nest) and
    /// [`Toolbox::rename`](crate::Toolbox::rename)) gets the request under
    /// its own name, with its own description.
    pub fn call_shared(&self, mut request: ToolRequest) -> ResponseFuture {
        if let Some(target) = &self.target {
            // `set_name` copies the request's shared call data when a
            // clone holds it too (a retry layer outside): the one cost of a
            // renamed tool, paid only by renamed tools.
            if request.name() != target.name() {
                request.set_name(target.name().to_owned());
            }
        }
        let carried = &self.carried[thread_slot() & (self.carried.len() - 1)];
        request.set_info(Arc::clone(carried));
        ResponseFuture::calling(self.inner.call(request))
    }
}

impl Describe for BoxTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
}

impl Service<ToolRequest> for BoxTool {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> ResponseFuture {
        self.call_shared(request)
    }
}

impl fmt::Debug for BoxTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("BoxTool");
        f.field("name", &self.info.name());
        if let Some(target) = &self.target {
            f.field("calls", &target.name());
        }
        f.finish_non_exhaustive()
    }
}
