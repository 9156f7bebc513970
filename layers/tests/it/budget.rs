//! The output budget: untouched under it; head, notice and tail over it
//! (by items, bytes, tokens); text cut inside at character boundaries;
//! progress uncounted; an error after the tail; the tap; bounded memory;
//! under the agent.

use crate::support;

use std::sync::{Arc, Mutex};

use futures_util::{stream, StreamExt};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{
    tool, Progress, ToolError, ToolItem, ToolOutput, ToolRequest, ToolResult, Toolbox,
};
use toolstack_layers::budget::{BudgetLayer, Tap};
use tower::{ServiceBuilder, ServiceExt};

/// A tool that streams `items`.
fn streaming(items: Vec<ToolItem>) -> toolstack::BoxTool {
    let items = Arc::new(items);
    toolstack::BoxTool::new(tool::from_stream("rows", move |_: serde_json::Value| {
        stream::iter((*items).clone())
    }))
}

fn rows(n: usize) -> Vec<ToolItem> {
    (1..=n)
        .map(|i| Ok(ToolOutput::text(format!("row {i}"))))
        .collect()
}

async fn run(layer: BudgetLayer, items: Vec<ToolItem>, request: ToolRequest) -> Vec<ToolItem> {
    let tool = ServiceBuilder::new().layer(layer).service(streaming(items));
    tool.oneshot(request).await.unwrap().collect().await
}

fn texts(items: &[ToolItem]) -> Vec<String> {
    items
        .iter()
        .map(|i| match i {
            Ok(ToolOutput::Text { text }) => text.clone(),
            Ok(ToolOutput::Progress(p)) => format!("<progress {}>", p.progress),
            Ok(other) => format!("<{other:?}>"),
            Err(e) => format!("<error {}>", e.message()),
        })
        .collect()
}

fn request() -> ToolRequest {
    ToolRequest::new("rows", "{}")
}

#[tokio::test]
async fn under_budget_the_output_is_untouched() {
    let out = run(
        BudgetLayer::new().max_items(10).max_bytes(1000),
        rows(10),
        request(),
    )
    .await;
    assert_eq!(texts(&out), texts(&rows(10)));
    let out = run(BudgetLayer::new(), rows(500), request()).await;
    assert_eq!(out.len(), 500);
}

#[tokio::test]
async fn over_budget_by_items_the_head_the_notice_and_the_tail() {
    let out = run(BudgetLayer::new().max_items(10), rows(100), request()).await;
    let texts = texts(&out);
    assert_eq!(texts.len(), 11);
    assert_eq!(
        &texts[..8],
        &(1..=8).map(|i| format!("row {i}")).collect::<Vec<_>>()[..]
    );
    assert_eq!(
        texts[8],
        "[… 90 items (539 bytes) omitted here: the output was over its budget of 10 items. \
         Ask for less — narrow the query, filter, or ask for a page.]"
    );
    assert_eq!(&texts[9..], ["row 99", "row 100"]);
}

#[tokio::test]
async fn over_budget_by_bytes_a_text_is_cut_inside_at_character_boundaries() {
    // One 3,000-byte text of two-byte characters, a budget of 101 bytes:
    // 81 for the head (rounded down to 80), 20 for the tail.
    let text: String = "é".repeat(1500);
    let out = run(
        BudgetLayer::new().max_bytes(101),
        vec![Ok(ToolOutput::text(text))],
        request(),
    )
    .await;
    let texts = texts(&out);
    assert_eq!(texts.len(), 3, "{texts:?}");
    assert_eq!(texts[0], "é".repeat(40));
    assert!(
        texts[1].contains("1 items (2,900 bytes) omitted"),
        "{}",
        texts[1]
    );
    assert!(texts[1].contains("101 bytes (≈ 25 tokens)"), "{}", texts[1]);
    assert_eq!(texts[2], "é".repeat(10));
}

#[tokio::test]
async fn a_token_budget_is_a_byte_budget_of_four_bytes_a_token() {
    let out = run(BudgetLayer::new().max_tokens(10), rows(50), request()).await;
    let kept: usize = out
        .iter()
        .map(|i| i.as_ref().unwrap().as_text().unwrap())
        .filter(|t| !t.starts_with('['))
        .map(str::len)
        .sum();
    assert!(kept <= 40, "{kept} bytes kept");
    assert!(texts(&out)
        .iter()
        .any(|t| t.contains("40 bytes (≈ 10 tokens)")));
}

