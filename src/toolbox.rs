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
//! | [`layer(layer)`](Toolbox::layer) | every tool in it wrapped in `layer` (per tool: [`layered`](Toolbox::layered)) |
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
//! use tower::limit::ConcurrencyLimitLayer;
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

const LINEAR_LOOKUP_MAX: usize = 16;

/// The longest tool name, in characters: MCP's limit (specification
/// 2025-11-25).
///
/// [`Toolbox::rename`] and [`Toolbox::prefix`] refuse to make a longer
/// name. A call of a longer name is answered as an unknown tool without
/// looking for the closest name, and its message quotes only the first
/// [`QUOTED_NAME_CHARS`] characters: a model or a network can send a name
/// of any length, and the closest-name search costs the product of the two
/// names' lengths.
pub const MAX_NAME_CHARS: usize = 128;

/// A name the toolbox quotes in an error message is cut after this many
/// characters (and `…` added).
pub const QUOTED_NAME_CHARS: usize = 64;

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

/// How [`Toolbox::dispatch`] repairs a name no tool has: by case, or by
/// an alias.
#[derive(Clone, Debug, Default)]
struct NameRepair {
    // Lowercased alias → the tool's name.
    aliases: HashMap<String, String>,
}

#[derive(Clone)]
struct Entry {
    tool: BoxTool,
    // The resolvers of the toolboxes this tool was merged or nested from,
    // each with the description that toolbox lists it by. `None` for a
    // tool added here, or brought from toolboxes without resolvers, so
    // that a flat toolbox checks nothing more than before.
    origins: Option<Arc<[Origin]>>,
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
        });
        Ok(())
    }

    /// Adds every tool of `other`, in its order, after this toolbox's.
    ///
    /// `other`'s resolver goes with its tools; this toolbox's resolver
    /// covers every tool in it, those merged in included. To keep two
    /// toolboxes' resolvers to their own tools, merge both into a new one:
    /// `Toolbox::new().merge(local).merge(remote)`.
    ///
    /// # Panics
    ///
    /// If a name is in both toolboxes (see [`Toolbox::try_merge`]).
    #[track_caller]
    pub fn merge(mut self, other: Toolbox) -> Self {
        if let Err(err) = self.try_merge(other) {
            panic!("{err}");
        }
        self
    }

    /// Adds every tool of `other`, as [`Toolbox::merge`]; if a name is in
    /// both toolboxes, nothing is added.
    pub fn try_merge(&mut self, other: Toolbox) -> Result<(), DuplicateTool> {
        self.merge_inner(other.into_inner(), || Clash::Merge)
    }

    /// Adds `other`'s tools under `prefix`: its tool `search` is listed,
    /// and called by the model, as `{prefix}.search`; the tool itself gets
    /// the request as `search`, with its own description.
    ///
    /// The same as `self.merge(other.prefix(prefix))`; see
    /// [`Toolbox::prefix`] for what `other`'s resolver sees, and
    /// [`Toolbox::merge`] for this toolbox's.
    ///
    /// # Panics
    ///
    /// On a prefix that is not a valid name (see [`Toolbox::prefix`]), or if
    /// a prefixed name is already in this toolbox (see
    /// [`Toolbox::try_nest`]).
    #[track_caller]
    pub fn nest(mut self, prefix: &str, other: Toolbox) -> Self {
        if let Err(err) = self.try_nest(prefix, other) {
            panic!("{err}");
        }
        self
    }

    /// Adds `other`'s tools under `prefix`, as [`Toolbox::nest`]; on an
    /// error nothing is added.
    pub fn try_nest(&mut self, prefix: &str, other: Toolbox) -> Result<(), ToolboxError> {
        self.try_nest_with(prefix, '.', other)
    }

    /// Adds `other`'s tools as `{prefix}{separator}{name}`: as
    /// [`Toolbox::nest`], with `_` or `-` instead of `.` — for chat APIs
    /// whose function names cannot hold a `.` (OpenAI's and Anthropic's
    /// take `^[a-zA-Z0-9_-]{1,64}`).
    ///
    /// # Panics
    ///
    /// On a separator other than `.`, `_` or `-`, and as [`Toolbox::nest`].
    #[track_caller]
    pub fn nest_with(mut self, prefix: &str, separator: char, other: Toolbox) -> Self {
        if let Err(err) = self.try_nest_with(prefix, separator, other) {
            panic!("{err}");
        }
        self
    }

    /// Adds `other`'s tools as `{prefix}{separator}{name}`, as
    /// [`Toolbox::nest_with`]; on an error nothing is added.
    pub fn try_nest_with(
        &mut self,
        prefix: &str,
        separator: char,
        mut other: Toolbox,
    ) -> Result<(), ToolboxError> {
        other.try_prefix_with(prefix, separator)?;
        self.merge_inner(other.into_inner(), || Clash::Nest(prefix.into()))
            .map_err(ToolboxError::from)
    }

    /// Lists every tool of this toolbox as `{prefix}.{name}` (the tools
    /// still get their requests under their own names).
    ///
    /// The prefixed toolbox has no resolver of its own: the one this
    /// toolbox had goes with its tools and still sees their unprefixed
    /// names; a resolver set afterwards sees the prefixed ones.
    ///
    /// A prefix is one or more ASCII letters, digits, `_`, `-` and `.`
    /// (MCP's tool name characters), neither starting nor ending with `.`;
    /// a prefixed name may be at most 128 characters long, as in MCP. Some
    /// chat APIs take no `.` in a function name (OpenAI's, Anthropic's):
    /// use [`Toolbox::prefix_with`] / [`Toolbox::nest_with`] and `_` for
    /// those.
    ///
    /// # Panics
    ///
    /// On an invalid prefix or a name grown too long (see
    /// [`Toolbox::try_prefix`]).
    #[track_caller]
    pub fn prefix(mut self, prefix: &str) -> Self {
        if let Err(err) = self.try_prefix(prefix) {
            panic!("{err}");
        }
        self
    }

    /// Lists every tool as `{prefix}.{name}`, as [`Toolbox::prefix`]; on an
    /// error the toolbox is left as it was.
    pub fn try_prefix(&mut self, prefix: &str) -> Result<(), ToolboxError> {
        self.try_prefix_with(prefix, '.')
    }

    /// Lists every tool as `{prefix}{separator}{name}`: as
    /// [`Toolbox::prefix`], with `_` or `-` instead of `.` (see
    /// [`Toolbox::nest_with`]).
    ///
    /// # Panics
    ///
    /// On a separator other than `.`, `_` or `-`, and as [`Toolbox::prefix`].
    #[track_caller]
    pub fn prefix_with(mut self, prefix: &str, separator: char) -> Self {
        if let Err(err) = self.try_prefix_with(prefix, separator) {
            panic!("{err}");
        }
        self
    }

    /// Lists every tool as `{prefix}{separator}{name}`, as
    /// [`Toolbox::prefix_with`]; on an error the toolbox is left as it was.
    pub fn try_prefix_with(&mut self, prefix: &str, separator: char) -> Result<(), ToolboxError> {
        check_prefix(prefix, separator)?;
        if let Some(info) = self
            .infos()
            .find(|info| prefix.len() + 1 + info.name().len() > MAX_NAME_CHARS)
        {
            let name = format!("{prefix}{separator}{}", info.name());
            let message = format!(
                "cannot prefix with `{prefix}`: `{name}` would be longer than the {MAX_NAME_CHARS} characters of a tool name"
            );
            return Err(ToolboxError::invalid_name(name, message));
        }
        let inner = std::mem::take(self).into_inner();
        let mut prefixed = Inner {
            entries: Vec::with_capacity(inner.entries.len()),
            index: HashMap::with_capacity(inner.entries.len()),
            resolver: None,
            // Aliases name the tools as they were: not the prefixed ones.
            names: None,
        };
        for entry in inner.entries {
            let entry = entry.leaving(inner.resolver.as_ref());
            let name = format!("{prefix}{separator}{}", entry.tool.info().name());
            prefixed.push(Entry {
                tool: entry
                    .tool
                    .renamed(Arc::new(renamed(entry.tool.info(), name))),
                origins: entry.origins,
            });
        }
        self.inner = Arc::new(prefixed);
        Ok(())
    }

    /// Lists the tool `from` as `to`; the tool still gets its requests
    /// under its own name, with its own description.
    ///
    /// The tool keeps its place in the listing. This toolbox's resolver
    /// sees the new name; the resolvers of toolboxes it was nested or merged
    /// from still see the names they knew.
    ///
    /// # Panics
    ///
    /// If there is no tool `from`, `to` is taken or is not a valid tool name
    /// (1 to 128 ASCII letters, digits, `_`, `-` or `.`); see
    /// [`Toolbox::try_rename`].
    #[track_caller]
    pub fn rename(mut self, from: &str, to: &str) -> Self {
        if let Err(err) = self.try_rename(from, to) {
            panic!("{err}");
        }
        self
    }

    /// Lists the tool `from` as `to`, as [`Toolbox::rename`]; on an error
    /// the toolbox is left as it was.
    pub fn try_rename(&mut self, from: &str, to: &str) -> Result<(), ToolboxError> {
        let Some(&i) = self.inner.index.get(from) else {
            return Err(ToolboxError {
                kind: ToolboxErrorKind::UnknownTool,
                name: from.into(),
                message: format!("cannot rename `{from}`: there is no tool of that name"),
            });
        };
        if from == to {
            return Ok(());
        }
        check_name(to)?;
        if self.inner.index.contains_key(to) {
            return Err(DuplicateTool::new(to.into(), Clash::Rename(from.into())).into());
        }
        let inner = Arc::make_mut(&mut self.inner);
        let entry = &mut inner.entries[i];
        entry.tool = entry
            .tool
            .renamed(Arc::new(renamed(entry.tool.info(), to.to_owned())));
        inner.index.remove(from);
        inner
            .index
            .insert(entry.tool.info().name_shared().clone(), i);
        Ok(())
    }

    /// Keeps only the tools whose description passes `predicate` (a static
    /// subset; for a per-caller one, see [`Toolbox::resolver`]).
    pub fn filter<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&ToolInfo) -> bool,
    {
        if self.infos().all(&predicate) {
            return self;
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.entries.retain(|entry| predicate(entry.tool.info()));
        inner.reindex();
        self
    }

    /// Wraps every tool now in the toolbox in `layer`, each in its own
    /// instance of the layer's service (as axum's `Router::layer` wraps
    /// every route): a concurrency limit applied here limits each tool on
    /// its own. To wrap the toolbox as a whole, layer it as one service.
    ///
    /// Tools added afterwards are not wrapped. The layer sees each call as
    /// this toolbox lists it — the nested or renamed name, this toolbox's
    /// description in [`ToolRequest::info`] — and the tool inside still
    /// gets its own. The requirements on `layer` are those of
    /// [`Toolbox::layered`].
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<BoxTool>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        if self.is_empty() {
            return self;
        }
        let inner = Arc::make_mut(&mut self.inner);
        for entry in &mut inner.entries {
            let info = entry.tool.info_shared().clone();
            entry.tool = BoxTool::with_info(info, layer.layer(entry.tool.clone()));
        }
        self
    }

    /// Sets the resolver that decides, per request, which tools are visible.
    /// A hidden tool is neither listed nor callable: calling it fails as an
    /// unknown tool would.
    ///
    /// It covers every tool in the toolbox, whenever added; tools nested or
    /// merged in keep their own toolbox's resolver too (see the
    /// [module docs](self)).
    pub fn resolver<R: Resolve + 'static>(mut self, resolver: R) -> Self {
        Arc::make_mut(&mut self.inner).resolver = Some(Arc::new(resolver));
        self
    }

    /// Every tool's description, in the order they were added.
    pub fn infos(&self) -> impl Iterator<Item = &ToolInfo> + '_ {
        self.inner.entries.iter().map(|e| e.tool.info())
    }

    /// The descriptions visible to a caller with these extensions.
    pub fn infos_for<'a>(
        &'a self,
        extensions: &'a Extensions,
    ) -> impl Iterator<Item = &'a ToolInfo> + 'a {
        self.inner
            .entries
            .iter()
            .filter(move |entry| self.is_visible(entry, extensions))
            .map(|entry| entry.tool.info())
    }

    /// The tool of that name, whatever the resolvers say.
    pub fn get(&self, name: &str) -> Option<&BoxTool> {
        self.entry(name).map(|e| &e.tool)
    }

    /// The tool of that name if the caller with these extensions may see
    /// it (what [`Toolbox::dispatch`] would call).
    pub fn get_for(&self, name: &str, extensions: &Extensions) -> Option<&BoxTool> {
        self.entry(name)
            .filter(|entry| self.is_visible(entry, extensions))
            .map(|e| &e.tool)
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

    fn is_visible(&self, entry: &Entry, extensions: &Extensions) -> bool {
        self.inner
            .resolver
            .as_ref()
            .is_none_or(|r| r.is_visible(entry.tool.info(), extensions))
            && entry.is_visible_to_origins(extensions)
    }

    fn into_inner(self) -> Inner {
        Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone())
    }

    fn merge_inner(
        &mut self,
        other: Inner,
        clash: impl Fn() -> Clash,
    ) -> Result<(), DuplicateTool> {
        if let Some(taken) = other
            .entries
            .iter()
            .map(|e| e.tool.info().name_shared())
            .find(|name| self.inner.index.contains_key(*name))
        {
            return Err(DuplicateTool::new(taken.clone(), clash()));
        }
        if other.entries.is_empty() {
            return Ok(());
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.entries.reserve(other.entries.len());
        for entry in other.entries {
            inner.push(entry.leaving(other.resolver.as_ref()));
        }
        Ok(())
    }

    /// Starts a call without `&mut self`: looks the tool up, checks it is
    /// visible, and calls it.
    pub fn dispatch(&self, mut request: ToolRequest) -> ResponseFuture {
        if let Some(tool) = self.get_for(request.name(), request.extensions()) {
            return tool.call_shared(request);
        }
        if let Some(name) = self.repaired_name(request.name(), request.extensions()) {
            tracing::info!(
                gen_ai.tool.name = %name,
                name_was = %request.name(),
                "tool call repaired: the tool's name"
            );
            request.set_name(name);
            if let Some(tool) = self.get_for(request.name(), request.extensions()) {
                return tool.call_shared(request);
            }
        }
        ResponseFuture::error(self.unknown_tool(&request))
    }

    /// Repairs the tool names a model gets nearly right, at dispatch: a
    /// name that differs from a visible tool's only in case (`Get_Weather`
    /// for `get_weather`) calls that tool, as does any
    /// [`alias`](Self::alias). A repair is logged (`tool call repaired`).
    /// Names are matched exactly otherwise, and an unknown name stays an
    /// error listing the tools.
    ///
    /// ```
    /// # futures_util::FutureExt::now_or_never(async {
    /// use toolstack::{tool, ToolError, ToolRequest, ToolResult, Toolbox};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args {}
    ///
    /// let tools = Toolbox::new()
    ///     .tool(tool::from_fn("get_weather", |_: Args| async { Ok::<_, ToolError>("sunny") }))
    ///     .repair_names()
    ///     .alias("weather", "get_weather");
    /// for name in ["Get_Weather", "WEATHER"] {
    ///     let stream = tools.dispatch(ToolRequest::new(name, "{}")).await?;
    ///     assert_eq!(ToolResult::collect(stream).await.into_text(), "sunny");
    /// }
    /// # Ok::<_, ToolError>(())
    /// # }).unwrap().unwrap();
    /// ```
    pub fn repair_names(mut self) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.names.get_or_insert_with(Default::default);
        self
    }

    /// A name models use for tool `name` (`weather` for `get_weather`),
    /// matched without regard to case; turns on
    /// [`repair_names`](Self::repair_names).
    pub fn alias(mut self, alias: &str, name: &str) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        let names = Arc::make_mut(inner.names.get_or_insert_with(Default::default));
        names.aliases.insert(alias.to_lowercase(), name.to_owned());
        self
    }

    /// The visible tool `wanted` nearly names, if name repair is on.
    fn repaired_name(&self, wanted: &str, extensions: &Extensions) -> Option<String> {
        let names = self.inner.names.as_ref()?;
        if is_longer_than(wanted, MAX_NAME_CHARS) {
            return None;
        }
        let lower = wanted.to_lowercase();
        if let Some(name) = names.aliases.get(&lower) {
            return Some(name.clone());
        }
        self.infos_for(extensions)
            .find(|info| info.name().to_lowercase() == lower)
            .map(|info| info.name().to_owned())
    }

    /// The error for a call of a tool that is missing or hidden from this
    /// caller: the name, the closest visible name, and the visible tools.
    ///
    /// The closest name is looked for only among names of at most
    /// [`MAX_NAME_CHARS`], and only for a wanted name that short: a longer
    /// one is refused as such, quoted up to [`QUOTED_NAME_CHARS`]. An empty
    /// name (a model's tool call without one) is an unknown tool too.
    pub fn unknown_tool(&self, request: &ToolRequest) -> ToolError {
        let wanted = request.name();
        let too_long = is_longer_than(wanted, MAX_NAME_CHARS);
        let mut names: Vec<(f64, &str)> = self
            .infos_for(request.extensions())
            .map(|info| {
                let name = info.name();
                // Levenshtein costs the product of the lengths: a name past
                // the limit is never a suggestion, whichever side it is on.
                let score = if too_long || is_longer_than(name, MAX_NAME_CHARS) {
                    0.0
                } else {
                    strsim::normalized_levenshtein(wanted, name)
                };
                (score, name)
            })
            .collect();
        // Closest first; ties keep the order the tools were added in.
        names.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut message = if wanted.is_empty() {
            "the tool call names no tool".to_owned()
        } else if too_long {
            format!(
                "unknown tool `{}`: the name is longer than the {MAX_NAME_CHARS} characters of a tool name",
                quoted(wanted)
            )
        } else {
            format!("unknown tool `{}`", quoted(wanted))
        };
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

/// Whether `name` has more than `chars` characters, without counting past.
fn is_longer_than(name: &str, chars: usize) -> bool {
    name.len() > chars && name.chars().nth(chars).is_some()
}

/// `name` as an error message quotes it: cut after [`QUOTED_NAME_CHARS`].
fn quoted(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(QUOTED_NAME_CHARS) {
        Some((cut, _)) => format!("{}…", &name[..cut]).into(),
        None => name.into(),
    }
}

/// `info` under another name.
fn renamed(info: &ToolInfo, name: String) -> ToolInfo {
    info.clone().with_name(name)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

const NAME_CHARS: &str = "ASCII letters, digits, `_`, `-` and `.`";

fn check_prefix(prefix: &str, separator: char) -> Result<(), ToolboxError> {
    if !matches!(separator, '.' | '_' | '-') {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!("`{separator}` cannot join a prefix to a tool name: use `.`, `_` or `-`"),
        ));
    }
    if prefix.is_empty() {
        return Err(ToolboxError::invalid_name(
            prefix,
            "a tool name prefix cannot be empty".to_owned(),
        ));
    }
    if !prefix.chars().all(is_name_char) {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!("`{prefix}` is not a tool name prefix: tool names are made of {NAME_CHARS}"),
        ));
    }
    if prefix.starts_with(separator) || prefix.ends_with(separator) {
        return Err(ToolboxError::invalid_name(
            prefix,
            format!(
                "`{prefix}` is not a tool name prefix: it cannot start or end with the `{separator}` that joins it to the names"
            ),
        ));
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), ToolboxError> {
    if name.is_empty() || name.len() > MAX_NAME_CHARS || !name.chars().all(is_name_char) {
        return Err(ToolboxError::invalid_name(
            name,
            format!(
                "`{}` is not a tool name: tool names are 1 to {MAX_NAME_CHARS} {NAME_CHARS}",
                quoted(name)
            ),
        ));
    }
    Ok(())
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
    clash: Clash,
}

