//! Dispatch by name, and which tools a caller may see (the resolvers).

use std::sync::Arc;

use http::Extensions;

use crate::boxed::{BoxTool, ResponseFuture};
use crate::{ToolInfo, ToolRequest};

use super::Resolve;
use super::{Entry, Toolbox};

impl Toolbox {
    /// Sets the resolver that decides, per request, which tools are visible.
    /// A hidden tool is neither listed nor callable: calling it fails as an
    /// unknown tool would.
    ///
    /// It covers every tool in the toolbox, whenever added; tools nested or
    /// merged in keep their own toolbox's resolver too (see the
    /// [module docs](super)).
    pub fn resolver<R: Resolve + 'static>(mut self, resolver: R) -> Self {
        Arc::make_mut(&mut self.inner).resolver = Some(Arc::new(resolver));
        self
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

    /// The tool of that name if the caller with these extensions may see
    /// it (what [`Toolbox::dispatch`] would call).
    pub fn get_for(&self, name: &str, extensions: &Extensions) -> Option<&BoxTool> {
        self.entry(name)
            .filter(|entry| self.is_visible(entry, extensions))
            .map(|e| &e.tool)
    }

    pub(super) fn is_visible(&self, entry: &Entry, extensions: &Extensions) -> bool {
        self.inner
            .resolver
            .as_ref()
            .is_none_or(|r| r.is_visible(entry.tool.info(), extensions))
            && entry.is_visible_to_origins(extensions)
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
}
