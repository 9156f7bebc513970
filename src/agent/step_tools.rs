//! Which tools the model may call, per run and per step: the run's
//! [`ToolChoice`](crate::model::ToolChoice) and the hook that sets each
//! step's active tools and choice from the run so far
//! ([`Agent::prepare_step`](super::Agent::prepare_step)).

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::{Message, ToolChoice};
use crate::{ErrorKind, ToolError, ToolInfo};

/// What the step hook sees: the step about to ask the model, the history
/// so far, and the tools the caller may see.
#[derive(Debug)]
#[non_exhaustive]
pub struct StepContext<'a> {
    /// The model call's number in the run, from 0.
    pub step: usize,
    /// The history the model is about to read.
    pub messages: &'a [Message],
    /// Every tool the caller may see (before the step's narrowing) but
    /// the [deferred](crate::Toolbox::deferred) ones no search has loaded.
    pub tools: &'a [ToolInfo],
}

/// What a step runs with, as the hook sets it: left `None`, the run's
/// own (every tool the caller may see, the agent's
/// [`tool_choice`](super::Agent::tool_choice)).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StepSettings {
    /// The only tools the model is shown and may call in this step, by
    /// name.
    pub active_tools: Option<Vec<String>>,
    /// The step's tool choice.
    pub tool_choice: Option<ToolChoice>,
}

impl StepSettings {
    /// The run's own settings.
    pub fn new() -> Self {
        StepSettings::default()
    }

    /// Shows the model only these tools in this step.
    pub fn active_tools<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.active_tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// This step's tool choice.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }
}

/// The hook: see [`Agent::prepare_step`](super::Agent::prepare_step).
#[derive(Clone)]
pub(super) struct PrepareStep(
    pub(super) Arc<dyn Fn(&StepContext<'_>) -> StepSettings + Send + Sync>,
);

impl std::fmt::Debug for PrepareStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrepareStep")
    }
}

/// One step's tools and choice, checked against what the caller may see.
pub(super) struct StepTools {
    /// The tools the model is shown.
    pub(super) tools: Arc<[ToolInfo]>,
    pub(super) choice: ToolChoice,
    /// The names it may call, when narrowed.
    pub(super) active: Option<HashSet<String>>,
}

impl StepTools {
    /// The step's settings over the `visible` tools: an active tool or a
    /// chosen tool the caller cannot see, or a choice that needs a tool
    /// when none is offered, is refused before the call.
    pub(super) fn settle(
        visible: &Arc<[ToolInfo]>,
        settings: StepSettings,
        default: &ToolChoice,
        extra: &[ToolInfo],
    ) -> Result<StepTools, ToolError> {
        let choice = settings.tool_choice.unwrap_or_else(|| default.clone());
        let (tools, active): (Arc<[ToolInfo]>, _) = match settings.active_tools {
            None => (Arc::clone(visible), None),
            Some(names) => {
                // The agent's own tools (the search, the final answer) may
                // be named too.
                if let Some(unknown) = names.iter().find(|name| {
                    !visible
                        .iter()
                        .chain(extra)
                        .any(|t| t.name() == name.as_str())
                }) {
                    return Err(invalid(format!(
                        "the step's active tools name `{}`, which is not a tool the caller may use: {}",
                        quoted(unknown),
                        names_of(visible)
                    )));
                }
                let active: HashSet<String> = names.into_iter().collect();
                let tools = visible
                    .iter()
                    .filter(|t| active.contains(t.name()))
                    .cloned()
                    .collect();
                (tools, Some(active))
            }
        };
        // The agent's own tools (the final answer, the search) stay
        // callable whatever the step's narrowing.
        let active = active.map(|mut active: HashSet<String>| {
            active.extend(extra.iter().map(|t| t.name().to_owned()));
            active
        });
        let tools: Arc<[ToolInfo]> = match extra.is_empty() {
            true => tools,
            false => tools.iter().chain(extra).cloned().collect(),
        };
        match &choice {
            ToolChoice::Tool(name) if !tools.iter().any(|t| t.name() == &**name) => {
                return Err(invalid(format!(
                    "the tool choice names `{}`, which is not among the tools this step offers: {}",
                    quoted(name),
                    names_of(&tools)
                )))
            }
            ToolChoice::Required if tools.is_empty() => {
                return Err(invalid(
                    "the tool choice requires a tool call, but this step offers no tool".to_owned(),
                ))
            }
            _ => {}
        }
        Ok(StepTools {
            tools,
            choice,
            active,
        })
    }

    /// Why the model may not call `name` in this step, if it may not.
    pub(super) fn refuses(&self, name: &str) -> Option<ToolError> {
        let active = self.active.as_ref()?;
        if active.contains(name) {
            return None;
        }
        let mut allowed: Vec<&str> = active.iter().map(String::as_str).collect();
        allowed.sort_unstable();
        Some(ToolError::new(
            ErrorKind::Denied,
            format!(
                "not run: the tool `{}` is not available at this step; the tools you may call now: {}",
                quoted(name),
                match allowed.is_empty() {
                    true => "none".to_owned(),
                    false => allowed.join(", "),
                }
            ),
        ))
    }
}

fn invalid(message: String) -> ToolError {
    ToolError::new(ErrorKind::InvalidArguments, message)
}

/// A name as a message quotes it: at most 64 characters.
fn quoted(name: &str) -> String {
    name.chars().take(64).collect()
}

fn names_of(tools: &[ToolInfo]) -> String {
    match tools.is_empty() {
        true => "none".to_owned(),
        false => tools
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", "),
    }
}
