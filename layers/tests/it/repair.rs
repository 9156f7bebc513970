//! Tool-call repair: each rule, rules together, what cannot be repaired,
//! the normal path untouched, names by case and alias over a toolbox, the
//! record of a repair, and under the agent.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::{json, Value};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{tool, ErrorKind, ToolContext, ToolError, ToolRequest, ToolResult, Toolbox};
use toolstack_layers::repair::{repair, RepairLayer, Repaired};
use tower::{ServiceBuilder, ServiceExt};

fn parsed(text: &str) -> (Value, Vec<&'static str>) {
    let (fixed, rules) = repair(text).unwrap_or_else(|| panic!("{text:?} not repaired"));
    (serde_json::from_str(&fixed).unwrap(), rules)
}

#[test]
fn each_rule_repairs_its_mistake() {
    let cases: [(&str, Value, &[&str]); 7] = [
        ("```json\n{\"a\": 1}\n```", json!({"a": 1}), &["fence"]),
        ("```\n{\"a\": 1}```", json!({"a": 1}), &["fence"]),
        (r#""{\"a\": 1}""#, json!({"a": 1}), &["string"]),
        (
            r#"{'a': 'it\'s "quoted"'}"#,
            json!({"a": "it's \"quoted\""}),
            &["single_quotes"],
        ),
        (
            "{a: 1, b_2: {c: true}}",
            json!({"a": 1, "b_2": {"c": true}}),
            &["bare_keys"],
        ),
        (
            r#"{"a": [1, 2,], "b": {"c": 3,},}"#,
            json!({"a": [1, 2], "b": {"c": 3}}),
            &["trailing_commas"],
        ),
        (
            r#"{"a": [1, {"b": "x"#,
            json!({"a": [1, {"b": "x"}]}),
            &["unclosed"],
        ),
    ];
    for (text, want, rules) in cases {
        let (got, applied) = parsed(text);
        assert_eq!(got, want, "{text}");
        assert_eq!(applied, rules, "{text}");
    }
}

#[test]
fn rules_combine_and_what_cannot_be_an_object_is_left_alone() {
    let (got, rules) = parsed("```json\n{query: 'SELECT 1', limit: 10,\n```");
    assert_eq!(got, json!({"query": "SELECT 1", "limit": 10}));
    assert_eq!(rules, ["fence", "bare_keys", "single_quotes", "unclosed"]);
    let (got, _) = parsed(r#"{"a": "#);
    assert_eq!(got, json!({"a": null}));
    for hopeless in [
        "",
        "hello",
        "[1, 2]",
        "42",
        "{\"a\" 1}",
        "{a b c}",
        "\"just text\"",
    ] {
        assert!(repair(hopeless).is_none(), "{hopeless:?}");
    }
    // Valid JSON objects need no repair.
    assert!(repair(r#"{"a": 1}"#).is_none());
}

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct Query {
    sql: String,
    limit: u32,
}

/// Records what the tool saw: its arguments, and the repair record.
fn query_tool(seen: Arc<Mutex<Vec<Option<Repaired>>>>) -> toolstack::BoxTool {
    toolstack::BoxTool::new(tool::from_fn_with_context(
        "execute_sql",
        move |q: Query, ctx: ToolContext| {
            seen.lock()
                .unwrap()
                .push(ctx.extensions().get::<Repaired>().cloned());
            async move { Ok::<_, ToolError>(format!("{} LIMIT {}", q.sql, q.limit)) }
        },
    ))
}

async fn call<S>(service: S, name: &str, args: &str) -> ToolResult
where
    S: tower::Service<ToolRequest, Error = ToolError>,
    S::Response: futures_util::Stream<Item = toolstack::ToolItem>,
{
    match service
        .oneshot(ToolRequest::new(name.to_owned(), args.to_owned()))
        .await
    {
        Ok(stream) => ToolResult::collect(stream).await,
        // Refused before it ran.
        Err(err) => ToolResult::from_error(err),
    }
}

#[tokio::test]
async fn a_repaired_call_runs_and_says_so_and_a_good_one_is_untouched() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tool = ServiceBuilder::new()
        .layer(RepairLayer::new())
        .service(query_tool(seen.clone()));
    let good = call(
        tool.clone(),
        "execute_sql",
        r#"{"sql": "SELECT 1", "limit": 5}"#,
    )
    .await;
    assert_eq!(good.into_text(), "SELECT 1 LIMIT 5");
    let fixed = call(tool.clone(), "execute_sql", "{sql: 'SELECT 2', limit: 5,}").await;
    assert_eq!(fixed.into_text(), "SELECT 2 LIMIT 5");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], None);
    assert_eq!(
        seen[1].as_ref().map(|r| r.rules.clone()),
        Some(vec!["bare_keys", "single_quotes", "trailing_commas"])
    );
}

#[tokio::test]
async fn what_cannot_be_repaired_is_refused_as_before_and_repaired_text_is_still_validated() {
    let tool = ServiceBuilder::new()
        .layer(RepairLayer::new())
        .service(query_tool(Arc::default()));
    let refused = call(tool.clone(), "execute_sql", "SELECT * FROM t").await;
    assert_eq!(
        refused.error.map(|e| e.kind()),
        Some(ErrorKind::InvalidArguments)
    );
    // Repaired into an object of the wrong shape: the tool names the field.
    let wrong = call(tool, "execute_sql", "{sql: 'x', limit: 'ten'}").await;
    let err = wrong.error.expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArguments);
    assert!(err.message().contains("limit"), "{err}");
}

