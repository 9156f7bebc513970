//! A catalogue of 325 tools as a few dozen merged MCP servers would list
//! them (GitHub, Jira, Slack, Gmail, Kubernetes, Stripe, …: realistic
//! names, descriptions and parameters, many alike across services), and
//! 205 queries worded as users ask for a tool, each naming the one right
//! tool — what tool search is measured on (`tests/tool_search.rs`, the
//! `tool_search` bench group).
//!
//! The data is in `demo/data/`: `tool_catalogue.json` (name, description,
//! JSON Schema of the parameters) and `tool_queries.json` (query,
//! expected). The tools here answer `ok`: only their descriptions matter.

use std::time::SystemTime;

use serde::Deserialize;
use toolstack::{ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest, Toolbox};

const CATALOGUE: &str = include_str!("../data/tool_catalogue.json");
const QUERIES: &str = include_str!("../data/tool_queries.json");

#[derive(Deserialize)]
struct Entry {
    name: String,
    description: String,
    parameters: serde_json::Value,
}

/// One query and the tool that answers it.
#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    /// What a user asks for.
    pub query: String,
    /// The one right tool's name.
    pub expected: String,
}

/// The catalogue's descriptions, in its order.
pub fn infos() -> Vec<ToolInfo> {
    let entries: Vec<Entry> = serde_json::from_str(CATALOGUE).expect("the catalogue is JSON");
    entries
        .into_iter()
        .map(|e| {
            ToolInfo::new(e.name)
                .with_description(e.description)
                .with_input_schema(e.parameters)
        })
        .collect()
}

/// The catalogue as a toolbox (not deferred), each tool answering `ok`.
pub fn toolbox() -> Toolbox {
    from_infos(infos())
}

/// A toolbox of `infos` (not deferred), each tool answering `ok`.
pub fn from_infos(infos: Vec<ToolInfo>) -> Toolbox {
    infos.into_iter().fold(Toolbox::new(), |toolbox, info| {
        toolbox.service(
            info,
            tower::service_fn(|_: ToolRequest| async {
                let ok: ToolItem = Ok(ToolOutput::text("ok"));
                Ok::<_, ToolError>(futures_util::stream::iter([ok]))
            }),
        )
    })
}

/// The seed's demo tools (weather, calculator, clock, a file's lines, a
/// counter): what an app shows its model always.
pub fn demo_tools() -> Toolbox {
    Toolbox::new()
        .boxed(crate::tools::weather())
        .boxed(crate::tools::calculator())
        .boxed(crate::tools::clock(SystemTime::now))
        .boxed(crate::tools::read_lines())
        .boxed(crate::tools::count())
}

/// The queries.
pub fn queries() -> Vec<Query> {
    serde_json::from_str(QUERIES).expect("the queries are JSON")
}
