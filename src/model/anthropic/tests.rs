use serde_json::json;

use super::*;
use crate::model::{Accumulator, FinishReason, ReasoningDelta, ToolCall, ToolCallDelta, Usage};
use crate::{ToolInfo, ToolOutput, ToolResult};

/// The documented event sequence of an answer that thinks, writes, then
/// calls two tools, with escapes and multi-byte text split inside the
/// partial JSON.
fn recorded(line_end: &str) -> Vec<u8> {
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-1", "content": [], "stop_reason": null, "usage": {"input_tokens": 20, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Grüße: "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "漢字 🦀"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM=="}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Looking "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "up ☕"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "search", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"q\": \"caf"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "é \\\"x\\\"\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "note", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"t\":\"a\\nb\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 3}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 57}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let mut body = String::new();
    for (name, data) in events {
        body.push_str(&format!(
            "event: {name}{line_end}data: {data}{line_end}{line_end}"
        ));
    }
    body.into_bytes()
}

/// What a consumer folds an answer into.
#[derive(Debug, PartialEq)]
struct Folded {
    text: String,
    reasoning: Vec<Reasoning>,
    calls: Vec<ToolCall>,
    rest: Vec<ModelDelta>,
    errors: Vec<String>,
}

fn fold(pieces: Vec<Vec<u8>>) -> Folded {
    let mut folded = Folded {
        text: String::new(),
        reasoning: Vec::new(),
        calls: Vec::new(),
        rest: Vec::new(),
        errors: Vec::new(),
    };
    let mut acc = Accumulator::new();
    for delta in provider::parse_pieces(pieces, Events::default()) {
        match delta {
            Ok(ModelDelta::Text(t)) => folded.text.push_str(&t),
            Ok(ModelDelta::Reasoning(r)) => r.fold_into(&mut folded.reasoning),
            Ok(ModelDelta::ToolCall(f)) => {
                acc.push(&f).expect("a bounded index");
            }
            Ok(other) => folded.rest.push(other),
            Err(err) => folded
                .errors
                .push(format!("{}: {}", err.kind(), err.message())),
        }
    }
    folded.calls = acc.finish().expect("named calls");
    folded
}

#[test]
fn a_recorded_answer_reads_as_reasoning_text_calls_finish_and_usage() {
    let folded = fold(vec![recorded("\n")]);
    assert_eq!(folded.errors, Vec::<String>::new());
    assert_eq!(folded.text, "Looking up ☕");
    assert_eq!(
        folded.reasoning,
        [Reasoning::Thinking {
            text: "Grüße: 漢字 🦀".into(),
            signature: Some("EqQBCgIYAhIM==".into()),
        }]
    );
    assert_eq!(folded.calls.len(), 2);
    assert_eq!(
        (folded.calls[0].id.as_str(), folded.calls[0].name.as_str()),
        ("toolu_a", "search")
    );
    assert_eq!(folded.calls[0].arguments, "{\"q\": \"café \\\"x\\\"\"}");
    assert_eq!(folded.calls[1].arguments, "{\"t\":\"a\\nb\"}");
    assert_eq!(
        folded.rest,
        [
            ModelDelta::Model("claude-test-1".into()),
            ModelDelta::Finish(FinishReason::ToolCalls),
            ModelDelta::Usage(Usage::new(1120, 57).cached(1000).cache_creation(100)),
        ]
    );
}

#[test]
fn a_recorded_answer_split_at_every_byte_reads_the_same() {
    for line_end in ["\n", "\r\n"] {
        let body = recorded(line_end);
        let whole = fold(vec![body.clone()]);
        for cut in 0..=body.len() {
            let pieces = vec![body[..cut].to_vec(), body[cut..].to_vec()];
            assert_eq!(fold(pieces), whole, "cut at {cut}");
        }
        let bytes = body.iter().map(|b| vec![*b]).collect();
        assert_eq!(fold(bytes), whole, "one byte a piece");
    }
}

#[test]
fn more_tool_calls_than_an_answer_may_hold_are_refused() {
    let mut body = String::new();
    for index in 0..=crate::model::MAX_TOOL_CALLS_PER_ANSWER {
        let start = json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": format!("t{index}"), "name": "x", "input": {}}});
        body.push_str(&format!("event: content_block_start\ndata: {start}\n\n"));
    }
    let items = provider::parse_pieces(vec![body.into_bytes()], Events::default());
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(items.len(), crate::model::MAX_TOOL_CALLS_PER_ANSWER + 1);
    assert!(
        err.message().contains("at most 128 tool calls"),
        "{}",
        err.message()
    );
}

#[test]
fn a_delta_of_a_block_that_is_not_open_is_refused() {
    let body = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n";
    let items = provider::parse_pieces(vec![body.into()], Events::default());
    let err = items[0].as_ref().unwrap_err();
    assert!(
        err.message().contains("block 5, which is not open"),
        "{}",
        err.message()
    );
}

