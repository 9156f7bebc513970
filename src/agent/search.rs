//! Tool search in a run: when the toolbox has
//! [deferred](crate::Toolbox::deferred) tools, the model is shown the
//! others and a [`SEARCH_TOOLS`] tool; a search ranks the deferred tools
//! the caller may see ([`ToolSearch`]) and loads what it finds for the
//! rest of the run — recorded in the run's journal before its result, so
//! a resumed run (and a session's next run) shows the model the same
//! tools.

use http::Extensions;
use tracing::Instrument;

use crate::tool::{Decode, JsonDecoder};
use crate::toolbox::{Found, ToolSearch, MAX_QUERY_CHARS};
use crate::{ErrorKind, ToolError, ToolInfo, ToolOutput, ToolResult};

/// The name of the tool a model searches deferred tools with.
pub const SEARCH_TOOLS: &str = "search_tools";

/// The tools a search returns when the model does not say: 5.
pub const DEFAULT_SEARCH_LIMIT: usize = 5;

/// The most tools one search returns: 20.
pub const MAX_SEARCH_LIMIT: usize = 20;

/// The longest description a search result quotes, in characters.
const QUOTED_DESCRIPTION_CHARS: usize = 300;

pub use crate::model::LoadedTools;

/// The search tool's arguments.
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// What the tool you need does, in a few words (the task, the
    /// service's name if you know it): "create a GitHub issue", "who is on
    /// call".
    query: String,
    /// How many tools to return, best first (1 to 20; 5 if not given).
    #[serde(default)]
    limit: Option<usize>,
}

/// The [`SEARCH_TOOLS`] tool as an agent shows it to the model, over
/// `deferred` tools not shown yet.
pub fn search_tool_info(deferred: usize) -> ToolInfo {
    ToolInfo::new(SEARCH_TOOLS)
        .with_description(format!(
            "Searches {deferred} more tools that are not shown yet, by what they do. The tools \
             found are loaded: you can call them from your next step on, by name. Search \
             whenever none of the tools you have fits the task."
        ))
        .with_input_schema_for::<SearchArgs>()
}

/// The most names [`search_tool_info_with_names`] lists; past it, their
/// count and how to find the rest.
pub const MAX_NAMES_IN_VIEW: usize = 1_000;

/// The [`SEARCH_TOOLS`] tool for an agent that shows the model the names
/// of the tools not shown yet ([`Agent::deferred_names_in_view`]): their
/// names grouped by their prefix (the server a toolbox was nested under,
/// `github_…`), no schemas; the model loads one by calling the search with
/// its exact name, or searches by what it needs as before.
///
/// [`Agent::deferred_names_in_view`]: super::Agent::deferred_names_in_view
pub fn search_tool_info_with_names(names: &[&str]) -> ToolInfo {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for name in names.iter().take(MAX_NAMES_IN_VIEW) {
        let prefix = name.split_once(['_', '.']).map_or("", |(prefix, _)| prefix);
        match groups.iter_mut().find(|(p, _)| *p == prefix) {
            Some((_, members)) => members.push(name),
            None => groups.push((prefix, vec![name])),
        }
    }
    // A prefix of one tool is no group.
    let (mut grouped, single): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|(p, m)| !p.is_empty() && m.len() > 1);
    let others: Vec<&str> = single.into_iter().flat_map(|(_, m)| m).collect();
    if !others.is_empty() {
        grouped.push(("other", others));
    }
    let mut description = format!(
        "Loads tools that are not shown yet. Call it with a tool's exact name as the query \
         (several: separated by commas) to load those tools, or with what you need done to \
         search {} tools by what they do. The tools loaded can be called from your next step \
         on, by name. The tools not shown yet:",
        names.len()
    );
    for (prefix, members) in grouped {
        description.push_str("\n- ");
        description.push_str(prefix);
        description.push_str(": ");
        description.push_str(&members.join(", "));
    }
    if names.len() > MAX_NAMES_IN_VIEW {
        description.push_str(&format!(
            "\n… and {} more, found by searching.",
            names.len() - MAX_NAMES_IN_VIEW
        ));
    }
    ToolInfo::new(SEARCH_TOOLS)
        .with_description(description)
        .with_input_schema_for::<SearchArgs>()
}

