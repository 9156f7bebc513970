//! [`Toolbox`]: tools by name, itself a tool.
//!
//! A toolbox holds type-erased tools, lists their [`ToolInfo`]s for the
//! model, and dispatches each [`ToolRequest`] by its name. It is a
//! `Service<ToolRequest>` with the same kind of response as any tool — a
//! stream of items — so it can be layered as a whole, served, or put inside
//! another toolbox.
//!
//! Per-tool middleware is applied before a tool goes in
//! ([`Toolbox::layered`]); a [resolver](Toolbox::resolver) decides, per
//! request, which tools a caller may see and call.
//!
//! ```
//! use futures_util::StreamExt;
//! use tower::ServiceExt;
//! use toolstack::{tool, ToolError, ToolRequest, Toolbox};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let toolbox = Toolbox::new()
//!     .tool(tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) }));
//!
//! let names: Vec<_> = toolbox.infos().map(|i| i.name()).collect();
//! assert_eq!(names, ["add"]);
//!
//! let mut out = toolbox.clone().oneshot(ToolRequest::new("add", r#"{"a":2,"b":3}"#)).await.unwrap();
//! assert_eq!(out.next().await.unwrap().unwrap().as_json(), Some(&serde_json::json!(5)));
//!
//! let err = toolbox.oneshot(ToolRequest::new("ad", "{}")).await.unwrap_err();
//! assert_eq!(err.message(), "unknown tool `ad`; did you mean `add`? available tools: add");
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use http::Extensions;
use tower_layer::Layer;
use tower_service::Service;

use crate::boxed::{BoxTool, ResponseFuture, ToolStream};
use crate::{Describe, ToolError, ToolInfo, ToolItem, ToolRequest};

const LINEAR_LOOKUP_MAX: usize = 16;

/// Decides which tools a caller may see and call, from the request's
/// extensions (say, a caller role put there by an auth layer).
///
/// Implemented by any `Fn(&ToolInfo, &Extensions) -> bool`.
pub trait Resolve: Send + Sync {
    /// Whether the tool described by `info` is visible to this caller.
    fn is_visible(&self, info: &ToolInfo, extensions: &Extensions) -> bool;
}

impl<F> Resolve for F
where
    F: Fn(&ToolInfo, &Extensions) -> bool + Send + Sync,
{
    fn is_visible(&self, info: &ToolInfo, extensions: &Extensions) -> bool {
        self(info, extensions)
    }
}

/// A set of tools dispatched by name; itself a tool.
///
/// Cloning is cheap (one shared, immutable table). Adding a tool to a clone
/// does not change the original.
#[derive(Clone, Default)]
pub struct Toolbox {
    inner: Arc<Inner>,
}

#[derive(Clone, Default)]
struct Inner {
    tools: Vec<BoxTool>,
    index: HashMap<Arc<str>, usize>,
    resolver: Option<Arc<dyn Resolve>>,
}

