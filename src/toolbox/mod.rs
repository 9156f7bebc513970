//! [`Toolbox`]: tools by name, itself a tool.
//!
//! A toolbox holds type-erased tools, lists their [`ToolInfo`]s for the
//! model, and dispatches each [`ToolRequest`] by its name. It is a
//! `Service<ToolRequest>` with the same kind of response as any tool — a
//! stream of items — so it can be layered as a whole or served.
//!
//! Toolboxes compose the way axum's `Router`s do:
//!
//! | method | the toolbox it gives |
//! |---|---|
//! | [`merge(other)`](Toolbox::merge) | both sets of tools (local tools plus a remote MCP server's, say); a name in both is refused |
//! | [`nest(prefix, other)`](Toolbox::nest) | `other`'s tools added as `{prefix}.{name}` (`github.search`, `jira.search`) |
//! | [`prefix(prefix)`](Toolbox::prefix) | this toolbox's tools as `{prefix}.{name}` |
//! | [`rename(from, to)`](Toolbox::rename) | one tool under a new name |
//! | [`filter(predicate)`](Toolbox::filter) | the tools whose description passes |
//! | [`layer(layer)`](Toolbox::layer) | every tool in it wrapped in `layer` (a tool as it is added: [`layered`](Toolbox::layered); one already in: [`layer_tool`](Toolbox::layer_tool)) |
//! | [`deferred()`](Toolbox::deferred) | the same tools, kept out of a model's view until a [search](ToolSearch) finds them |
//!
//! A toolbox is not itself a described tool — it has no one [`ToolInfo`],
//! and it dispatches by the request's name — so a toolbox goes inside
//! another by `nest` or `merge`, which keep every tool listed on its own.
//!
//! **Names.** The model sees, and calls, the nested or renamed name. The
//! tool gets the request under the name it was built with, and its own
//! description in [`ToolRequest::info`], as axum strips a nested prefix
//! from the path: a tool (and every layer applied inside the inner
//! toolbox) works the same wherever it is nested.
//!
//! **Resolvers.** A [resolver](Toolbox::resolver) decides, per request,
//! which tools a caller may see and call. Each toolbox's resolver stays
//! with its tools: once nested or merged into another toolbox, a tool is
//! listed and callable only if the resolver of the toolbox it came from
//! allows it (seeing the tool's name there) *and* the resolver of the
//! toolbox it is in now allows it (seeing the name it has now).
//!
//! **Unknown names.** A call of a name that no visible tool has is a
//! [`NotFound`](crate::ErrorKind::NotFound) error listing the visible
//! tools, closest first. A model or a network chooses that name, so its
//! cost is bounded: a name longer than [`MAX_NAME_CHARS`] (MCP's 128) is
//! refused without the closest-name search, and a message quotes at most
//! [`QUOTED_NAME_CHARS`] characters of it. An empty name is an unknown tool
//! like any other.
//!
//! **Cost.** Dispatch is a short scan (a hash lookup past 16 tools), as
//! for a flat toolbox, and a tool that was not renamed is called exactly as
//! before. A nested or renamed tool costs one name rewrite per call
//! ([`ToolRequest::set_name`]), however deep it is nested; a tool wrapped
//! by [`layer`](Toolbox::layer) costs one more allocation per call (the
//! layer's service is erased around the erased tool).
//!
//! ```
//! use tower::ServiceExt;
//! // toolstack-layers' limit, which holds its permit until a call's stream
//! // ends (tower's own of the same name lets go at the first item).
//! use toolstack_layers::concurrency::ConcurrencyLimitLayer;
//! use toolstack::{tool, ToolError, ToolRequest, ToolResult, Toolbox};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Query { q: String }
//!
//! fn search(site: &'static str) -> Toolbox {
//!     Toolbox::new().tool(tool::from_fn("search", move |Query { q }| async move {
//!         Ok::<_, ToolError>(format!("{site}: {q}"))
//!     }))
//! }
//!
//! # futures_util::FutureExt::now_or_never(async {
//! let local = Toolbox::new()
//!     .tool(tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) }));
//! let toolbox = Toolbox::new()
//!     .merge(local)
//!     .nest("github", search("github"))
//!     .nest("jira", search("jira"))
//!     // At most 4 calls of each tool at once.
//!     .layer(ConcurrencyLimitLayer::new(4));
//!
//! let names: Vec<_> = toolbox.infos().map(|i| i.name()).collect();
//! assert_eq!(names, ["add", "github.search", "jira.search"]);
//!
//! let call = ToolRequest::new("jira.search", r#"{"q":"open bugs"}"#);
//! let result = ToolResult::collect(toolbox.clone().oneshot(call).await.unwrap()).await;
//! assert_eq!(result.text(), "jira: open bugs");
//!
//! let err = toolbox.oneshot(ToolRequest::new("search", "{}")).await.unwrap_err();
//! assert!(err.message().starts_with("unknown tool `search`; did you mean"));
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

