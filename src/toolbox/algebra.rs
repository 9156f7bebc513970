//! The algebra: toolboxes merged, nested, prefixed, renamed, filtered and
//! layered, as axum's `Router`s are.

use std::collections::HashMap;
use std::sync::Arc;

use futures_core::Stream;
use tower_layer::Layer;
use tower_service::Service;

use crate::boxed::BoxTool;
use crate::{ToolError, ToolInfo, ToolItem, ToolRequest};

use super::error::{Clash, DuplicateTool, ToolboxError, ToolboxErrorKind};
use super::names::{check_name, check_prefix, renamed, MAX_NAME_CHARS};
use super::{Entry, Inner, Toolbox};

impl Toolbox {
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
                deferred: entry.deferred,
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

    /// Wraps the one tool `name` in `layer`, on top of what it has: a
    /// retry for the one tool that may be retried, a tighter timeout for a
    /// slow remote one — without building a stack per tool. The layer sees
    /// the call as [`layer`](Toolbox::layer) does.
    ///
    /// # Panics
    ///
    /// If there is no tool `name` (see [`Toolbox::try_layer_tool`]).
    #[track_caller]
    pub fn layer_tool<L>(mut self, name: &str, layer: L) -> Self
    where
        L: Layer<BoxTool>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        if let Err(err) = self.try_layer_tool(name, layer) {
            panic!("{err}");
        }
        self
    }

    /// Wraps the one tool `name` in `layer`, as [`Toolbox::layer_tool`]; an
    /// unknown name leaves the toolbox as it was.
    pub fn try_layer_tool<L>(&mut self, name: &str, layer: L) -> Result<(), ToolboxError>
    where
        L: Layer<BoxTool>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let Some(&i) = self.inner.index.get(name) else {
            return Err(ToolboxError {
                kind: ToolboxErrorKind::UnknownTool,
                name: name.into(),
                message: format!("cannot layer `{name}`: there is no tool of that name"),
            });
        };
        let entry = &mut Arc::make_mut(&mut self.inner).entries[i];
        let info = entry.tool.info_shared().clone();
        entry.tool = BoxTool::with_info(info, layer.layer(entry.tool.clone()));
        Ok(())
    }

    pub(super) fn merge_inner(
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
}
