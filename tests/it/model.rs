//! Chat messages in the OpenAI shape, and the scripted model streaming its
//! turns the way a real model does.

use futures_util::StreamExt;
use serde_json::json;
use toolstack::model::{
    Accumulator, ChatRequest, FinishReason, Message, ModelDelta, ScriptedModel, ToolCall, Turn,
};
use toolstack::{ErrorKind, ToolError};
use tower::{Service, ServiceExt};

#[test]
fn messages_serialize_in_the_openai_chat_shape() {
    let call = ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
    };
    let history = vec![
        Message::system("be brief"),
        Message::user("weather?"),
        Message::Assistant {
            content: None,
            tool_calls: vec![call],
            reasoning: Vec::new(),
        },
        Message::tool("call_1", "sunny"),
        Message::assistant("It is sunny."),
    ];
    let wire = serde_json::to_value(&history).unwrap();
    assert_eq!(
        wire,
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."}
        ])
    );
    let back: Vec<Message> = serde_json::from_value(wire).unwrap();
    assert_eq!(back, history);
}

async fn play(model: &mut ScriptedModel) -> Vec<ModelDelta> {
    let stream = model
        .ready()
        .await
        .unwrap()
        .call(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    stream.map(|d| d.unwrap()).collect().await
}

#[tokio::test]
async fn scripted_model_streams_text_by_word_and_calls_by_fragment() {
    let args = r#"{"city":"Zürich","days":3}"#;
    let mut model = ScriptedModel::new([
        Turn::new()
            .text("Let me check.")
            .tool_call("get_weather", args)
            .tool_call("clock", "{}"),
        Turn::new().text("Sunny all week."),
    ])
    .fragment_chars(4);

    let deltas = play(&mut model).await;
    let text: Vec<&str> = deltas
        .iter()
        .filter_map(|d| match d {
            ModelDelta::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, ["Let", " me", " check."]);
    let fragments = deltas
        .iter()
        .filter(|d| matches!(d, ModelDelta::ToolCall(_)))
        .count();
    assert_eq!(fragments, args.chars().count().div_ceil(4) + 1);
    let mut acc = Accumulator::new();
    for delta in &deltas {
        if let ModelDelta::ToolCall(fragment) = delta {
            acc.push(fragment).unwrap();
        }
    }
    let calls = acc.finish().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (
            calls[0].id.as_str(),
            calls[0].name.as_str(),
            calls[0].arguments.as_str()
        ),
        ("call_0_0", "get_weather", args)
    );
    assert_eq!(calls[1].id, "call_0_1");
    assert!(deltas.contains(&ModelDelta::Finish(FinishReason::ToolCalls)));
    assert!(matches!(deltas.last(), Some(ModelDelta::Usage(_))));

    let deltas = play(&mut model).await;
    assert!(deltas.contains(&ModelDelta::Finish(FinishReason::Stop)));
    assert_eq!(model.turns_played(), 2);
}

#[tokio::test]
async fn scripted_model_clones_share_the_script_and_fail_clearly_when_it_runs_out() {
    let mut model = ScriptedModel::new([Turn::new().text("only")]);
    let mut clone = model.clone();
    play(&mut clone).await;
    let err = model
        .ready()
        .await
        .unwrap()
        .call(ChatRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.message().contains("no turn left"), "{}", err.message());
}

#[tokio::test]
async fn a_scripted_turn_can_end_for_length_or_break_off_mid_stream() {
    let mut model = ScriptedModel::new([
        Turn::new()
            .text("Cut short")
            .finish_reason(FinishReason::Length),
        Turn::new()
            .text("Half")
            .fail(ToolError::new(ErrorKind::Unavailable, "reset")),
    ]);
    let deltas = play(&mut model).await;
    assert!(deltas.contains(&ModelDelta::Finish(FinishReason::Length)));

    let stream = model
        .ready()
        .await
        .unwrap()
        .call(ChatRequest::default())
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items.len(),
        2,
        "the text, then the fault; no finish, no usage"
    );
    assert_eq!(items[0], Ok(ModelDelta::Text("Half".into())));
    assert_eq!(
        items[1].as_ref().unwrap_err().kind(),
        ErrorKind::Unavailable
    );
}