impl Toolbox {
    /// An empty toolbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool that carries its own description.
    ///
    /// # Panics
    ///
    /// If a tool of the same name is already in the toolbox (see
    /// [`Toolbox::try_insert`] for the non-panicking form).
    pub fn tool<S>(self, tool: S) -> Self
    where
        S: Describe + Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        self.boxed(BoxTool::new(tool))
    }

    /// Adds a tool wrapped in `layer` (a `ServiceBuilder` works): the
    /// description is taken from the tool before it is wrapped, so any
    /// tower layer — ours or tower's own — can be used.
    ///
    /// # Panics
    ///
    /// On a duplicate name, as [`Toolbox::tool`].
    pub fn layered<T, L>(self, tool: T, layer: L) -> Self
    where
        T: Describe,
        L: Layer<T>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let info = Arc::new(tool.info().clone());
        self.boxed(BoxTool::with_info(info, layer.layer(tool)))
    }

    /// Adds any tool service with an explicit description.
    ///
    /// # Panics
    ///
    /// On a duplicate name, as [`Toolbox::tool`].
    pub fn service<S>(self, info: ToolInfo, service: S) -> Self
    where
        S: Service<ToolRequest> + Clone + Send + Sync + 'static,
        S::Error: Into<ToolError>,
        S::Future: Send + 'static,
        S::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        self.boxed(BoxTool::with_info(info, service))
    }

    /// Adds an already erased tool.
    ///
    /// # Panics
    ///
    /// On a duplicate name, as [`Toolbox::tool`].
    pub fn boxed(mut self, tool: BoxTool) -> Self {
        if let Err(err) = self.try_insert(tool) {
            panic!("{err}");
        }
        self
    }

    /// Adds an erased tool, refusing a duplicate name.
    pub fn try_insert(&mut self, tool: BoxTool) -> Result<(), DuplicateTool> {
        let name = tool.info().name_shared().clone();
        if self.inner.index.contains_key(&name) {
            return Err(DuplicateTool { name });
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.index.insert(name, inner.tools.len());
        inner.tools.push(tool);
        Ok(())
    }

    /// Sets the resolver that decides, per request, which tools are visible.
    /// A hidden tool is neither listed nor callable: calling it fails as an
    /// unknown tool would.
    pub fn resolver<R: Resolve + 'static>(mut self, resolver: R) -> Self {
        Arc::make_mut(&mut self.inner).resolver = Some(Arc::new(resolver));
        self
    }

    /// Every tool's description, in the order they were added.
    pub fn infos(&self) -> impl Iterator<Item = &ToolInfo> + '_ {
        self.inner.tools.iter().map(BoxTool::info)
    }

    /// The descriptions visible to a caller with these extensions.
    pub fn infos_for<'a>(
        &'a self,
        extensions: &'a Extensions,
    ) -> impl Iterator<Item = &'a ToolInfo> + 'a {
        self.infos()
            .filter(move |info| self.is_visible(info, extensions))
    }

    /// The tool of that name, whatever the resolver says.
    pub fn get(&self, name: &str) -> Option<&BoxTool> {
        // A short scan beats hashing the name for the handful of tools a
        // model is usually given.
        if self.inner.tools.len() <= LINEAR_LOOKUP_MAX {
            return self.inner.tools.iter().find(|t| t.info().name() == name);
        }
        self.inner.index.get(name).map(|&i| &self.inner.tools[i])
    }

    /// The tool of that name if the caller with these extensions may see
    /// it (what [`Toolbox::dispatch`] would call).
    pub fn get_for(&self, name: &str, extensions: &Extensions) -> Option<&BoxTool> {
        self.get(name)
            .filter(|tool| self.is_visible(tool.info(), extensions))
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.inner.tools.len()
    }

    /// Whether the toolbox is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.tools.is_empty()
    }

    fn is_visible(&self, info: &ToolInfo, extensions: &Extensions) -> bool {
        self.inner
            .resolver
            .as_ref()
            .is_none_or(|r| r.is_visible(info, extensions))
    }

    /// Starts a call without `&mut self`: looks the tool up, checks it is
    /// visible, and calls it.
    pub fn dispatch(&self, request: ToolRequest) -> ResponseFuture {
        match self.get_for(request.name(), request.extensions()) {
            Some(tool) => tool.call_shared(request),
            None => ResponseFuture::error(self.unknown_tool(&request)),
        }
    }

    /// The error for a call of a tool that is missing or hidden from this
    /// caller: the name, the closest visible name, and the visible tools.
    pub fn unknown_tool(&self, request: &ToolRequest) -> ToolError {
        let wanted = request.name();
        let mut names: Vec<(f64, &str)> = self
            .infos_for(request.extensions())
            .map(|info| {
                (
                    strsim::normalized_levenshtein(wanted, info.name()),
                    info.name(),
                )
            })
            .collect();
        // Closest first; ties keep the order the tools were added in.
        names.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut message = format!("unknown tool `{wanted}`");
        match names.first() {
            None => message.push_str("; no tools are available"),
            Some(&(score, best)) => {
                if score >= 0.5 {
                    message.push_str(&format!("; did you mean `{best}`?"));
                } else {
                    message.push(';');
                }
                message.push_str(" available tools: ");
                let list: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
                message.push_str(&list.join(", "));
            }
        }
        ToolError::not_found(message)
    }
}

impl Service<ToolRequest> for Toolbox {
    type Response = ToolStream;
    type Error = ToolError;
    type Future = ResponseFuture;

    /// Always ready: readiness is per tool, and is driven inside each call's
    /// future on that call's own clone of the tool.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ToolRequest) -> ResponseFuture {
        self.dispatch(request)
    }
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolbox")
            .field("tools", &self.infos().map(|i| i.name()).collect::<Vec<_>>())
            .field("resolver", &self.inner.resolver.is_some())
            .finish()
    }
}

/// A tool of this name is already in the toolbox.
#[derive(Debug, Clone)]
pub struct DuplicateTool {
    name: Arc<str>,
}

impl DuplicateTool {
    /// The duplicated name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for DuplicateTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a tool named `{}` is already in the toolbox", self.name)
    }
}

impl std::error::Error for DuplicateTool {}
