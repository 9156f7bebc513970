//! The coalescing layer: when text passes, merged, and what makes it go
//! out (its window on the paused clock, its size, a non-text item, an
//! error, the end); order and drops; models and the agent.

use crate::support;

use std::time::Duration;

use futures_util::{stream, StreamExt};
use support::{Scripted, Step};
use tokio::time::Instant;
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::{Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{tool, Progress, ToolError, ToolOutput, ToolRequest, Toolbox};
use toolstack_layers::coalesce::{CoalesceLayer, Coalesced};
use tower::{ServiceBuilder, ServiceExt};

fn layer() -> CoalesceLayer {
    CoalesceLayer::new().window(Duration::from_millis(100))
}

/// The items of a call, each with the milliseconds since the call began.
async fn timed<S>(tool: S) -> Vec<(u64, Result<String, String>)>
where
    S: tower::Service<ToolRequest, Error = ToolError>,
    S::Response: futures_util::Stream<Item = toolstack::ToolItem>,
{
    let start = Instant::now();
    let stream = tool.oneshot(ToolRequest::new("t", "{}")).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        let at = start.elapsed().as_millis() as u64;
        out.push((
            at,
            match item {
                Ok(ToolOutput::Text { text }) => Ok(text),
                Ok(other) => Ok(format!("<{}>", other.kind_str())),
                Err(err) => Err(err.message().to_owned()),
            },
        ));
    }
    out
}

trait KindStr {
    fn kind_str(&self) -> &'static str;
}

impl KindStr for ToolOutput {
    fn kind_str(&self) -> &'static str {
        match self {
            ToolOutput::Json { .. } => "json",
            ToolOutput::Progress(_) => "progress",
            _ => "other",
        }
    }
}

fn ok(at: u64, text: &str) -> (u64, Result<String, String>) {
    (at, Ok(text.to_owned()))
}

#[tokio::test(start_paused = true)]
async fn the_first_item_passes_at_once_and_a_burst_goes_out_merged_at_the_windows_end() {
    let tool = Scripted::new(vec![vec![
        Step::Text(0, "a"),
        Step::Text(10, "b"),
        Step::Text(10, "c"),
        Step::Text(10, "d"),
        // A quiet window later: passes at once.
        Step::Text(300, "e"),
    ]]);
    let items = timed(ServiceBuilder::new().layer(layer()).service(tool)).await;
    assert_eq!(items, [ok(0, "a"), ok(100, "bcd"), ok(330, "e")]);
}

#[tokio::test(start_paused = true)]
async fn text_goes_out_when_it_reaches_max_bytes_before_its_window_ends() {
    let tool = Scripted::new(vec![vec![
        Step::Text(0, "first"),
        Step::Text(1, "aaa"),
        Step::Text(1, "bbb"),
        Step::Text(1, "ccc"),
        Step::Text(1, "d"),
        Step::Text(200, "e"),
    ]]);
    let items = timed(
        ServiceBuilder::new()
            .layer(layer().max_bytes(8))
            .service(tool),
    )
    .await;
    // "aaabbbccc" reached 8 bytes at 3 ms and went out; "d" (4 ms) waits
    // for the window counted from then; "e" comes after a quiet window.
    assert_eq!(
        items,
        [
            ok(0, "first"),
            ok(3, "aaabbbccc"),
            ok(103, "d"),
            ok(204, "e")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn held_text_goes_before_a_non_text_item_and_before_an_error_and_nothing_follows_the_error() {
    let tool = tool::from_stream("t", |_: serde_json::Value| {
        stream::iter([
            Ok(ToolOutput::text("a")),
            Ok(ToolOutput::text("b")),
            Ok(ToolOutput::text("c")),
            Ok(ToolOutput::progress(Progress::new(1.0))),
            Ok(ToolOutput::text("d")),
            Ok(ToolOutput::text("e")),
            Err(ToolError::failed("boom")),
            Ok(ToolOutput::text("never")),
        ])
    });
    let items = timed(ServiceBuilder::new().layer(layer()).service(tool)).await;
    assert_eq!(
        items,
        [
            ok(0, "a"),
            ok(0, "bc"),
            ok(0, "<progress>"),
            ok(0, "de"),
            (0, Err("boom".to_owned())),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_end_flushes_and_a_zero_window_passes_everything() {
    let burst = || {
        tool::from_stream("t", |_: serde_json::Value| {
            stream::iter(["x", "y", "z"].map(|t| Ok::<_, ToolError>(ToolOutput::text(t))))
        })
    };
    let merged = timed(ServiceBuilder::new().layer(layer()).service(burst())).await;
    assert_eq!(merged, [ok(0, "x"), ok(0, "yz")]);
    let every = timed(
        ServiceBuilder::new()
            .layer(layer().window(Duration::ZERO))
            .service(burst()),
    )
    .await;
    assert_eq!(every, [ok(0, "x"), ok(0, "y"), ok(0, "z")]);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_drops_the_tool_and_its_held_text() {
    let tool = Scripted::new(vec![vec![
        Step::Text(0, "a"),
        Step::Text(10, "b"),
        Step::Hang,
    ]]);
    let probe = tool.clone();
    let layered = ServiceBuilder::new().layer(layer()).service(tool);
    let mut stream = Box::pin(layered.oneshot(ToolRequest::new("t", "{}")).await.unwrap());
    assert_eq!(stream.next().await.unwrap().unwrap().as_text(), Some("a"));
    // "b" is held until 100 ms; it goes out then though the tool hangs.
    assert_eq!(stream.next().await.unwrap().unwrap().as_text(), Some("b"));
    drop(stream);
    assert!(probe.was_dropped());
}

#[tokio::test(start_paused = true)]
async fn a_models_text_deltas_are_merged_and_the_rest_passes_in_order() {
    let deltas = stream::iter([
        Ok(ModelDelta::Text("Hel".into())),
        Ok(ModelDelta::Text("lo".into())),
        Ok(ModelDelta::Text(" wor".into())),
        Ok(ModelDelta::Text("ld".into())),
        Ok(ModelDelta::Finish(toolstack::model::FinishReason::Stop)),
    ]);
    let out: Vec<ModelDelta> = Coalesced::with(deltas, layer())
        .map(|d| d.unwrap())
        .collect()
        .await;
    assert_eq!(
        out,
        [
            ModelDelta::Text("Hel".into()),
            ModelDelta::Text("lo world".into()),
            ModelDelta::Finish(toolstack::model::FinishReason::Stop),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn under_the_agent_the_models_words_reach_the_ui_in_fewer_deltas_with_the_same_text() {
    let answer = "the quick brown fox jumps over the lazy dog";
    let model = ServiceBuilder::new()
        .layer(layer())
        .service(ScriptedModel::new([Turn::new().text(answer)]));
    let agent = Agent::new(model, Toolbox::new());
    let events: Vec<AgentEvent> = agent.run(vec![Message::user("hi")]).collect().await;
    let deltas: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(text) => Some(text),
            _ => None,
        })
        .collect();
    // The scripted model streams a word at a time, all at once: the first
    // word, then the rest in one delta.
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert_eq!(
        deltas.iter().map(|d| d.as_str()).collect::<String>(),
        answer
    );
    assert!(matches!(events.last(), Some(AgentEvent::Done(_))));
}
