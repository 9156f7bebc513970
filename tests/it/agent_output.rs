//! Typed answers and tool choice: a run that ends with a value of the
//! caller's type (the provider's structured output, or a final-answer
//! tool), an answer that does not decode sent back with the field named,
//! then a typed stop; the tools and the choice of each step, a choice the
//! caller may not use refused before the call, a call outside the step's
//! tools answered with an error the model reads.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::agent::compaction::check;
use toolstack::agent::{
    Agent, AgentEvent, AgentStream, OutputMode, StepSettings, StopReason, FINAL_ANSWER_TOOL,
};
use toolstack::model::{ChatRequest, Message, ModelService, ScriptedModel, ToolChoice, Turn};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    days: u32,
}

/// The model, keeping every request it is sent.
fn recording(model: ScriptedModel, seen: Arc<Mutex<Vec<ChatRequest>>>) -> impl ModelService {
    tower::ServiceBuilder::new()
        .map_request(move |request: ChatRequest| {
            seen.lock().unwrap().push(request.clone());
            request
        })
        .service(model)
}

fn tools() -> Toolbox {
    let lookup = tool::from_fn("lookup", |_: serde_json::Value| async {
        Ok::<_, ToolError>("Paris, for three days")
    });
    let delete = tool::from_fn("delete", |_: serde_json::Value| async {
        Ok::<_, ToolError>("deleted")
    });
    Toolbox::new().tool(lookup).tool(delete)
}

async fn to_the_end(run: AgentStream) -> Vec<AgentEvent> {
    tokio::time::timeout(Duration::from_secs(30), run.collect::<Vec<_>>())
        .await
        .expect("the run did not end")
}

fn done(events: &[AgentEvent]) -> &toolstack::agent::AgentDone {
    match events.last() {
        Some(AgentEvent::Done(done)) => done,
        other => panic!("no Done: {other:?}"),
    }
}

fn error(events: &[AgentEvent]) -> Option<String> {
    events.iter().find_map(|e| match e {
        AgentEvent::Error(err) => Some(err.message().to_owned()),
        _ => None,
    })
}

#[tokio::test]
async fn a_run_ends_with_a_value_of_the_callers_type() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().tool_call("lookup", "{}"),
        Turn::new().text(r#"{"city": "Paris", "days": 3}"#),
    ]);
    let agent = Agent::new(recording(model, Arc::clone(&seen)), tools()).output::<Forecast>();
    let forecast: Forecast = agent
        .run(vec![Message::user("where and how long?")])
        .output()
        .await
        .unwrap();
    assert_eq!(
        forecast,
        Forecast {
            city: "Paris".into(),
            days: 3
        }
    );
    // Every request asked for the schema (the provider's structured output).
    let seen = seen.lock().unwrap();
    let output = seen[0].output.as_ref().expect("the schema");
    assert_eq!(&*output.name, "Forecast");
    assert_eq!(output.schema["properties"]["days"]["type"], "integer");
}