#[tokio::test]
async fn progress_passes_uncounted_and_an_error_comes_after_the_notice_and_the_tail() {
    let mut items = rows(6);
    items.insert(2, Ok(ToolOutput::progress(Progress::new(1.0))));
    items.push(Err(ToolError::failed("disk full")));
    let out = run(BudgetLayer::new().max_items(5), items, request()).await;
    assert_eq!(
        texts(&out),
        [
            "row 1",
            "row 2",
            "<progress 1>",
            "row 3",
            "row 4",
            "[… 1 items (5 bytes) omitted here: the output was over its budget of 5 items. \
             Ask for less — narrow the query, filter, or ask for a page.]",
            "row 6",
            "<error disk full>"
        ]
    );
}

#[tokio::test]
async fn a_tool_words_its_own_notice() {
    let layer = BudgetLayer::new()
        .max_items(4)
        .tail_percent(0)
        .notice(|cut| {
            format!(
                "… {} rows omitted; narrow the query or ask for a page",
                cut.items
            )
        });
    let out = run(layer, rows(2815), request()).await;
    let texts = texts(&out);
    assert_eq!(texts.len(), 5);
    assert_eq!(
        texts[4],
        "… 2811 rows omitted; narrow the query or ask for a page"
    );
}

#[tokio::test]
async fn a_tap_in_the_extensions_sees_every_item_the_cut_ones_included() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut req = request();
    req.extensions_mut()
        .insert(Tap::new(move |item: &ToolOutput| {
            log.lock()
                .unwrap()
                .push(item.as_text().unwrap_or_default().to_owned());
        }));
    let out = run(BudgetLayer::new().max_items(3), rows(20), req).await;
    assert_eq!(out.len(), 4);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 20);
    assert_eq!(seen[19], "row 20");
}

#[tokio::test]
async fn memory_is_bounded_by_the_budget_whatever_the_tool_sends() {
    // 200,000 rows through a 50-row budget: the output is 51 items.
    let tool = ServiceBuilder::new()
        .layer(BudgetLayer::new().max_items(50))
        .service(tool::from_stream("many", |_: serde_json::Value| {
            stream::iter((0..200_000).map(|i| Ok::<_, ToolError>(ToolOutput::text(format!("{i}")))))
        }));
    let out: Vec<_> = tool
        .oneshot(ToolRequest::new("many", "{}"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(out.len(), 51);
    assert_eq!(out[50].as_ref().unwrap().as_text(), Some("199999"));
}

#[tokio::test]
async fn dropping_the_stream_drops_the_tool() {
    let tool = support::Scripted::new(vec![vec![support::Step::Text(0, "a"), support::Step::Hang]]);
    let probe = tool.clone();
    let layered = ServiceBuilder::new()
        .layer(BudgetLayer::new().max_items(1))
        .service(tool);
    let mut stream = Box::pin(layered.oneshot(request()).await.unwrap());
    assert!(stream.next().await.is_some());
    drop(stream);
    assert!(probe.was_dropped());
}

#[tokio::test]
async fn under_the_agent_the_model_reads_the_budgeted_result() {
    let toolbox = Toolbox::new().layered(
        tool::from_stream("rows", |_: serde_json::Value| stream::iter(rows(1000))),
        BudgetLayer::new().max_items(5),
    );
    let model = ScriptedModel::new([
        Turn::new().tool_call("rows", "{}"),
        Turn::new().text("done"),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("list")])
        .collect()
        .await;
    let result: &ToolResult = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result),
            _ => None,
        })
        .expect("a tool result");
    let text = result.text();
    assert!(
        text.starts_with("row 1\nrow 2\nrow 3\nrow 4\n[… 995 items"),
        "{text}"
    );
    assert!(text.ends_with("row 1000"), "{text}");
}

#[tokio::test]
async fn output_for_programs_only_passes_uncounted_and_uncut() {
    // A file's text the model reads, and the same as structured content
    // for programs (an MCP server's `structuredContent`), much larger than
    // the budget: the budget is the model's, and the model never reads it.
    let big = serde_json::json!({"content": "x".repeat(10_000)});
    let items = vec![
        Ok(ToolOutput::text("the file")),
        Ok(ToolOutput::structured(big.clone())),
    ];
    let out = run(BudgetLayer::new().max_bytes(100), items, request()).await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0].as_ref().unwrap().as_text(), Some("the file"));
    assert!(matches!(
        out[1].as_ref().unwrap(),
        ToolOutput::Structured { value } if value.value() == big
    ));
}