/// One search call: the tools found (best first) and the model's result.
pub(super) struct Searched {
    /// The names of the tools found.
    pub(super) found: Vec<String>,
    pub(super) result: ToolResult,
}

/// Runs a search call with the model's `arguments`, in an
/// `execute_tool search_tools` span as a trace layer makes for any tool.
pub(super) async fn search(
    search: &ToolSearch,
    call_id: &str,
    arguments: &str,
    extensions: &Extensions,
    default_limit: usize,
) -> Searched {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {SEARCH_TOOLS}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = SEARCH_TOOLS,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.type = "function",
        toolstack.search.found = tracing::field::Empty,
        toolstack.search.ranking = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let run = async {
        let searched = run(search, arguments, extensions, default_limit).await;
        let span = tracing::Span::current();
        match &searched {
            Ok(searched) => {
                span.record("toolstack.search.found", searched.found.len());
            }
            Err(err) => {
                span.record("error.type", err.kind().as_str());
                span.record("otel.status_code", "ERROR");
            }
        }
        searched.unwrap_or_else(|err| Searched {
            found: Vec::new(),
            result: ToolResult::from_error(err),
        })
    };
    run.instrument(span).await
}

async fn run(
    search: &ToolSearch,
    arguments: &str,
    extensions: &Extensions,
    default_limit: usize,
) -> Result<Searched, ToolError> {
    let SearchArgs { query, limit } =
        <JsonDecoder as Decode<SearchArgs>>::decode(&JsonDecoder, arguments)?;
    let chars = query.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(ToolError::invalid_arguments(format!(
            "invalid value at `query`: {chars} characters; a query takes at most {MAX_QUERY_CHARS} (a few words say what the tool does)"
        )));
    }
    let limit = match limit {
        None => default_limit,
        Some(limit @ 1..=MAX_SEARCH_LIMIT) => limit,
        Some(other) => {
            return Err(ToolError::invalid_arguments(format!(
                "invalid value at `limit`: {other}; it takes 1 to {MAX_SEARCH_LIMIT}"
            )))
        }
    };
    let Found {
        tools: found,
        closest,
        ranking,
        ..
    } = search.find(&query, extensions, limit).await;
    tracing::Span::current().record("toolstack.search.ranking", ranking.as_str());
    let quoted_query: String = query.chars().take(100).collect();
    if found.is_empty() && !closest.is_empty() {
        let message = format!(
            "no tool fits `{quoted_query}` (the closest are {}, none loaded); search again with other words, or go on without a tool",
            closest.join(", ")
        );
        return Err(ToolError::new(ErrorKind::NotFound, message));
    }
    if found.is_empty() {
        let message = format!(
            "no tool matches `{quoted_query}`; search again with other words: what the tool does, or the name of the service"
        );
        return Err(ToolError::new(ErrorKind::NotFound, message));
    }
    let mut text = format!(
        "{} tools found and loaded; call the one that fits, by its name:",
        found.len()
    );
    for info in &found {
        text.push_str("\n- ");
        text.push_str(info.name());
        text.push_str(" (");
        text.push_str(effects(info));
        text.push(')');
        if let Some(description) = info.description() {
            text.push_str(": ");
            let mut quoted: String = description.chars().take(QUOTED_DESCRIPTION_CHARS).collect();
            if quoted.len() < description.len() {
                quoted.push('…');
            }
            text.push_str(&quoted.replace('\n', " "));
        }
    }
    let mut result = ToolResult::default();
    result.push(ToolOutput::text(text));
    Ok(Searched {
        found: found.iter().map(|info| info.name().to_owned()).collect(),
        result,
    })
}

/// What a tool does to the world, by its MCP annotations, as a search
/// result says it: so that a model asked to read is not handed a tool that
/// writes without knowing it. MCP's defaults apply to what is not said: a
/// tool not marked read-only may write, and one that writes may destroy.
fn effects(info: &ToolInfo) -> &'static str {
    let annotations = info.annotations();
    match (annotations.read_only_hint, annotations.destructive_hint) {
        (Some(true), _) => "reads only",
        (Some(false), Some(false)) => "writes, does not delete",
        (Some(false), _) => "writes, may delete",
        (None, Some(false)) => "may write, does not delete",
        (None, Some(true)) => "may write and delete",
        (None, None) => "effects not declared",
    }
}
