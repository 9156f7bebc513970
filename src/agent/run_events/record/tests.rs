use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::approval::Decision;
use crate::guardrail::{Action, Target};
use crate::model::Reasoning;
use crate::TimeoutPhase;

/// Through JSON text and back, as a log stores it.
fn round_trip(event: &AgentEvent) -> AgentEvent {
    let json = serde_json::to_string(&EventRecord::from(event)).expect("a record serializes");
    let record: EventRecord = serde_json::from_str(&json)
        .unwrap_or_else(|err| panic!("{json} does not read back: {err}"));
    record.into_event()
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "add".into(),
        arguments: r#"{"a": 2,  "b":3}"#.into(),
    }
}

/// JSON text as a tool wrote it: spacing, key order, a float.
fn written_json() -> Json {
    Json::from_json_text(r#"{ "z": 1,  "a": [0.1, 1e300, -0], "m": {"y": null} }"#.to_owned())
}

fn result() -> ToolResult {
    let mut result = ToolResult::default();
    result.push(ToolOutput::text("first"));
    result.push(ToolOutput::Json {
        value: written_json(),
    });
    result.push(ToolOutput::Structured {
        value: Json::from_json_text("[3,2,1]".to_owned()),
    });
    result.push(ToolOutput::image("aGk=", "image/png"));
    result.push(ToolOutput::audio("aGk=", "audio/wav"));
    result.push(ToolOutput::resource(
        Resource::text("file:///a", "A").mime_type("text/plain"),
    ));
    result.push(ToolOutput::resource(Resource::blob("file:///b", "Qg==")));
    result
}

/// One event of each variant, the fields set to what a default would
/// hide (empty, zero, `None` beside `Some`).
fn every_event() -> Vec<AgentEvent> {
    let done = AgentDone {
        messages: vec![
            Message::system("Be brief."),
            Message::user("2+3?"),
            Message::Assistant {
                content: Some("Adding.".into()),
                tool_calls: vec![call("c1")],
                reasoning: vec![
                    Reasoning::Thinking {
                        text: "2 and 3".into(),
                        signature: Some("sig".into()),
                    },
                    Reasoning::Redacted {
                        data: "opaque".into(),
                    },
                ],
            },
            Message::tool_result("c1", &result()),
            Message::tool_error("c2", "no"),
            Message::assistant("It is 5."),
        ],
        usage: Some(Usage::new(1_200, 300).cached(1_000).reasoning(120)),
        steps: 2,
        stop: StopReason::SpendLimit,
        tool_costs: vec![
            ToolCost {
                call_id: "c1".into(),
                name: "add".into(),
                result_bytes: 7,
                tokens: 3,
                cost: Some(Cost::from_nanos(1_234_567)),
                measured: true,
            },
            ToolCost {
                call_id: "c2".into(),
                name: "fetch".into(),
                result_bytes: 0,
                tokens: 0,
                cost: None,
                measured: false,
            },
        ],
        output: Some(serde_json::Value::Null),
    };
    let mut failed = ToolResult::from_error(ToolError::denied("not you"));
    failed.push(ToolOutput::text("after"));
    vec![
        AgentEvent::TextDelta("Hel".into()),
        AgentEvent::ReasoningDelta(String::new()),
        AgentEvent::ToolCallStarted {
            index: 3,
            id: None,
            name: "ad".into(),
        },
        AgentEvent::ToolCallStarted {
            index: 0,
            id: Some("c1".into()),
            name: String::new(),
        },
        AgentEvent::ToolCallInputDelta {
            index: u32::MAX,
            arguments: r#"{"a": "#.into(),
        },
        AgentEvent::ToolCall(call("c1")),
        AgentEvent::ToolOutput {
            call_id: "c1".into(),
            output: ToolOutput::Json {
                value: written_json(),
            },
        },
        AgentEvent::ToolOutput {
            call_id: "c1".into(),
            output: ToolOutput::progress(Progress::new(1.0 / 3.0).total(0.1 + 0.2)),
        },
        AgentEvent::Progress {
            call_id: "c1".into(),
            progress: Progress::new(2.5).message("halfway"),
        },
        AgentEvent::ApprovalRequested {
            call_id: "c2".into(),
            name: "delete".into(),
            arguments: "{}".into(),
            automatic: true,
            reason: None,
        },
        AgentEvent::ApprovalRequested {
            call_id: "c3".into(),
            name: "delete".into(),
            arguments: "{}".into(),
            automatic: false,
            reason: Some("it deletes".into()),
        },
        AgentEvent::AwaitingApproval {
            call_ids: vec!["c3".into(), "c2".into()],
        },
        AgentEvent::ApprovalDecided {
            call_id: "c2".into(),
            name: "delete".into(),
            decision: Decision::Allow,
            by: DecidedBy::Policy,
        },
        AgentEvent::ApprovalDecided {
            call_id: "c3".into(),
            name: "delete".into(),
            decision: Decision::deny("no"),
            by: DecidedBy::approver("policy"),
        },
        AgentEvent::ApprovalDecided {
            call_id: "c4".into(),
            name: "delete".into(),
            decision: Decision::modify(r#"{"dry":true}"#),
            by: DecidedBy::caller("the user"),
        },
        AgentEvent::ToolResult {
            call_id: "c1".into(),
            name: "add".into(),
            result: result(),
        },
        AgentEvent::ToolResult {
            call_id: "c2".into(),
            name: "delete".into(),
            result: failed,
        },
        AgentEvent::ToolResult {
            call_id: "c5".into(),
            name: "nothing".into(),
            result: ToolResult::default(),
        },
        AgentEvent::TurnDiscarded {
            error: ToolError::timeout(TimeoutPhase::Idle, "stalled"),
        },
        AgentEvent::Compacted {
            messages_before: 40,
            messages_after: 4,
            tokens_before: u64::MAX,
            tokens_after: 0,
        },
        AgentEvent::ToolsLoaded {
            call_id: "c6".into(),
            names: vec!["b".into(), "a".into()],
        },
        AgentEvent::GuardrailTriggered(GuardrailTriggered::new(
            "pii",
            Target::LlmOutput,
            "",
            None,
            Action::Redacted,
            "an email address",
        )),
        AgentEvent::GuardrailTriggered(GuardrailTriggered::new(
            "pii",
            Target::ToolCall,
            "send",
            Some("c7".into()),
            Action::Raised,
            "a card number",
        )),
        AgentEvent::Output(json!({"z": 1, "a": [1.5, null, "x"]})),
        AgentEvent::Output(serde_json::Value::Null),
        AgentEvent::Error(ToolError::rate_limited(Some(Duration::from_nanos(
            1_500_000_001,
        )))),
        AgentEvent::Done(done.clone()),
        AgentEvent::Done(AgentDone {
            messages: Vec::new(),
            usage: None,
            output: None,
            tool_costs: Vec::new(),
            stop: StopReason::Finished,
            steps: 0,
        }),
    ]
}

#[test]
fn every_event_reads_back_as_it_was_written() {
    for event in every_event() {
        assert_eq!(
            format!("{:?}", round_trip(&event)),
            format!("{event:?}"),
            "{event:?} did not read back the same"
        );
    }
}

#[test]
fn the_events_tested_are_one_of_each_kind() {
    let kinds: BTreeSet<&str> = every_event()
        .iter()
        .map(|event| EventRecord::from(event).kind())
        .collect();
    let every: BTreeSet<&str> = [
        "text_delta",
        "reasoning_delta",
        "tool_call_started",
        "tool_call_input_delta",
        "tool_call",
        "tool_output",
        "progress",
        "approval_requested",
        "awaiting_approval",
        "approval_decided",
        "tool_result",
        "turn_discarded",
        "compacted",
        "tools_loaded",
        "guardrail_triggered",
        "output",
        "error",
        "done",
    ]
    .into();
    assert_eq!(kinds, every);
    // `kind` names the JSON's tag.
    for event in every_event() {
        let record = EventRecord::from(&event);
        let json = serde_json::to_value(&record).unwrap();
        let tag = json
            .as_object()
            .and_then(|tags| tags.keys().next().cloned());
        assert_eq!(tag.as_deref(), Some(record.kind()));
    }
}

#[test]
fn a_json_item_keeps_its_exact_text() {
    let event = AgentEvent::ToolOutput {
        call_id: "c1".into(),
        output: ToolOutput::Json {
            value: written_json(),
        },
    };
    let AgentEvent::ToolOutput {
        output: ToolOutput::Json { value },
        ..
    } = round_trip(&event)
    else {
        panic!("not a JSON item");
    };
    assert_eq!(value.as_str(), written_json().as_str());
}

#[test]
fn a_tool_error_keeps_what_its_accessors_tell() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
    let errors = [
        ToolError::failed("plain"),
        ToolError::timeout(TimeoutPhase::FirstItem, "slow start").with_retryable(false),
        ToolError::rate_limited(Some(Duration::from_nanos(1_000_000_001)))
            .with_retry_after(Duration::from_millis(7)),
        ToolError::rate_limited(None),
        ToolError::unavailable("down").with_retry_after(Duration::from_secs(2)),
        ToolError::failed("transient").with_retryable(true),
        ToolError::new(ErrorKind::SpendLimited, "spent").with_source(io),
        ToolError::new(ErrorKind::Interrupted, "stopped"),
    ];
    for error in errors {
        let AgentEvent::Error(back) = round_trip(&AgentEvent::Error(error.clone())) else {
            panic!("not an error");
        };
        assert_eq!(back.kind(), error.kind(), "{error:?}");
        assert_eq!(back.message(), error.message(), "{error:?}");
        assert_eq!(back.is_retryable(), error.is_retryable(), "{error:?}");
        assert_eq!(back.retry_after(), error.retry_after(), "{error:?}");
        let text = |e: &ToolError| std::error::Error::source(e).map(ToString::to_string);
        assert_eq!(text(&back), text(&error), "{error:?}");
    }
}

#[test]
fn a_kind_a_newer_writer_knows_reads_as_failed() {
    let json = r#"{"error":{"error":{"kind":"exploded","message":"boom"}}}"#;
    let record: EventRecord = serde_json::from_str(json).unwrap();
    let AgentEvent::Error(error) = record.into_event() else {
        panic!("not an error");
    };
    assert_eq!((error.kind(), error.message()), (ErrorKind::Failed, "boom"));
}

#[test]
fn a_record_of_a_kind_this_build_does_not_know_does_not_read() {
    let unknown = serde_json::from_str::<EventRecord>(r#"{"telepathy":{"thought":"hm"}}"#);
    assert!(unknown.is_err());
}
