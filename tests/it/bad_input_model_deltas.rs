//! The bad-input catalogue, model side: what a model (or its endpoint) may
//! stream wrong, each row fed to a real agent run as deltas, with what the
//! run must do — the stop reason, and the words that reach the model or the
//! consumer. The wire-level faults (chunks, statuses, disconnects) are in
//! `tests/openai.rs`.

use std::sync::Arc;

use futures_util::{stream, StreamExt};
use toolstack::agent::{Agent, AgentDone, AgentEvent, StopReason};
use toolstack::model::{ChatRequest, FinishReason, Message, ModelDelta, ToolCallDelta};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};
use tower::service_fn;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn toolbox() -> Toolbox {
    Toolbox::new().tool(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }))
}

type Deltas = stream::Iter<std::vec::IntoIter<Result<ModelDelta, ToolError>>>;

/// A model whose first answer is `first` and whose every later answer is
/// "done.".
fn model(
    first: Vec<Result<ModelDelta, ToolError>>,
) -> impl tower::Service<
    ChatRequest,
    Response = Deltas,
    Error = ToolError,
    Future = std::future::Ready<Result<Deltas, ToolError>>,
> + Clone
       + Send
       + 'static {
    let first = Arc::new(first);
    service_fn(move |request: ChatRequest| {
        let answered = request
            .messages
            .iter()
            .any(|m| matches!(m, Message::Assistant { .. }));
        let deltas = if answered {
            vec![Ok(ModelDelta::Text("done.".into()))]
        } else {
            (*first).clone()
        };
        std::future::ready(Ok(stream::iter(deltas)))
    })
}

fn call(index: u32, name: &str, arguments: &str) -> Result<ModelDelta, ToolError> {
    Ok(ModelDelta::ToolCall(
        ToolCallDelta::new(index)
            .id(format!("call_{index}"))
            .name(name)
            .arguments(arguments),
    ))
}

struct Row {
    behaviour: &'static str,
    deltas: Vec<Result<ModelDelta, ToolError>>,
    stop: StopReason,
    /// Words the tool result fed back to the model, or the run's error,
    /// must hold.
    words: &'static [&'static str],
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            behaviour: "an index past the calls one answer may hold ends the turn, named",
            deltas: vec![call(128, "add", "{}")],
            stop: StopReason::ModelError,
            words: &["index 128", "at most 128 tool calls"],
        },
        Row {
            behaviour: "an index of u32::MAX allocates nothing and ends the turn",
            deltas: vec![call(u32::MAX, "add", "{}")],
            stop: StopReason::ModelError,
            words: &["index 4294967295"],
        },
        Row {
            behaviour: "a call with an empty name goes back as an unknown tool",
            deltas: vec![call(0, "", r#"{"a":1,"b":2}"#)],
            stop: StopReason::Finished,
            words: &["not_found", "names no tool", "add"],
        },
        Row {
            behaviour: "a misspelt name goes back with the closest name",
            deltas: vec![call(0, "ad", r#"{"a":1,"b":2}"#)],
            stop: StopReason::Finished,
            words: &["unknown tool `ad`", "did you mean `add`"],
        },
        Row {
            behaviour: "arguments that are not JSON go back as invalid arguments",
            deltas: vec![call(0, "add", r#"{"a":1,"b":"#)],
            stop: StopReason::Finished,
            words: &["invalid_arguments", "not valid JSON"],
        },
        Row {
            behaviour: "arguments that are an array go back as not an object",
            deltas: vec![call(0, "add", "[1,2]")],
            stop: StopReason::Finished,
            words: &["must be a JSON object, got an array"],
        },
        Row {
            behaviour: "a field of the wrong type goes back naming the field",
            deltas: vec![call(0, "add", r#"{"a":"one","b":2}"#)],
            stop: StopReason::Finished,
            words: &["invalid_arguments", "`a`"],
        },
        Row {
            behaviour: "an answer cut off at the token limit says so",
            deltas: vec![
                Ok(ModelDelta::Text("The answer is".into())),
                Ok(ModelDelta::Finish(FinishReason::Length)),
            ],
            stop: StopReason::Length,
            words: &[],
        },
        Row {
            behaviour: "an answer stopped by a content filter says so",
            deltas: vec![Ok(ModelDelta::Finish(FinishReason::ContentFilter))],
            stop: StopReason::ContentFilter,
            words: &[],
        },
        Row {
            behaviour: "an error mid-answer ends the run with the model's error",
            deltas: vec![
                Ok(ModelDelta::Text("partial".into())),
                Err(ToolError::new(ErrorKind::Unavailable, "the stream broke")),
            ],
            stop: StopReason::ModelError,
            words: &["the stream broke"],
        },
    ]
}

async fn run(deltas: Vec<Result<ModelDelta, ToolError>>) -> (Vec<AgentEvent>, AgentDone) {
    let agent = Agent::new(model(deltas), toolbox()).max_steps(3);
    let mut events: Vec<AgentEvent> = agent.run(vec![Message::user("go")]).collect().await;
    let Some(AgentEvent::Done(done)) = events.pop() else {
        panic!("the run did not end with Done");
    };
    (events, done)
}

#[tokio::test]
async fn every_bad_model_answer_ends_the_way_its_row_says() {
    let mut failures = Vec::new();
    for row in rows() {
        let (events, done) = run(row.deltas).await;
        let mut said: Vec<String> = done
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        said.extend(events.iter().filter_map(|e| match e {
            AgentEvent::Error(err) => Some(err.message().to_owned()),
            _ => None,
        }));
        let text = said.join("\n");
        if done.stop != row.stop {
            failures.push(format!(
                "{}: stopped {:?}, not {:?} ({text})",
                row.behaviour, done.stop, row.stop
            ));
        } else if let Some(missing) = row.words.iter().find(|w| !text.contains(*w)) {
            failures.push(format!(
                "{}: `{missing}` missing from {text:?}",
                row.behaviour
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_model_rows_are_distinct() {
    let rows = rows();
    assert!(rows.len() >= 10);
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        assert!(seen.insert(row.behaviour), "{}", row.behaviour);
    }
}
