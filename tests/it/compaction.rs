//! The compaction strategies: each on hand-written histories, then over
//! random histories of user turns, answers with up to three calls and
//! their results, reasoning and system messages — every built-in
//! strategy's result pairs each call with its result, is no longer than
//! what it compacted, and keeps the system messages and the latest user
//! message — and a compacted history as both providers' clients send it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use toolstack::agent::compaction::{
    check, check_compaction, estimate_tokens, Compact, CompactionError, ElideToolResults,
    KeepFirstAndLast, Summarize,
};
use toolstack::model::{
    ChatRequest, Message, ModelDelta, Reasoning, ScriptedModel, ToolCall, Turn,
};
use toolstack::{Media, ToolError};

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: r#"{"path":"notes.txt"}"#.into(),
    }
}

fn signed(text: &str) -> Reasoning {
    Reasoning::Thinking {
        text: text.into(),
        signature: Some("c2lnbmVk".into()),
    }
}

/// An answer that thought, then called `calls`.
fn thinking_calls(thought: &str, calls: Vec<ToolCall>) -> Message {
    Message::Assistant {
        content: None,
        tool_calls: calls,
        reasoning: vec![signed(thought)],
    }
}

fn image() -> Media {
    Media {
        data: "iVBORw0KGgo=".into(),
        mime_type: "image/png".into(),
    }
}

/// A system prompt, a question, three turns that read 4 KiB each (the
/// second failed and drew a chart), then the answer and a second question.
fn reading_history() -> Vec<Message> {
    vec![
        Message::system("You are a careful analyst."),
        Message::user("Summarize the three reports."),
        thinking_calls("Read the first.", vec![call("call_1", "read_file")]),
        Message::tool("call_1", "a".repeat(4096)),
        Message::assistant_calls(vec![call("call_2", "read_file"), call("call_3", "chart")]),
        Message::Tool {
            tool_call_id: "call_2".into(),
            content: "b".repeat(4096),
            is_error: true,
            images: Vec::new(),
        },
        Message::Tool {
            tool_call_id: "call_3".into(),
            content: "the chart".into(),
            is_error: false,
            images: vec![image()],
        },
        thinking_calls("The third.", vec![call("call_4", "read_file")]),
        Message::tool("call_4", "c".repeat(4096)),
        Message::assistant("All three are about rain."),
        Message::user("And the second?"),
    ]
}

async fn compact(strategy: &impl Compact, history: &[Message]) -> Option<Vec<Message>> {
    strategy.compact(history).await.expect("compacted")
}

#[tokio::test]
async fn old_tool_results_are_elided_with_a_notice_naming_the_call_and_its_size() {
    let history = reading_history();
    let compacted = compact(&ElideToolResults::new(2), &history)
        .await
        .expect("smaller");
    check_compaction(&history, &compacted).unwrap();
    assert_eq!(compacted.len(), history.len());
    assert_eq!(
        compacted[3],
        Message::tool(
            "call_1",
            "[elided: the result of read_file call call_1 (4,096 bytes) was removed to save context; call the tool again if you need it]"
        )
    );
    // The error flag stays; the image goes.
    assert_eq!(
        compacted[5],
        Message::tool_error(
            "call_2",
            "[elided: the result of read_file call call_2 (4,096 bytes) was removed to save context; call the tool again if you need it]"
        )
    );
    assert_eq!(
        compacted[6],
        Message::tool(
            "call_3",
            "[elided: the result of chart call call_3 (9 bytes and an image) was removed to save context; call the tool again if you need it]"
        )
    );
    // The last two turns, and every other message, as they were.
    for i in (0..history.len()).filter(|i| ![3, 5, 6].contains(i)) {
        assert_eq!(compacted[i], history[i], "message {i}");
    }
    assert!(estimate_tokens(&compacted) < estimate_tokens(&history));
}

