//! Deferred tools: a mark on a toolbox's tools that keeps them out of a
//! model's view until a search finds them.

use crate::toolbox::Toolbox;

impl Toolbox {
    /// Marks every tool now in this toolbox as *deferred*: listed and
    /// callable as before (by [`infos`](Toolbox::infos), over HTTP and
    /// MCP), but kept out of a model's view by an agent until a search
    /// finds it.
    ///
    /// The mark goes with each tool through [`merge`](Toolbox::merge),
    /// [`nest`](Toolbox::nest), renames and layers, so a large remote
    /// toolbox is deferred as it is merged:
    ///
    /// ```
    /// use toolstack::{tool, ToolError, Toolbox};
    ///
    /// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Q { q: String }
    /// let always = Toolbox::new().tool(tool::from_fn("search_docs", |_: Q| async {
    ///     Ok::<_, ToolError>("…")
    /// }));
    /// let many = Toolbox::new().tool(tool::from_fn("create_issue", |_: Q| async {
    ///     Ok::<_, ToolError>("…")
    /// }));
    /// let toolbox = Toolbox::new().merge(always).nest_with("github", '_', many.deferred());
    /// assert!(!toolbox.is_deferred("search_docs"));
    /// assert!(toolbox.is_deferred("github_create_issue"));
    /// ```
    pub fn deferred(mut self) -> Self {
        if self.inner.entries.iter().all(|e| e.deferred) {
            return self;
        }
        for entry in &mut std::sync::Arc::make_mut(&mut self.inner).entries {
            entry.deferred = true;
        }
        self
    }

    /// Whether the tool of that name is deferred (`false` for a name not
    /// in the toolbox).
    pub fn is_deferred(&self, name: &str) -> bool {
        self.entry(name).is_some_and(|e| e.deferred)
    }

    /// Whether any tool in the toolbox is deferred.
    pub fn has_deferred(&self) -> bool {
        self.inner.entries.iter().any(|e| e.deferred)
    }
}
