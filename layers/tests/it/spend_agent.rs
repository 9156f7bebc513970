//! The agent under a spend limit: a refused model call ends the run with
//! `StopReason::SpendLimit`; each tool result's cost, measured from the
//! next prompt's growth, is in `AgentDone` and on the run's span, and the
//! tool's own span has its estimate.

use crate::support;

use futures_util::StreamExt;
use support::capture::Capture;
use toolstack::agent::{Agent, AgentDone, AgentEvent, StopReason};
use toolstack::model::{Cost, Message, ModelDelta, Price, Prices, ScriptedModel, Turn, Usage};
use toolstack::{tool, ErrorKind, ToolError, Toolbox};
use toolstack_layers::spend::{Limit, SpendLimitLayer};
use toolstack_layers::trace::TraceLayer;
use tower::ServiceExt;
use tower_layer::Layer;

/// $1 per million prompt tokens (a microdollar each), $2 per million out.
fn prices() -> Prices {
    Prices::builder()
        .model("m", Price::per_million_tokens(1.0, 2.0))
        .build()
        .unwrap()
}

fn toolbox() -> Toolbox {
    Toolbox::new()
        .tool(tool::from_fn("short", |_: serde_json::Value| async {
            Ok::<_, ToolError>("0123456789")
        }))
        .tool(tool::from_fn("long", |_: serde_json::Value| async {
            Ok::<_, ToolError>("x".repeat(290))
        }))
}

async fn run<M: toolstack::model::ModelService>(agent: &Agent<M>) -> (Vec<AgentEvent>, AgentDone) {
    let mut events: Vec<AgentEvent> = agent.run(vec![Message::user("go")]).collect().await;
    match events.pop() {
        Some(AgentEvent::Done(done)) => (events, done),
        other => panic!("no Done: {other:?}"),
    }
}

#[tokio::test]
async fn a_run_over_its_spend_limit_stops_with_spend_limit_after_an_error_event() {
    let model = ScriptedModel::new([
        Turn::new()
            .tool_call("short", "{}")
            .usage(Usage::new(600, 100)),
        Turn::new().text("never asked").usage(Usage::new(10, 10)),
        Turn::new().text("a second run").usage(Usage::new(10, 10)),
    ]);
    // 700 tokens in the first turn: the run's limit of 500 is reached.
    let limited = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(500))
        .layer(model.clone());
    let agent = Agent::new(limited, toolbox()).model_name("m");
    let (events, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    assert_eq!(done.stop.as_str(), "spend_limit");
    let Some(AgentEvent::Error(err)) = events.last() else {
        panic!("an error event before Done: {events:?}");
    };
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(
        err.message(),
        "this run has used 700 of its 500 tokens ($0.0008 spent); the model was not called"
    );
    assert_eq!(
        model.turns_played(),
        1,
        "the second turn never reached the model"
    );
    // The tool ran, and the history is whole.
    assert!(matches!(done.messages.last(), Some(Message::Tool { .. })));

    // The next run is another run: its own counter.
    let (_, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::Finished);
}