#[tokio::test]
async fn a_result_already_elided_or_shorter_than_its_notice_is_left_and_nothing_to_elide_is_none() {
    let history = reading_history();
    let once = compact(&ElideToolResults::new(0), &history).await.unwrap();
    assert!(compact(&ElideToolResults::new(0), &once).await.is_none());
    let short = vec![
        Message::user("time?"),
        Message::assistant_calls(vec![call("call_1", "clock")]),
        Message::tool("call_1", "12:00"),
        Message::assistant("Noon."),
    ];
    assert!(compact(&ElideToolResults::new(0), &short).await.is_none());
    // Fewer turns than kept.
    assert!(compact(&ElideToolResults::new(9), &history).await.is_none());
}

#[tokio::test]
async fn keeping_the_first_and_the_last_cuts_at_a_turn_and_notes_how_many_messages_went() {
    let history = vec![
        Message::system("Be brief."),
        Message::user("Read the reports."),
        thinking_calls("First.", vec![call("call_1", "read_file")]),
        Message::tool("call_1", "a".repeat(4096)),
        Message::assistant_calls(vec![
            call("call_2", "read_file"),
            call("call_3", "read_file"),
        ]),
        Message::tool("call_3", "c".repeat(4096)),
        Message::tool("call_2", "b".repeat(4096)),
        thinking_calls("Last.", vec![call("call_4", "read_file")]),
        Message::tool("call_4", "d".repeat(4096)),
    ];
    let compacted = compact(&KeepFirstAndLast::new(1), &history)
        .await
        .expect("smaller");
    assert_eq!(
        compacted,
        [
            Message::system("Be brief."),
            Message::user("Read the reports."),
            Message::user("[5 earlier messages were removed to save context]"),
            history[7].clone(),
            history[8].clone(),
        ]
    );
    check_compaction(&history, &compacted).unwrap();
    // Compacted again, the note is replaced and its messages counted.
    let longer: Vec<Message> = compacted
        .iter()
        .cloned()
        .chain([
            Message::assistant_calls(vec![call("call_5", "read_file")]),
            Message::tool("call_5", "e".repeat(4096)),
        ])
        .collect();
    let again = compact(&KeepFirstAndLast::new(1), &longer).await.unwrap();
    assert_eq!(
        again[2],
        Message::user("[7 earlier messages were removed to save context]")
    );
    assert_eq!(again[3..], longer[5..]);
}

#[tokio::test]
async fn keeping_the_last_turns_never_drops_the_latest_user_message() {
    // The latest question came before the last turn: kept from it.
    let history = vec![
        Message::user("Read the first."),
        Message::assistant_calls(vec![call("call_1", "read_file")]),
        Message::tool("call_1", "a".repeat(4096)),
        Message::assistant("Read."),
        Message::user("Now the second."),
        Message::assistant_calls(vec![call("call_2", "read_file")]),
        Message::tool("call_2", "b".repeat(4096)),
        Message::assistant_calls(vec![call("call_3", "read_file")]),
        Message::tool("call_3", "c".repeat(4096)),
    ];
    let compacted = compact(&KeepFirstAndLast::new(1), &history).await.unwrap();
    assert_eq!(compacted[0], history[0]);
    assert_eq!(
        compacted[1],
        Message::user("[3 earlier messages were removed to save context]")
    );
    assert_eq!(compacted[2..], history[4..]);
    check_compaction(&history, &compacted).unwrap();
    // Nothing before the latest question but the first one: nothing to do.
    assert!(compact(&KeepFirstAndLast::new(1), &compacted[..1])
        .await
        .is_none());
    // What would go is smaller than the note: nothing to do.
    let short = [
        Message::user("hi"),
        Message::assistant("hello"),
        Message::assistant("again"),
    ];
    assert!(compact(&KeepFirstAndLast::new(1), &short).await.is_none());
}

/// A model that answers `summary` and keeps the requests it was sent.
fn recording_summarizer(
    summary: &'static str,
) -> (
    impl toolstack::model::ModelService,
    Arc<Mutex<Vec<ChatRequest>>>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::clone(&seen);
    let model = tower::service_fn(move |request: ChatRequest| {
        requests.lock().unwrap().push(request);
        let deltas: Vec<Result<ModelDelta, ToolError>> = vec![Ok(ModelDelta::Text(summary.into()))];
        std::future::ready(Ok::<_, ToolError>(futures_util::stream::iter(deltas)))
    });
    (model, seen)
}