/// What was being done when the names clashed, for the message.
#[derive(Debug, Clone)]
enum Clash {
    Insert,
    Merge,
    Nest(Arc<str>),
    Rename(Arc<str>),
}

impl DuplicateTool {
    fn new(name: Arc<str>, clash: Clash) -> Self {
        DuplicateTool { name, clash }
    }

    /// The duplicated name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for DuplicateTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match &self.clash {
            Clash::Insert => write!(f, "a tool named `{name}` is already in the toolbox"),
            Clash::Merge => write!(
                f,
                "cannot merge the toolboxes: both have a tool named `{name}`"
            ),
            Clash::Nest(prefix) => write!(
                f,
                "cannot nest under `{prefix}`: a tool named `{name}` is already in the toolbox"
            ),
            Clash::Rename(from) => write!(
                f,
                "cannot rename `{from}` to `{name}`: a tool named `{name}` is already in the toolbox"
            ),
        }
    }
}

impl std::error::Error for DuplicateTool {}

/// Why a toolbox could not be nested, prefixed or renamed as asked; the
/// toolbox is left as it was.
#[derive(Debug, Clone)]
pub struct ToolboxError {
    kind: ToolboxErrorKind,
    name: Arc<str>,
    message: String,
}

/// What a [`ToolboxError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolboxErrorKind {
    /// The name is already taken.
    Duplicate,
    /// There is no tool of that name.
    UnknownTool,
    /// The name or prefix is not a valid tool name.
    InvalidName,
}

impl ToolboxError {
    fn invalid_name(name: impl Into<Arc<str>>, message: String) -> Self {
        ToolboxError {
            kind: ToolboxErrorKind::InvalidName,
            name: name.into(),
            message,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ToolboxErrorKind {
        self.kind
    }

    /// The name at fault: the taken name, the missing tool, or the invalid
    /// name or prefix.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl From<DuplicateTool> for ToolboxError {
    fn from(err: DuplicateTool) -> Self {
        ToolboxError {
            kind: ToolboxErrorKind::Duplicate,
            message: err.to_string(),
            name: err.name,
        }
    }
}

impl fmt::Display for ToolboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolboxError {}