#[tokio::test]
async fn around_a_toolbox_the_arguments_are_repaired_and_the_toolbox_repairs_the_name() {
    // The layer repairs the text; the toolbox, which knows the names its
    // caller may see, repairs the name.
    let toolbox = Toolbox::new()
        .boxed(query_tool(Arc::default()))
        .repair_names()
        .alias("run_sql", "execute_sql");
    let repaired = ServiceBuilder::new()
        .layer(RepairLayer::new())
        .service(toolbox);
    for name in ["Execute_SQL", "run_sql", "RUN_SQL"] {
        let result = call(repaired.clone(), name, "{sql: 'SELECT 3', limit: 1,}").await;
        assert_eq!(result.into_text(), "SELECT 3 LIMIT 1", "{name}");
    }
    let unknown = call(repaired, "drop_everything", "{}").await;
    assert_eq!(unknown.error.map(|e| e.kind()), Some(ErrorKind::NotFound));
}

#[tokio::test]
async fn under_the_agent_the_models_almost_json_reaches_the_tool() {
    let toolbox = Toolbox::new()
        .boxed(query_tool(Arc::default()))
        .layer(RepairLayer::new());
    let model = ScriptedModel::new([
        Turn::new().tool_call(
            "execute_sql",
            "```json\n{\"sql\": \"SELECT 4\", \"limit\": 2,}\n```",
        ),
        Turn::new().text("done"),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("q")])
        .collect()
        .await;
    let result = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result.text()),
            _ => None,
        })
        .unwrap();
    assert_eq!(result, "SELECT 4 LIMIT 2");
}

#[tokio::test]
async fn under_the_agent_a_near_miss_name_and_almost_json_reach_the_tool() {
    let toolbox = Toolbox::new()
        .boxed(query_tool(Arc::default()))
        .repair_names()
        .alias("run_sql", "execute_sql")
        .layer(RepairLayer::new());
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("Run_SQL", "{sql: 'SELECT 5', limit: 1}")
            .tool_call("EXECUTE_SQL", r#"{"sql": "SELECT 6", "limit": 1}"#)
            .tool_call("drop_tables", "{}"),
        Turn::new().text("done"),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("q")])
        .collect()
        .await;
    let results: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result.text()),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], "SELECT 5 LIMIT 1");
    assert_eq!(results[1], "SELECT 6 LIMIT 1");
    // An unknown name is still an error listing the tools.
    assert!(
        results[2].contains("unknown tool `drop_tables`"),
        "{}",
        results[2]
    );
}