#[tokio::test]
async fn a_summary_replaces_the_older_turns_with_one_message_marked_as_such() {
    let history = reading_history();
    let (model, seen) = recording_summarizer("Two reports read: rain; the second failed.");
    let compacted = compact(&Summarize::new(model, 1), &history)
        .await
        .expect("smaller");
    // Everything between the first question and the last turn.
    assert_eq!(
        compacted,
        [
            history[0].clone(),
            history[1].clone(),
            Message::user(
                "[summary of 7 earlier messages]\nTwo reports read: rain; the second failed."
            ),
            history[9].clone(),
            history[10].clone(),
        ]
    );
    check_compaction(&history, &compacted).unwrap();
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert!(request.tools.is_empty());
    assert!(
        matches!(&request.messages[0], Message::System { content } if content.contains("Summarize"))
    );
    let Message::User {
        content: transcript,
    } = &request.messages[1]
    else {
        panic!("{:?}", request.messages)
    };
    assert!(transcript
        .contains("assistant called read_file (call call_1) with: {\"path\":\"notes.txt\"}"));
    assert!(transcript.contains("result of call call_2, failed: bbbb"));
    assert!(transcript.contains("[2,048 more bytes]"), "results are cut");
    assert!(transcript.contains("result of call call_3: the chart [1 image(s) not shown]"));
    assert!(
        !transcript.contains("All three are about rain."),
        "the last turn is kept"
    );
    assert!(
        !transcript.contains("Summarize the three reports."),
        "the first question is kept, not summarized"
    );
    assert!(!transcript.contains("And the second?"));
}

#[tokio::test]
async fn a_summary_of_a_summary_counts_the_messages_it_stood_for() {
    let (model, _) = recording_summarizer("Older work.");
    let history = reading_history();
    let once = compact(&Summarize::new(model.clone(), 0), &history[..9])
        .await
        .unwrap();
    assert_eq!(once.len(), 3);
    let longer: Vec<Message> = once
        .into_iter()
        .chain([
            Message::assistant_calls(vec![call("call_9", "read_file")]),
            Message::tool("call_9", "z".repeat(4096)),
        ])
        .collect();
    let twice = compact(&Summarize::new(model, 0), &longer).await.unwrap();
    assert_eq!(
        twice[2],
        Message::user("[summary of 9 earlier messages]\nOlder work.")
    );
}

#[tokio::test]
async fn nothing_to_summarize_asks_no_model() {
    let (model, seen) = recording_summarizer("unused");
    let history = [Message::user("hi"), Message::assistant("hello")];
    assert!(compact(&Summarize::new(model, 1), &history).await.is_none());
    assert!(seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_summary_model_is_a_model_error() {
    let refusing = tower::service_fn(|_: ChatRequest| {
        std::future::ready(Err::<
            futures_util::stream::Empty<Result<ModelDelta, ToolError>>,
            _,
        >(ToolError::failed(
            "the model endpoint answered 400",
        )))
    });
    let err = Summarize::new(refusing, 1)
        .compact(&reading_history())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CompactionError::Model(e) if e.message().contains("400")),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "the summary model: failed: the model endpoint answered 400"
    );
    // Broken off mid-answer, or no text at all: a model error too.
    let broken = ScriptedModel::new([Turn::new()
        .text("Partial")
        .fail(ToolError::failed("connection reset"))]);
    let err = Summarize::new(broken, 1)
        .compact(&reading_history())
        .await
        .unwrap_err();
    assert!(matches!(err, CompactionError::Model(_)), "{err}");
    let silent = ScriptedModel::new([Turn::new().tool_call("read_file", "{}")]);
    let err = Summarize::new(silent, 1)
        .compact(&reading_history())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no text"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_summary_model_that_hangs_is_timed_out() {
    let hanging = tower::service_fn(|_: ChatRequest| {
        std::future::ready(Ok::<_, ToolError>(futures_util::stream::pending::<
            Result<ModelDelta, ToolError>,
        >()))
    });
    let started = tokio::time::Instant::now();
    let err = Summarize::new(hanging, 1)
        .timeout(Duration::from_secs(5))
        .compact(&reading_history())
        .await
        .unwrap_err();
    assert!(matches!(err, CompactionError::TimedOut(d) if d == Duration::from_secs(5)));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(
        err.to_string(),
        "the summary model did not answer within 5s"
    );
}