#[tokio::test]
async fn an_answer_that_does_not_decode_goes_back_with_the_field_named_then_the_run_stops() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().text(r#"{"city": "Paris", "days": "three"}"#),
        Turn::new().text(r#"{"city": "Paris", "days": 3}"#),
    ]);
    let agent = Agent::new(recording(model, Arc::clone(&seen)), tools()).output::<Forecast>();
    let events = to_the_end(agent.run(vec![Message::user("forecast?")])).await;
    let first = done(&events);
    assert_eq!(first.stop, StopReason::Finished);
    assert_eq!(
        first.output,
        Some(serde_json::json!({"city": "Paris", "days": 3}))
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::Output(value) if value["days"] == 3)));
    // The second request read why the first answer was refused.
    let second = seen.lock().unwrap()[1].messages.last().cloned().unwrap();
    let Message::User { content } = second else {
        panic!("{second:?}")
    };
    assert!(content.contains("invalid value at `days`"), "{content}");

    // Never decodes: the run stops after the retries, with a typed reason.
    let model = ScriptedModel::new([
        Turn::new().text("Paris, 3 days"),
        Turn::new().text(r#"{"city": "Paris"}"#),
    ]);
    let agent = Agent::new(model, tools())
        .output::<Forecast>()
        .output_retries(1);
    let events = to_the_end(agent.run(vec![Message::user("forecast?")])).await;
    assert_eq!(done(&events).stop, StopReason::OutputInvalid);
    assert_eq!(done(&events).stop.as_str(), "output_invalid");
    let why = error(&events).unwrap();
    assert!(
        why.contains("after 2 tries") && why.contains("missing field `days`"),
        "{why}"
    );
    let model = ScriptedModel::new([Turn::new().text("Paris")]);
    let err = Agent::new(model, tools())
        .output::<Forecast>()
        .output_retries(0)
        .run(vec![Message::user("forecast?")])
        .output::<Forecast>()
        .await
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("the run ended (output_invalid) without an answer"),
        "{err}"
    );
}

#[tokio::test]
async fn a_model_with_no_structured_output_gives_its_answer_by_calling_the_final_tool() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().tool_call("lookup", "{}"),
        Turn::new().text("It is Paris."),
        Turn::new()
            .tool_call(FINAL_ANSWER_TOOL, r#"{"city": "Paris"}"#)
            .tool_call("delete", "{}"),
        Turn::new().tool_call(FINAL_ANSWER_TOOL, r#"{"city": "Paris", "days": 3}"#),
    ]);
    let agent = Agent::new(recording(model, Arc::clone(&seen)), tools())
        .output::<Forecast>()
        .output_mode(OutputMode::Tool)
        .output_retries(3);
    let events = to_the_end(agent.run(vec![Message::user("forecast?")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished, "{:?}", error(&events));
    assert_eq!(done.output.as_ref().unwrap()["days"], 3);
    check(&done.messages).unwrap();
    // The final tool is offered with the others, and no schema asked of
    // the provider.
    let seen = seen.lock().unwrap();
    let names: Vec<&str> = seen[0].tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["lookup", "delete", FINAL_ANSWER_TOOL]);
    assert!(seen[0].output.is_none());
    // Text instead of the call, then a call missing a field (the other
    // call of that answer not run): each read by the model.
    let results: Vec<&str> = done
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.as_str()),
            Message::User { content } if content.contains(FINAL_ANSWER_TOOL) => {
                Some(content.as_str())
            }
            _ => None,
        })
        .collect();
    assert!(
        results[1].contains("by calling `final_answer`"),
        "{results:?}"
    );
    assert!(results[2].contains("missing field `days`"), "{results:?}");
    assert!(results[3].contains("not run: the final answer did not have the required form"));
}

#[tokio::test]
async fn each_step_has_its_tools_and_choice_and_a_call_outside_them_is_refused() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ScriptedModel::new([
        Turn::new().tool_call("delete", "{}"),
        Turn::new().tool_call("lookup", "{}"),
        Turn::new().text("Paris."),
    ]);
    let agent = Agent::new(recording(model, Arc::clone(&seen)), tools())
        .tool_choice(ToolChoice::Required)
        .prepare_step(|step| match step.step {
            0 | 1 => StepSettings::new().active_tools(["lookup"]),
            _ => StepSettings::new().tool_choice(ToolChoice::None),
        });
    let events = to_the_end(agent.run(vec![Message::user("where?")])).await;
    let done = done(&events);
    assert_eq!(done.stop, StopReason::Finished);
    let seen = seen.lock().unwrap();
    let offered =
        |at: usize| -> Vec<String> { seen[at].tools.iter().map(|t| t.name().to_owned()).collect() };
    assert_eq!(offered(0), ["lookup"]);
    assert_eq!(seen[0].tool_choice, ToolChoice::Required);
    assert_eq!(offered(2), ["lookup", "delete"]);
    assert_eq!(seen[2].tool_choice, ToolChoice::None);
    // The call to `delete`, outside the step's tools, never ran.
    let refused = events.iter().find_map(|e| match e {
        AgentEvent::ToolResult { name, result, .. } if name == "delete" => Some(result.clone()),
        _ => None,
    });
    let refused = refused.expect("a result for the refused call");
    assert!(refused.is_error);
    assert!(
        refused.text().contains(
            "the tool `delete` is not available at this step; the tools you may call now: lookup"
        ),
        "{}",
        refused.text()
    );
    check(&done.messages).unwrap();
}

