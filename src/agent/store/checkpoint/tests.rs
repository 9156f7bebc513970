//! The reducer's unit tests: how each record changes a run's state.

use super::*;

/// A run waiting for a decision on one call.
pub(super) fn checkpoint() -> Checkpoint {
    Checkpoint {
        run_id: "r1".into(),
        status: RunStatus::Waiting,
        messages: Arc::new(vec![Message::user("hi")]),
        step: vec![CallRecord {
            call: ToolCall {
                id: "c1".into(),
                name: "write".into(),
                arguments: "{}".into(),
            },
            state: CallState::WaitingApproval {
                request: ApprovalRequest::new("c1", "write", "{}"),
            },
        }],
        usage: Some(Usage::new(3, 4)),
        steps: 1,
        tool_calls: 1,
        holder: None,
        loaded_tools: Vec::new(),
        saved_at_ms: 5,
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "write".into(),
        arguments: "{}".into(),
    }
}

#[test]
fn records_fold_into_the_run_they_describe() {
    let mut run = Checkpoint::new("r1");
    for record in [
        Record::Messages {
            messages: vec![Message::user("hi")],
        },
        Record::Messages {
            messages: vec![Message::assistant("calling")],
        },
        Record::Counts {
            steps: 1,
            tool_calls: 2,
            usage: Some(Usage::new(3, 4)),
        },
        Record::Step {
            calls: vec![call("a"), call("b")],
        },
        Record::Call {
            id: "b".into(),
            state: CallState::Decided {
                decision: Decision::deny("no"),
                by: DecidedBy::caller("the user"),
            },
        },
        Record::Call {
            id: "a".into(),
            state: CallState::Finished {
                text: "done".into(),
                is_error: false,
                images: Vec::new(),
            },
        },
    ] {
        // Each record as stored, read back.
        let bytes = record.to_bytes();
        let read = Record::from_bytes("r1", 1, &bytes, MAX_RECORD_BYTES).unwrap();
        assert_eq!(read, record);
        run.apply(read);
    }
    assert_eq!(run.step.len(), 2);
    assert_eq!(run.step[0].state.as_str(), "finished");
    assert_eq!(run.step[1].state.as_str(), "decided");
    run.apply(Record::StepClosed);
    assert!(run.step.is_empty());
    assert_eq!(run.messages.len(), 4);
    assert_eq!(run.messages[2], Message::tool("a", "done"));
    assert!(matches!(
        &run.messages[3],
        Message::Tool { is_error: true, .. }
    ));
    assert_eq!((run.steps, run.tool_calls), (1, 2));
    run.apply(Record::Compacted {
        messages: vec![Message::user("summary")],
    });
    assert_eq!(*run.messages, [Message::user("summary")]);
}

#[test]
fn a_continued_answer_extends_the_paused_one() {
    let mut run = Checkpoint::new("r1");
    run.apply(Record::Messages {
        messages: vec![Message::user("search"), Message::assistant("Searching…")],
    });
    run.apply(Record::Continued {
        message: Message::Assistant {
            content: Some(" found.".into()),
            tool_calls: vec![call("a")],
            reasoning: Vec::new(),
        },
    });
    assert_eq!(run.messages.len(), 2);
    assert_eq!(
        run.messages[1],
        Message::Assistant {
            content: Some("Searching… found.".into()),
            tool_calls: vec![call("a")],
            reasoning: Vec::new(),
        }
    );
}

#[test]
fn a_planned_step_takes_its_calls_from_the_answer() {
    let answer = |calls: Vec<ToolCall>| Message::Assistant {
        content: Some("calling".into()),
        tool_calls: calls,
        reasoning: Vec::new(),
    };
    let mut run = Checkpoint::new("r1");
    run.apply(Record::Messages {
        messages: vec![Message::user("hi"), answer(vec![call("a"), call("b")])],
    });
    run.apply(Record::StepPlanned {
        ids: vec!["a".into(), "b".into()],
    });
    let planned: Vec<_> = run.step.iter().map(|r| (&r.call, &r.state)).collect();
    assert_eq!(
        planned,
        [
            (&call("a"), &CallState::Planned),
            (&call("b"), &CallState::Planned)
        ]
    );
    // An answer that goes on from a paused one: the step is its calls.
    let mut run = Checkpoint::new("r1");
    run.apply(Record::Messages {
        messages: vec![answer(Vec::new())],
    });
    run.apply(Record::Continued {
        message: answer(vec![call("c")]),
    });
    run.apply(Record::StepPlanned {
        ids: vec!["c".into()],
    });
    assert_eq!(run.step.len(), 1);
    assert_eq!(run.step[0].call, call("c"));
    // A call the answer does not hold keeps its id: the step still
    // answers it when it closes.
    let mut run = Checkpoint::new("r1");
    run.apply(Record::StepPlanned {
        ids: vec!["lost".into()],
    });
    assert_eq!(run.step[0].call.id, "lost");
    run.apply(Record::StepClosed);
    assert!(matches!(
        &run.messages[..],
        [Message::Tool { tool_call_id, is_error: true, .. }] if tool_call_id == "lost"
    ));
    // The record names the calls only: their arguments are the answer's.
    let bytes = Record::StepPlanned {
        ids: vec!["a".into()],
    }
    .to_bytes();
    assert_eq!(bytes, br#"{"record":"step_planned","ids":["a"]}"#);
}

#[test]
fn who_decided_reads_typed_and_as_a_name_stored_before() {
    let decided = |by| CallState::Decided {
        decision: Decision::Allow,
        by,
    };
    for by in [
        DecidedBy::Policy,
        DecidedBy::approver("an operator"),
        DecidedBy::caller("the user"),
    ] {
        let json = serde_json::to_string(&decided(by.clone())).unwrap();
        let read: CallState = serde_json::from_str(&json).unwrap();
        assert_eq!(read, decided(by));
    }
    for (name, by) in [
        ("the user", DecidedBy::caller("the user")),
        ("policy", DecidedBy::Policy),
        ("approver", DecidedBy::approver("approver")),
    ] {
        let older = format!(r#"{{"state": "decided", "decision": "allow", "by": "{name}"}}"#);
        let read: CallState = serde_json::from_str(&older).unwrap();
        assert_eq!(read, decided(by));
    }
}

#[test]
fn a_finished_call_keeps_its_images_and_an_older_one_reads_without() {
    let finished = |images| CallState::Finished {
        text: "done".into(),
        is_error: false,
        images,
    };
    let image = Media {
        data: "iVBORw0KGgo=".into(),
        mime_type: "image/png".into(),
    };
    let json = serde_json::to_string(&finished(vec![image.clone()])).unwrap();
    let read: CallState = serde_json::from_str(&json).unwrap();
    assert_eq!(read, finished(vec![image]));
    // Written before images were kept: none.
    let older = r#"{"state": "finished", "text": "done", "is_error": false}"#;
    let read: CallState = serde_json::from_str(older).unwrap();
    assert_eq!(read, finished(Vec::new()));
    // None: the field is left out, as before.
    let json = serde_json::to_string(&finished(Vec::new())).unwrap();
    assert!(!json.contains("images"), "{json}");
}

#[test]
fn a_lease_holds_until_it_passes() {
    let mut held = checkpoint();
    held.status = RunStatus::Running;
    held.holder = Some(Holder {
        process: "a".into(),
        until_ms: 100,
    });
    assert!(held.held_by_other("b", 99));
    assert!(!held.held_by_other("a", 99));
    assert!(!held.held_by_other("b", 100));
    held.status = RunStatus::Waiting;
    assert!(!held.held_by_other("b", 99));
}