#[tokio::test]
async fn a_users_function_is_a_strategy_and_its_result_is_checked_by_the_caller() {
    fn last_only(messages: &[Message]) -> Result<Option<Vec<Message>>, CompactionError> {
        Ok(messages.last().map(|m| vec![m.clone()]))
    }
    let history = reading_history();
    let compacted = compact(&last_only, &history).await.unwrap();
    assert_eq!(compacted, [Message::user("And the second?")]);
    // It dropped the system message.
    assert!(matches!(
        check_compaction(&history, &compacted),
        Err(CompactionError::Broken(why)) if why.contains("system message")
    ));
    // It dropped the latest user message.
    let strategy: Box<dyn Compact> = Box::new(
        |m: &[Message]| -> Result<Option<Vec<Message>>, CompactionError> {
            Ok(Some(m[..2].to_vec()))
        },
    );
    let compacted = strategy.compact(&history).await.unwrap().unwrap();
    assert!(matches!(
        check_compaction(&history, &compacted),
        Err(CompactionError::WouldDropLatestUserMessage)
    ));
}

#[test]
fn a_compaction_that_splits_or_moves_reasoning_is_refused() {
    let history = reading_history();
    let mut stripped = history.clone();
    if let Message::Assistant { reasoning, .. } = &mut stripped[2] {
        reasoning.clear();
    }
    assert!(matches!(
        check_compaction(&history, &stripped),
        Err(CompactionError::Broken(why)) if why.contains("split")
    ));
    let mut moved = history.clone();
    moved[9] = Message::Assistant {
        content: Some("All three are about rain.".into()),
        tool_calls: Vec::new(),
        reasoning: vec![signed("Read the first.")],
    };
    assert!(matches!(
        check_compaction(&history, &moved),
        Err(CompactionError::Broken(why)) if why.contains("moved")
    ));
}

#[test]
fn check_rejects_a_call_without_its_result_a_result_without_its_call_and_a_result_after_the_next_answer(
) {
    let answered = reading_history();
    check(&answered).unwrap();
    // A call missing its result.
    let mut missing = answered.clone();
    missing.remove(8);
    assert_eq!(
        check(&missing).unwrap_err(),
        "message 7: call `call_4` (read_file) has no result"
    );
    // A result without its call.
    let mut orphan = answered.clone();
    orphan.insert(1, Message::tool("call_0", "?"));
    assert_eq!(
        check(&orphan).unwrap_err(),
        "message 1: the result of call `call_0` follows no assistant message that made the call"
    );
    let mut stray = answered.clone();
    stray.insert(4, Message::tool("call_9", "?"));
    assert_eq!(
        check(&stray).unwrap_err(),
        "message 4: the result of call `call_9` answers no call of the assistant message before it (message 2)"
    );
    // A result after the next assistant message.
    let late = vec![
        Message::user("go"),
        Message::assistant_calls(vec![call("call_1", "read_file")]),
        Message::assistant("done"),
        Message::tool("call_1", "text"),
    ];
    assert_eq!(
        check(&late).unwrap_err(),
        "message 3: the result of call `call_1` is not right after the assistant message that made it (message 1)"
    );
    // Or after a user message: neither provider takes it.
    let mut interrupted = late.clone();
    interrupted[2] = Message::user("wait");
    assert!(check(&interrupted).is_err());
    // Two results of one call.
    let twice = vec![
        Message::assistant_calls(vec![call("call_1", "read_file")]),
        Message::tool("call_1", "text"),
        Message::tool("call_1", "text"),
    ];
    assert_eq!(
        check(&twice).unwrap_err(),
        "message 2: a second result of call `call_1`"
    );
}

#[tokio::test]
async fn a_strategy_refuses_a_history_that_is_not_well_formed() {
    let broken = [
        Message::user("go"),
        Message::assistant_calls(vec![call("call_1", "read_file")]),
    ];
    let err = KeepFirstAndLast::new(1).compact(&broken).await.unwrap_err();
    assert!(matches!(err, CompactionError::InvalidHistory(_)), "{err}");
}