fn tool_texts(done: &AgentDone) -> Vec<usize> {
    done.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.len()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn each_tool_results_cost_is_its_share_of_the_next_prompts_growth() {
    let capture = Capture::default();
    let _guard = capture.install();
    let model = ScriptedModel::new([
        // The answer's 60 tokens, 20 of them reasoning: 40 go into the
        // history.
        Turn::new()
            .tool_call("short", "{}")
            .tool_call("long", "{}")
            .usage(Usage::new(1_000, 60).reasoning(20)),
        // The prompt grew by 340: 40 for the answer, 300 for the results.
        Turn::new().text("done").usage(Usage::new(1_340, 5)),
    ]);
    let tools = toolbox().layer(TraceLayer::new());
    let agent = Agent::new(model, tools).model_name("m").prices(prices());
    let (_, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::Finished);

    let bytes = tool_texts(&done);
    let short = 300 * bytes[0] as u64 / (bytes[0] + bytes[1]) as u64;
    let costs: Vec<_> = done
        .tool_costs
        .iter()
        .map(|c| {
            (
                c.call_id.as_str(),
                c.name.as_str(),
                c.result_bytes,
                c.tokens,
                c.cost,
                c.measured,
            )
        })
        .collect();
    assert_eq!(
        costs,
        [
            (
                "call_0_0",
                "short",
                bytes[0],
                short,
                Some(Cost::from_micros(short)),
                true
            ),
            (
                "call_0_1",
                "long",
                bytes[1],
                300 - short,
                Some(Cost::from_micros(300 - short)),
                true
            ),
        ]
    );
    assert!(short > 0 && short < 300 - short, "{costs:?}");

    // On the run's span, one event per result, with the measured share.
    let events = capture.events_with_parent("tool result cost");
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, Some("invoke_agent"));
    assert_eq!(events[0].1["gen_ai.tool.call.id"], "call_0_0");
    assert_eq!(
        events[0].1["toolstack.tool.result_tokens"],
        short.to_string()
    );
    assert_eq!(events[1].1["toolstack.tool.cost_measured"], "true");
    // On each tool's own span, the estimate made when it ended.
    let estimates: Vec<String> = capture
        .spans()
        .iter()
        .filter(|s| s.name == "execute_tool")
        .map(|s| s.fields["toolstack.tool.result_tokens"].clone())
        .collect();
    assert_eq!(estimates, ["3", "73"], "10 and 290 bytes at four a token");
}

#[tokio::test]
async fn without_usage_reports_a_results_tokens_are_estimated_and_an_unread_result_has_no_cost() {
    let model = ScriptedModel::new([
        Turn::new().tool_call("long", "{}"),
        Turn::new().text("done"),
    ])
    .map_response(|answer| {
        answer
            .filter(|delta| std::future::ready(!matches!(delta, Ok(ModelDelta::Usage(_)))))
            .boxed()
    });
    let agent = Agent::new(model, toolbox());
    let (_, done) = run(&agent).await;
    let [cost] = &done.tool_costs[..] else {
        panic!("{:?}", done.tool_costs);
    };
    let bytes = tool_texts(&done)[0];
    assert_eq!(
        (cost.tokens, cost.measured),
        (bytes.div_ceil(4) as u64, false)
    );
    assert_eq!(cost.cost, None, "no prices given");

    // The run stops before a model call reads the result: it cost nothing.
    let model = ScriptedModel::new([Turn::new().tool_call("short", "{}")]);
    let agent = Agent::new(model, toolbox()).max_steps(1);
    let (_, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::MaxSteps);
    assert!(done.tool_costs.is_empty());
}

#[tokio::test]
async fn an_answer_the_layer_cuts_mid_stream_is_kept_marked_as_cut_and_the_run_stops() {
    // 4,000 bytes (1,000 tokens' worth), a word at a time, under a run's
    // limit of 300 tokens: cut after about 1,200 bytes.
    let model = ScriptedModel::new([Turn::new()
        .text("word ".repeat(800))
        .usage(Usage::new(5, 1_000))]);
    let limited = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(300))
        .reserve_output_tokens(50)
        .layer(model);
    let agent = Agent::new(limited, toolbox()).model_name("m");
    let (events, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    let Some(AgentEvent::Error(err)) = events.last() else {
        panic!("an error event before Done: {events:?}");
    };
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert!(
        err.message().contains("the answer was cut after about"),
        "{err}"
    );
    // What was said before the cut is the run's last message, marked.
    let Some(Message::Assistant { content, .. }) = done.messages.last() else {
        panic!("the cut answer is kept: {:?}", done.messages);
    };
    let content = content.as_deref().unwrap_or_default();
    let (said, note) = content.split_once("\n\n").expect("the text, then the note");
    assert!(
        (1_000..1_300).contains(&said.len()),
        "{} bytes kept",
        said.len()
    );
    assert!(said.split_whitespace().all(|word| word == "word"));
    assert_eq!(
        note,
        format!(
            "[the rest of this answer was cut by a spend limit: {}]",
            err.message()
        )
    );
}