#[test]
fn the_request_carries_system_blocks_tool_results_thinking_and_cache_points() {
    let model = AnthropicModel::new("claude-test")
        .max_tokens(2000)
        .thinking(1024)
        .cache(&[
            CachePoint::Tools,
            CachePoint::System,
            CachePoint::Conversation,
        ]);
    let mut thought = Vec::new();
    ReasoningDelta::Text("hmm".into()).fold_into(&mut thought);
    ReasoningDelta::Signature("sig".into()).fold_into(&mut thought);
    ReasoningDelta::Redacted("opaque".into()).fold_into(&mut thought);
    // An unsigned block (another provider's) is not sent.
    ReasoningDelta::Text("unsigned".into()).fold_into(&mut thought);
    let mut failed = ToolResult::default();
    failed.push_error(crate::ToolError::failed("no such city"));
    let mut pictured = ToolResult::default();
    pictured.push(ToolOutput::text("a chart"));
    pictured.push(ToolOutput::image("iVBORw0KGgo=", "image/png"));
    let history = vec![
        Message::system("Be brief."),
        Message::user("weather and chart?"),
        Message::Assistant {
            content: Some("Checking.".into()),
            tool_calls: vec![
                ToolCall {
                    id: "t1".into(),
                    name: "weather".into(),
                    arguments: "{\"city\":\"Atlantis\"}".into(),
                },
                ToolCall {
                    id: "t2".into(),
                    name: "chart".into(),
                    arguments: "not json".into(),
                },
            ],
            reasoning: thought,
        },
        Message::tool_result("t1", &failed),
        Message::tool_result("t2", &pictured),
    ];
    let request = ChatRequest::new(history).with_tools(vec![
        ToolInfo::new("weather").with_description("The weather."),
        ToolInfo::new("chart"),
    ]);
    let body = model.body(&request);
    assert_eq!(body["model"], "claude-test");
    assert_eq!(
        (body["max_tokens"].as_u64(), body["stream"].as_bool()),
        (Some(2000), Some(true))
    );
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(body["tools"][0]["description"], "The weather.");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(
        body["tools"][1]["cache_control"],
        json!({"type": "ephemeral"})
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert_eq!(
        messages[0],
        json!({"role": "user", "content": [{"type": "text", "text": "weather and chart?"}]})
    );
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Atlantis"}},
            {"type": "tool_use", "id": "t2", "name": "chart", "input": {}},
        ]})
    );
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(results[0]["tool_use_id"], "t1");
    assert_eq!(results[0]["is_error"], true);
    assert!(results[0]["content"]
        .as_str()
        .unwrap()
        .contains("no such city"));
    assert_eq!(
        results[1],
        json!({"type": "tool_result", "tool_use_id": "t2", "content": [
            {"type": "text", "text": "a chart\nimage/png"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        ], "cache_control": {"type": "ephemeral"}})
    );
}

#[test]
fn a_tool_call_delta_is_the_one_vocabulary_of_both_clients() {
    // The first fragment of a `tool_use` block carries the id and name and
    // no argument text, as an OpenAI stream's first fragment does.
    let body = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{}}}\n\n";
    let items = provider::parse_pieces(vec![body.into()], Events::default());
    assert_eq!(
        items[0].as_ref().unwrap(),
        &ModelDelta::ToolCall(ToolCallDelta::new(0).id("toolu_1").name("get_weather"))
    );
}

#[test]
fn the_tool_choice_and_the_typed_answer_are_encoded_as_anthropic_reads_them() {
    use crate::model::{OutputSchema, ToolChoice};
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Forecast {
        city: String,
        days: Option<u32>,
    }
    let model = AnthropicModel::new("claude-test");
    let tools = vec![ToolInfo::new("weather"), ToolInfo::new("chart")];
    let base = ChatRequest::new(vec![Message::user("hi")]).with_tools(tools);
    let choice = |choice: ToolChoice| {
        model.body(&base.clone().with_tool_choice(choice))["tool_choice"].clone()
    };
    assert_eq!(choice(ToolChoice::Auto), Value::Null);
    assert_eq!(choice(ToolChoice::None), json!({"type": "none"}));
    assert_eq!(choice(ToolChoice::Required), json!({"type": "any"}));
    assert_eq!(
        choice(ToolChoice::tool("chart")),
        json!({"type": "tool", "name": "chart"})
    );
    let typed = base.with_output(OutputSchema::of::<Forecast>("Forecast"));
    let format = &model.body(&typed)["output_config"]["format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["schema"]["additionalProperties"], false);
    assert_eq!(format["schema"]["properties"]["city"]["type"], "string");
}

#[test]
fn the_smaller_of_the_requests_and_the_clients_max_tokens_is_sent() {
    let model = AnthropicModel::new("claude-test").max_tokens(1000);
    let sent = |model: &AnthropicModel, asked: Option<u32>| {
        let mut request = ChatRequest::new(vec![Message::user("hi")]);
        request.max_tokens = asked;
        let body = model.body(&request);
        (body["max_tokens"].as_u64(), body.get("thinking").cloned())
    };
    assert_eq!(sent(&model, Some(300)).0, Some(300), "the request's, lower");
    assert_eq!(
        sent(&model, Some(5000)).0,
        Some(1000),
        "the client's, lower"
    );
    assert_eq!(sent(&model, None).0, Some(1000), "the client's, alone");
    assert_eq!(
        sent(&AnthropicModel::new("claude-test"), None).0,
        Some(4096),
        "the client's default"
    );
    // A thinking budget the request's lower limit leaves room for is kept;
    // one it does not is lowered below it, or left out under the least.
    let thinking = AnthropicModel::new("claude-test")
        .max_tokens(16_000)
        .thinking(8_000);
    let budget = |asked| sent(&thinking, asked).1.map(|t| t["budget_tokens"].clone());
    assert_eq!(budget(None), Some(json!(8_000)));
    assert_eq!(budget(Some(9_000)), Some(json!(8_000)));
    assert_eq!(budget(Some(5_000)), Some(json!(4_999)));
    assert_eq!(budget(Some(1_025)), Some(json!(1_024)));
    assert_eq!(budget(Some(1_024)), None, "below the API's least budget");
}