#[test]
fn estimated_tokens_count_text_calls_reasoning_and_images() {
    assert_eq!(estimate_tokens(&[]), 0);
    // 10 bytes: 3 tokens + 4.
    assert_eq!(estimate_tokens(&[Message::user("0123456789")]), 7);
    // "call_1" + "read_file" + the 20-byte arguments, and 15 of reasoning.
    assert_eq!(
        estimate_tokens(&[thinking_calls(
            "Read the first.",
            vec![call("call_1", "read_file")]
        )]),
        (6 + 9 + 20 + 15_u64).div_ceil(4) + 4
    );
    let with_image = Message::Tool {
        tool_call_id: "c".into(),
        content: "abc".into(),
        is_error: false,
        images: vec![image()],
    };
    assert_eq!(estimate_tokens(&[with_image]), 1 + 4 + 1_600);
}

// ---------------------------------------------------------------------
// Random histories.

/// Histories of system messages, user turns, answers with calls and their
/// results (in any order), reasoning blocks; the last user turn may be
/// answered or not.
fn histories() -> impl Strategy<Value = Vec<Message>> {
    // Text or not, reasoning or not, 0–3 calls: each its result's size,
    // error flag and whether it has an image.
    let answer = (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(
            (0usize..3000, any::<bool>(), prop::bool::weighted(0.1)),
            0..4,
        ),
    );
    let exchange = (
        "[a-z ]{1,40}",
        proptest::collection::vec(answer, 0..5),
        prop::bool::weighted(0.1),
        any::<bool>(),
    );
    (0usize..3, proptest::collection::vec(exchange, 1..6)).prop_map(|(systems, exchanges)| {
        let mut messages: Vec<Message> = (0..systems)
            .map(|i| Message::system(format!("instructions {i}")))
            .collect();
        let mut next = 0;
        for (question, answers, system, reverse) in exchanges {
            if system {
                messages.push(Message::system("a mid-run instruction"));
            }
            messages.push(Message::user(question));
            for (text, reasoning, calls) in answers {
                let calls: Vec<(ToolCall, usize, bool, bool)> = calls
                    .into_iter()
                    .map(|(size, is_error, image)| {
                        next += 1;
                        (
                            call(&format!("call_{next}"), "read_file"),
                            size,
                            is_error,
                            image,
                        )
                    })
                    .collect();
                messages.push(Message::Assistant {
                    content: text.then(|| "some text".to_owned()),
                    tool_calls: calls.iter().map(|(c, ..)| c.clone()).collect(),
                    reasoning: if reasoning {
                        vec![
                            signed("thinking"),
                            Reasoning::Redacted {
                                data: "opaque".into(),
                            },
                        ]
                    } else {
                        Vec::new()
                    },
                });
                let mut results: Vec<Message> = calls
                    .into_iter()
                    .map(|(c, size, is_error, image)| Message::Tool {
                        tool_call_id: c.id,
                        content: "r".repeat(size),
                        is_error,
                        images: if image {
                            vec![self::image()]
                        } else {
                            Vec::new()
                        },
                    })
                    .collect();
                if reverse {
                    results.reverse();
                }
                messages.extend(results);
            }
        }
        messages
    })
}

/// What every built-in strategy's result must hold, besides what
/// `check_compaction` checks: no longer, the system messages and the
/// latest user message kept, each assistant message one of the input's.
fn holds(before: &[Message], after: &[Message]) -> Result<(), TestCaseError> {
    prop_assert!(check(after).is_ok(), "{:?}", check(after));
    prop_assert!(
        check_compaction(before, after).is_ok(),
        "{:?}",
        check_compaction(before, after)
    );
    prop_assert!(estimate_tokens(after) < estimate_tokens(before));
    let systems = |m: &[Message]| -> Vec<Message> {
        m.iter()
            .filter(|m| matches!(m, Message::System { .. }))
            .cloned()
            .collect()
    };
    prop_assert_eq!(systems(before), systems(after));
    if let Some(latest) = before
        .iter()
        .rev()
        .find(|m| matches!(m, Message::User { content } if !content.starts_with('[')))
    {
        prop_assert!(after.contains(latest));
    }
    for message in after {
        if matches!(message, Message::Assistant { .. }) {
            prop_assert!(before.contains(message));
        }
    }
    Ok(())
}