#[tokio::test]
async fn a_sub_agents_calls_count_against_the_run_it_serves() {
    // One layer, one run limit of 1,000 tokens, for both agents' models.
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(1_000));
    let inner_model = ScriptedModel::new([Turn::new().text("done").usage(Usage::new(500, 450))]);
    let inner = Agent::new(layer.layer(inner_model.clone()), Toolbox::new()).model_name("m");
    let outer_model = ScriptedModel::new([
        Turn::new()
            .tool_call("helper", r#"{"message": "help"}"#)
            .usage(Usage::new(90, 10)),
        Turn::new().text("never asked").usage(Usage::new(10, 10)),
    ]);
    let toolbox = Toolbox::new().tool(toolstack::agent::AgentTool::new("helper", "Helps.", inner));
    let outer = Agent::new(layer.layer(outer_model.clone()), toolbox).model_name("m");
    let (events, done) = run(&outer).await;

    // The sub-agent ran within its own limit (950 tokens); the outer run
    // counts its own 100 and the sub-agent's 950: its next call is refused.
    assert_eq!(inner_model.turns_played(), 1);
    assert_eq!(outer_model.turns_played(), 1, "the second turn was refused");
    assert_eq!(done.stop, StopReason::SpendLimit);
    let Some(AgentEvent::Error(err)) = events.last() else {
        panic!("an error event before Done: {events:?}");
    };
    assert_eq!(
        err.message(),
        "this run has used 1,050 of its 1,000 tokens ($0.00151 spent); the model was not called"
    );
}

#[tokio::test]
async fn a_sub_agent_is_refused_when_the_run_it_serves_has_no_room() {
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(1_000));
    let inner_model = ScriptedModel::new([Turn::new().text("done").usage(Usage::new(5, 5))]);
    let inner = Agent::new(layer.layer(inner_model.clone()), Toolbox::new()).model_name("m");
    let outer_model = ScriptedModel::new([
        Turn::new()
            .tool_call("helper", r#"{"message": "help"}"#)
            .usage(Usage::new(900, 100)),
        Turn::new().text("never asked"),
    ]);
    let toolbox = Toolbox::new().tool(toolstack::agent::AgentTool::new("helper", "Helps.", inner));
    let outer = Agent::new(layer.layer(outer_model), toolbox).model_name("m");
    let (events, _) = run(&outer).await;
    assert_eq!(
        inner_model.turns_played(),
        0,
        "the sub-agent's model was not called"
    );
    let refused = events
        .iter()
        .find_map(|event| match event {
            AgentEvent::ToolResult { result, .. } => Some(format!("{result:?}")),
            _ => None,
        })
        .expect("the helper's result");
    assert!(
        refused
            .contains("the run this one serves (as its tool) has used 1,000 of its 1,000 tokens"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_tool_results_tokens_count_against_the_limit_before_the_next_call_is_sent() {
    // The result (2,000 bytes: about 500 tokens) is in the next prompt,
    // which the run's 300 tokens cannot take: refused before it is sent.
    let model = ScriptedModel::new([
        Turn::new().tool_call("huge", "{}").usage(Usage::new(20, 5)),
        Turn::new().text("never asked"),
    ]);
    let toolbox = Toolbox::new().tool(tool::from_fn("huge", |_: serde_json::Value| async {
        Ok::<_, ToolError>("x".repeat(2_000))
    }));
    let limited = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(300))
        .reserve_output_tokens(10)
        .layer(model.clone());
    let agent = Agent::new(limited, toolbox).model_name("m");
    let (events, done) = run(&agent).await;
    assert_eq!(done.stop, StopReason::SpendLimit);
    assert_eq!(model.turns_played(), 1);
    let Some(AgentEvent::Error(err)) = events.last() else {
        panic!("an error event before Done: {events:?}");
    };
    assert!(
        err.message().starts_with(
            "this run has used 25 of its 300 tokens, and calls in flight have reserved 0: \
             what is left cannot take this call's prompt (about 5"
        ),
        "{err}"
    );
}