mod algebra;
mod dispatch;
mod error;
mod names;
mod search;

use error::Clash;
pub use error::{DuplicateTool, ToolboxError, ToolboxErrorKind};
use names::NameRepair;
pub use names::{MAX_NAME_CHARS, QUOTED_NAME_CHARS};
pub use search::{Found, Ranking, ToolSearch, MAX_QUERY_CHARS};

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
/// Cloning is cheap (one shared, immutable table). Changing a clone — adding
/// a tool, merging, renaming — does not change the original.
#[derive(Clone, Default)]
pub struct Toolbox {
    inner: Arc<Inner>,
}

#[derive(Clone, Default)]
struct Inner {
    entries: Vec<Entry>,
    index: HashMap<Arc<str>, usize>,
    resolver: Option<Arc<dyn Resolve>>,
    // Near-miss names a model writes, repaired at dispatch.
    names: Option<Arc<NameRepair>>,
}

#[derive(Clone)]
struct Entry {
    tool: BoxTool,
    // The resolvers of the toolboxes this tool was merged or nested from,
    // each with the description that toolbox lists it by. `None` for a
    // tool added here, or brought from toolboxes without resolvers, so
    // that a flat toolbox checks nothing more than before.
    origins: Option<Arc<[Origin]>>,
    /// Kept out of the model's view until a search finds it (see
    /// [`Toolbox::deferred`]).
    deferred: bool,
}

#[derive(Clone)]
struct Origin {
    resolver: Arc<dyn Resolve>,
    info: Arc<ToolInfo>,
}

impl Entry {
    fn is_visible_to_origins(&self, extensions: &Extensions) -> bool {
        self.origins
            .iter()
            .flat_map(|origins| origins.iter())
            .all(|o| o.resolver.is_visible(&o.info, extensions))
    }

    /// This entry as it leaves a toolbox whose resolver is `resolver`: that
    /// resolver goes with it, still seeing the name it knew.
    fn leaving(self, resolver: Option<&Arc<dyn Resolve>>) -> Entry {
        let Some(resolver) = resolver else {
            return self;
        };
        let origin = Origin {
            resolver: resolver.clone(),
            info: self.tool.info_shared().clone(),
        };
        let origins = self
            .origins
            .iter()
            .flat_map(|origins| origins.iter().cloned())
            .chain([origin])
            .collect();
        Entry {
            tool: self.tool,
            origins: Some(origins),
            deferred: self.deferred,
        }
    }
}

impl Inner {
    fn push(&mut self, entry: Entry) {
        self.index
            .insert(entry.tool.info().name_shared().clone(), self.entries.len());
        self.entries.push(entry);
    }

    fn reindex(&mut self) {
        self.index = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.tool.info().name_shared().clone(), i))
            .collect();
    }
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
    #[track_caller]
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
    #[track_caller]
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
    #[track_caller]
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
    #[track_caller]
    pub fn boxed(mut self, tool: BoxTool) -> Self {
        if let Err(err) = self.try_insert(tool) {
            panic!("{err}");
        }
        self
    }

    /// Adds an erased tool, refusing a duplicate name.
    pub fn try_insert(&mut self, tool: BoxTool) -> Result<(), DuplicateTool> {
        let name = tool.info().name_shared();
        if self.inner.index.contains_key(name) {
            return Err(DuplicateTool::new(name.clone(), Clash::Insert));
        }
        Arc::make_mut(&mut self.inner).push(Entry {
            tool,
            origins: None,
            deferred: false,
        });
        Ok(())
    }

    /// Every tool's description, in the order they were added.
    pub fn infos(&self) -> impl Iterator<Item = &ToolInfo> + '_ {
        self.inner.entries.iter().map(|e| e.tool.info())
    }

    /// The tool of that name, whatever the resolvers say.
    pub fn get(&self, name: &str) -> Option<&BoxTool> {
        self.entry(name).map(|e| &e.tool)
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.inner.entries.len()
    }

    /// Whether the toolbox is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.entries.is_empty()
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        let entries = &self.inner.entries;
        // A short scan beats hashing the name for the handful of tools a
        // model is usually given.
        if entries.len() <= LINEAR_LOOKUP_MAX {
            return entries.iter().find(|e| e.tool.info().name() == name);
        }
        self.inner.index.get(name).map(|&i| &entries[i])
    }

    fn into_inner(self) -> Inner {
        Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone())
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