fn strategies(keep: usize) -> Vec<(&'static str, Box<dyn Compact>)> {
    let model = ScriptedModel::new([
        Turn::new().text("A short summary."),
        Turn::new().text("A shorter one."),
    ]);
    vec![
        ("elide", Box::new(ElideToolResults::new(keep))),
        ("keep first and last", Box::new(KeepFirstAndLast::new(keep))),
        ("summarize", Box::new(Summarize::new(model, keep))),
    ]
}

proptest! {
    #[test]
    fn every_strategy_keeps_calls_with_results_system_messages_and_the_latest_question(
        history in histories(),
        keep in 0usize..4,
    ) {
        prop_assert!(check(&history).is_ok(), "{:?}", check(&history));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        for (name, strategy) in strategies(keep) {
            let once = runtime.block_on(strategy.compact(&history));
            let once = once.map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
            let Some(once) = once else { continue };
            holds(&history, &once)?;
            // And once more, over its own notes.
            let grown: Vec<Message> = once
                .iter()
                .cloned()
                .chain([
                    Message::assistant_calls(vec![call("call_x", "read_file")]),
                    Message::tool("call_x", "x".repeat(800)),
                ])
                .collect();
            let twice = runtime.block_on(strategy.compact(&grown));
            let twice = twice.map_err(|e| TestCaseError::fail(format!("{name}, twice: {e}")))?;
            if let Some(twice) = twice {
                holds(&grown, &twice)?;
            }
        }
    }
}

// ---------------------------------------------------------------------
// What the providers' clients send of a compacted history.

#[cfg(any(feature = "openai", feature = "anthropic"))]
use crate::http_request;

#[cfg(any(feature = "openai", feature = "anthropic"))]
mod providers {
    use serde_json::Value;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;
    use tower::ServiceExt;

    use super::*;

    /// Serves `response` to each of `n` connections; returns the address
    /// and the request bodies received.
    async fn server(
        n: usize,
        response: String,
    ) -> (String, tokio::sync::mpsc::UnboundedReceiver<Value>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for _ in 0..n {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (_, body) = super::http_request::read_request(&mut socket).await;
                let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, rx)
    }

    fn sse(events: &[(&str, Value)]) -> String {
        let mut out = String::from(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        );
        for (event, data) in events {
            if !event.is_empty() {
                out.push_str(&format!("event: {event}\n"));
            }
            out.push_str(&format!("data: {data}\n\n"));
        }
        out
    }

    /// The reading history compacted by each built-in strategy.
    async fn compacted() -> Vec<Vec<Message>> {
        let history = reading_history();
        let summarizer = ScriptedModel::new([Turn::new().text("Two reports read.")]);
        let strategies: Vec<Box<dyn Compact>> = vec![
            Box::new(ElideToolResults::new(1)),
            Box::new(KeepFirstAndLast::new(1)),
            Box::new(Summarize::new(summarizer, 1)),
        ];
        let mut out = Vec::new();
        for strategy in strategies {
            out.push(strategy.compact(&history).await.unwrap().unwrap());
        }
        // The agent mid-loop: its last turns called tools.
        let mid_run = &history[..9];
        out.push(
            KeepFirstAndLast::new(1)
                .compact(mid_run)
                .await
                .unwrap()
                .unwrap(),
        );
        out.push(
            ElideToolResults::new(1)
                .compact(mid_run)
                .await
                .unwrap()
                .unwrap(),
        );
        out
    }