#[tokio::test]
async fn a_choice_the_caller_cannot_use_is_refused_before_the_call() {
    let cases: [(Agent<ScriptedModel>, &str); 3] = [
        (
            Agent::new(ScriptedModel::new([]), tools()).tool_choice(ToolChoice::tool("nope")),
            "the tool choice names `nope`, which is not among the tools this step offers: lookup, delete",
        ),
        (
            Agent::new(ScriptedModel::new([]), tools())
                .prepare_step(|_| StepSettings::new().active_tools(["lookup", "secret"])),
            "the step's active tools name `secret`, which is not a tool the caller may use",
        ),
        (
            Agent::new(ScriptedModel::new([]), Toolbox::new()).tool_choice(ToolChoice::Required),
            "the tool choice requires a tool call, but this step offers no tool",
        ),
    ];
    for (agent, says) in cases {
        let model = agent.clone();
        let events = to_the_end(model.run(vec![Message::user("go")])).await;
        assert_eq!(done(&events).stop, StopReason::InvalidToolChoice);
        let why = error(&events).unwrap();
        assert!(why.contains(says), "{why}");
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, AgentEvent::TextDelta(_)))
                .count(),
            0
        );
    }
    let _ = ErrorKind::Denied;
}

#[tokio::test]
async fn a_typed_run_recorded_once_replays_offline() {
    use toolstack::model::record::{RecordLayer, ReplayModel};
    use tower::Layer;
    let file = std::env::temp_dir().join(format!(
        "toolstack-typed-{}-{:?}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    let live = ScriptedModel::new([Turn::new().text(r#"{"city": "Paris", "days": 3}"#)]);
    let recorded = RecordLayer::create(&file).unwrap().layer(live);
    let question = || vec![Message::user("forecast?")];
    let first: Forecast = Agent::new(recorded, tools())
        .output::<Forecast>()
        .run(question())
        .output()
        .await
        .unwrap();
    let replay = ReplayModel::open(&file).unwrap();
    let again: Forecast = Agent::new(replay.clone(), tools())
        .output::<Forecast>()
        .run(question())
        .output()
        .await
        .unwrap();
    assert_eq!(first, again);
    // The schema is part of what was recorded: a run asking for another
    // type does not match.
    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Other {
        name: String,
    }
    let err = Agent::new(ReplayModel::open(&file).unwrap(), tools())
        .output::<Other>()
        .run(question())
        .output::<Other>()
        .await
        .unwrap_err();
    assert!(err.message().contains("model_error"), "{err}");
    std::fs::remove_file(&file).ok();
}

#[tokio::test]
async fn an_agent_with_a_typed_answer_is_a_tool_answering_with_that_json() {
    use tower::ServiceExt;
    let model = ScriptedModel::new([
        Turn::new().tool_call(FINAL_ANSWER_TOOL, r#"{"city": "Paris", "days": 3}"#)
    ]);
    let agent = Agent::new(model, tools())
        .output::<Forecast>()
        .output_mode(OutputMode::Tool);
    let forecaster = toolstack::agent::AgentTool::new("forecaster", "Forecasts.", agent);
    let result = toolstack::ToolResult::collect(
        forecaster
            .oneshot(toolstack::ToolRequest::new("forecaster", "Paris?"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        result.structured_content(),
        Some(serde_json::json!({"city": "Paris", "days": 3}))
    );
}
