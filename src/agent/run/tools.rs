//! A tool step: the calls run through the toolbox, and the deferred tools a search loads.

use std::sync::Arc;

use futures_util::{stream, StreamExt};

use crate::model::ModelService;
use crate::model::{Message, ToolCall};
use crate::{ErrorKind, ToolError, ToolInfo, ToolResult};

use crate::agent::event::AgentEvent;
use crate::agent::journal::run_error;
use crate::agent::output::TypedOutput;
use crate::agent::resume::Resumed;
use crate::agent::search::{search_tool_info, search_tool_info_with_names, SEARCH_TOOLS};
use crate::agent::settings::Agent;
use crate::agent::step_call::{SearchCall, StepCall};
use crate::agent::step_state::fail;
use crate::agent::step_tools::{StepContext, StepSettings, StepTools};
use crate::agent::store::{CallRecord, CallState};

use super::Run;

impl<M> Run<M>
where
    M: ModelService,
{
    /// Runs the step's tool calls (up to the agent's bound at once) and
    /// closes it: their results join the conversation, in the order of
    /// the calls. A resumed step's calls go on from their stored states.
    pub(super) async fn run_tools(&mut self, resumed: Option<Resumed>) {
        let records = self.journal.step();
        {
            let mut step = self.step.lock().unwrap_or_else(|p| p.into_inner());
            step.queued = records.len();
            step.parallel = self.agent.parallel;
        }
        for record in &records {
            if record.state == CallState::Planned {
                let _ = self
                    .tx
                    .send(AgentEvent::ToolCall(record.call.clone()))
                    .await;
            }
        }
        let resumed = resumed.map(Arc::new);
        // The calls stay here, lent to their runs: the costs read them
        // after. Why each call may not run (outside the step's tools, or
        // a deferred tool not loaded), and which are searches.
        let mut calls: Vec<ToolCall> = Vec::with_capacity(records.len());
        let runs: Vec<_> = records
            .into_iter()
            .map(|CallRecord { call, state }| {
                let name = &call.name;
                let refused = self.current.refuses(name).or_else(|| self.not_loaded(name));
                let search = match name == SEARCH_TOOLS && self.searches() {
                    true => self.agent.deferred_search().map(|search| SearchCall {
                        search: Arc::clone(search),
                        limit: self.agent.search_limit,
                    }),
                    false => None,
                };
                calls.push(call);
                (state, refused, search)
            })
            .collect();
        // A call that ends frees its slot at once (the results are put in
        // call order after), so a call waiting for a person holds one
        // slot, not the calls after it.
        let mut lengths: Vec<(usize, usize)> = stream::iter(runs.into_iter().enumerate())
            .map(|(at, (state, refused, search))| {
                let tool_call = &calls[at];
                // Taken here, in call order, for a call the toolbox runs.
                let place = (refused.is_none() && search.is_none())
                    .then(|| self.steps.tool_step(&tool_call.id));
                let call = StepCall {
                    toolbox: self.agent.toolbox.clone(),
                    tx: self.tx.clone(),
                    extensions: self.extensions.clone(),
                    step: Arc::clone(&self.step),
                    journal: Arc::clone(&self.journal),
                    failed: Arc::clone(&self.failed),
                    idempotent: search.is_some()
                        || self
                            .visible
                            .iter()
                            .find(|info| info.name() == tool_call.name)
                            .is_some_and(|info| info.annotations().is_idempotent()),
                    resumed: resumed.clone(),
                    refused,
                    search,
                    place,
                };
                let run = call.run(tool_call, state);
                async move { (at, run.await) }
            })
            .buffer_unordered(self.agent.parallel)
            .collect()
            .await;
        lengths.sort_unstable_by_key(|(at, _)| *at);
        let lengths = lengths.into_iter().map(|(_, length)| length);
        self.costs.step_ran(&calls, lengths);
        self.journal.close_step().await;
        self.tools_loaded();
    }

    /// Whether the agent offers its search: the toolbox has deferred tools,
    /// and no tool of its own by the search's name (which it then keeps).
    pub(super) fn searches(&self) -> bool {
        self.agent.deferred_search().is_some()
            && !self.visible.iter().any(|t| t.name() == SEARCH_TOOLS)
    }

    /// The tools a search loaded in the step just run join those the
    /// model is shown.
    pub(super) fn tools_loaded(&mut self) {
        if self.agent.deferred_search().is_none() {
            return;
        }
        let loaded = self.journal.loaded_tools();
        if loaded.len() != self.shown_loaded {
            self.tools = shown(&self.agent, &self.visible, Some(&loaded));
            self.shown_loaded = loaded.len();
        }
    }

    /// Why a call of `name` is not run, when the toolbox has deferred
    /// tools: a deferred tool the caller may see, not loaded by a search
    /// yet — whatever name reaches it (a near-miss the toolbox would
    /// repair, an alias) —, or a name of no tool shown, answered with the
    /// tools shown (never the deferred ones, which the model finds by
    /// searching).
    pub(super) fn not_loaded(&self, name: &str) -> Option<ToolError> {
        self.agent.deferred_search()?;
        let shown =
            |name: &str| name == SEARCH_TOOLS || self.tools.iter().any(|t| t.name() == name);
        if shown(name) {
            return None;
        }
        let repaired = self.agent.toolbox.repaired_name(name, &self.extensions);
        let target = repaired.as_deref().unwrap_or(name);
        if shown(target) {
            return None;
        }
        let quoted: String = name.chars().take(64).collect();
        if self.visible.iter().any(|t| t.name() == target) {
            return Some(ToolError::new(
                ErrorKind::NotFound,
                format!(
                    "not run: the tool `{quoted}` is not loaded yet; call `{SEARCH_TOOLS}` with what you need it for, then call the tool it finds"
                ),
            ));
        }
        let names: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
        Some(ToolError::new(
            ErrorKind::NotFound,
            format!(
                "unknown tool `{quoted}`; the tools you may call: {}; `{SEARCH_TOOLS}` finds more",
                names.join(", ")
            ),
        ))
    }

    /// This step's tools and choice: the hook's settings over the tools
    /// the caller may see, checked.
    pub(super) fn settle_step(&mut self) -> Result<(), ToolError> {
        let settings = match &self.agent.prepare_step {
            Some(hook) => {
                let messages = self.journal.messages();
                (hook.0)(&StepContext {
                    step: self.journal.counts().steps,
                    messages: &messages,
                    tools: &self.tools,
                })
            }
            None => StepSettings::new(),
        };
        let mut extra: Vec<ToolInfo> = self
            .agent
            .output
            .as_ref()
            .and_then(TypedOutput::tool)
            .into_iter()
            .collect();
        let unloaded = self.visible.len() - self.tools.len();
        if self.searches() && unloaded > 0 {
            extra.push(match self.agent.names_in_view {
                false => search_tool_info(unloaded),
                true => {
                    let shown: std::collections::HashSet<&str> =
                        self.tools.iter().map(ToolInfo::name).collect();
                    let names: Vec<&str> = self
                        .visible
                        .iter()
                        .map(ToolInfo::name)
                        .filter(|name| !shown.contains(name))
                        .collect();
                    search_tool_info_with_names(&names)
                }
            });
        }
        self.current = StepTools::settle(&self.tools, settings, &self.agent.tool_choice, &extra)?;
        Ok(())
    }

    /// Answers every call of a step that will not run with `err`, so the
    /// history stays well-formed.
    pub(super) async fn refuse(&mut self, calls: Vec<ToolCall>, err: ToolError) {
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            let result = ToolResult::from_error(err.clone());
            results.push(Message::tool_error(call.id.clone(), result.text()));
            let _ = self
                .tx
                .send(AgentEvent::ToolResult {
                    call_id: call.id,
                    name: call.name,
                    result,
                })
                .await;
        }
        if let Err(err) = self.journal.messages_added(results).await {
            fail(&self.failed, run_error(err));
        }
    }
}

/// The tools the model is shown: every one the caller may see, but the
/// deferred ones not `loaded` (all of them, for an agent whose toolbox
/// defers none).
pub(super) fn shown<M>(
    agent: &Agent<M>,
    visible: &Arc<[ToolInfo]>,
    loaded: Option<&[String]>,
) -> Arc<[ToolInfo]> {
    let Some(loaded) = loaded else {
        return Arc::clone(visible);
    };
    let loaded: std::collections::HashSet<&str> = loaded.iter().map(String::as_str).collect();
    visible
        .iter()
        .filter(|info| !agent.toolbox.is_deferred(info.name()) || loaded.contains(info.name()))
        .cloned()
        .collect()
}