    #[cfg(feature = "openai")]
    #[tokio::test]
    async fn openai_is_sent_each_call_followed_by_its_results() {
        use serde_json::json;
        use toolstack::model::OpenAiModel;

        let histories = compacted().await;
        let chunk =
            json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]});
        let answer = sse(&[("", chunk)]) + "data: [DONE]\n\n";
        let (url, mut bodies) = server(histories.len(), answer).await;
        let model = OpenAiModel::new(format!("{url}/v1"), "test-model");
        for history in histories {
            let stream = model
                .clone()
                .oneshot(ChatRequest::new(history.clone()))
                .await
                .expect("accepted");
            let _: Vec<_> = futures_util::StreamExt::collect(stream).await;
            let body = bodies.recv().await.unwrap();
            let messages = body["messages"].as_array().unwrap();
            assert_eq!(messages.len(), history.len());
            // The chat-completions rule: an assistant message with
            // tool_calls is followed by one tool message per call.
            for (i, message) in messages.iter().enumerate() {
                let Some(calls) = message["tool_calls"].as_array() else {
                    continue;
                };
                let mut ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
                let mut answered: Vec<&str> = messages[i + 1..i + 1 + ids.len()]
                    .iter()
                    .map(|m| {
                        assert_eq!(m["role"], "tool", "{messages:#?}");
                        m["tool_call_id"].as_str().unwrap()
                    })
                    .collect();
                ids.sort_unstable();
                answered.sort_unstable();
                assert_eq!(ids, answered);
            }
            assert!(messages
                .iter()
                .all(|m| m.get("reasoning").is_none() && m.get("images").is_none()));
        }
    }

    #[cfg(feature = "anthropic")]
    #[tokio::test]
    async fn anthropic_is_sent_alternating_turns_each_tool_use_answered_next_and_thinking_first() {
        use serde_json::json;
        use toolstack::model::AnthropicModel;

        let histories = compacted().await;
        let answer = sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"model": "claude-test", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        let (url, mut bodies) = server(histories.len(), answer).await;
        let model = AnthropicModel::new("claude-test").base_url(url);
        for history in histories {
            let stream = model
                .clone()
                .oneshot(ChatRequest::new(history))
                .await
                .expect("accepted");
            let deltas: Vec<_> = futures_util::StreamExt::collect(stream).await;
            assert!(deltas.iter().all(Result::is_ok), "{deltas:?}");
            let body = bodies.recv().await.unwrap();
            assert_eq!(body["system"][0]["text"], "You are a careful analyst.");
            let messages = body["messages"].as_array().unwrap();
            assert_eq!(messages[0]["role"], "user");
            for (i, message) in messages.iter().enumerate() {
                let role = message["role"].as_str().unwrap();
                assert_eq!(role, if i % 2 == 0 { "user" } else { "assistant" });
                let blocks = message["content"].as_array().unwrap();
                assert!(!blocks.is_empty());
                let kind = |b: &Value| b["type"].as_str().unwrap().to_owned();
                // Thinking first in an answer; tool results first in a
                // user message.
                let first_other = |wanted: &[&str]| {
                    blocks
                        .iter()
                        .position(|b| !wanted.contains(&kind(b).as_str()))
                        .unwrap_or(blocks.len())
                };
                let leading = first_other(&["thinking", "redacted_thinking", "tool_result"]);
                assert!(blocks[leading..].iter().all(|b| !matches!(
                    kind(b).as_str(),
                    "thinking" | "redacted_thinking" | "tool_result"
                )));
                // Every tool_use answered by a tool_result of the next
                // message, and every tool_result answers one of the
                // message before.
                let uses: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].as_str().unwrap())
                    .collect();
                let results = |m: &Value| -> Vec<String> {
                    let mut ids: Vec<String> = m["content"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|b| b["type"] == "tool_result")
                        .map(|b| b["tool_use_id"].as_str().unwrap().to_owned())
                        .collect();
                    ids.sort_unstable();
                    ids
                };
                let mut uses: Vec<String> = uses.into_iter().map(str::to_owned).collect();
                uses.sort_unstable();
                match messages.get(i + 1) {
                    Some(next) if role == "assistant" => assert_eq!(results(next), uses),
                    None => assert!(uses.is_empty()),
                    _ => {}
                }
                if role == "user" {
                    let answered: Vec<String> = match i.checked_sub(1) {
                        Some(before) => {
                            let mut ids: Vec<String> = messages[before]["content"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .filter(|b| b["type"] == "tool_use")
                                .map(|b| b["id"].as_str().unwrap().to_owned())
                                .collect();
                            ids.sort_unstable();
                            ids
                        }
                        None => Vec::new(),
                    };
                    assert_eq!(results(message), answered);
                }
            }
        }
    }
}
