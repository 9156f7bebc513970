//! The guardrail layer: over a tool's arguments and its streamed output,
//! over a model's messages and its text deltas, under an agent, with
//! checks that panic, hang or fail, and on the trace.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{stream, StreamExt};
use toolstack::agent::{Agent, AgentEvent, StopReason};
use toolstack::guardrail::{Action, GuardrailEvents, GuardrailTriggered, Target};
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{
    tool, BoxTool, ErrorKind, ToolError, ToolOutput, ToolRequest, ToolResult, Toolbox,
};
use toolstack_layers::guardrail::{Guardrail, GuardrailLayer, OnCheckError, Verdict};
use toolstack_layers::ServiceBuilderExt;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct Sql {
    sql: String,
}

/// A tool that says what it ran, counting its runs.
fn query(runs: Arc<AtomicUsize>) -> BoxTool {
    BoxTool::new(tool::from_fn("query", move |q: Sql| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolError>(format!("ran {}", q.sql)) }
    }))
}

/// Rejects, redacts or raises on the words it is given.
fn words() -> Guardrail {
    Guardrail::from_fn("words", |subject| async move {
        let text = subject.new_text().to_owned();
        if subject.text.contains("DROP") {
            Verdict::reject("this tool only reads; ask for a SELECT")
        } else if subject.text.contains("shutdown") {
            Verdict::raise("an attempt to stop the server")
        } else if text.contains("secret") {
            Verdict::redact(text.replace("secret", "[redacted]"), "a secret")
        } else {
            Verdict::Allow
        }
    })
}

/// An event sink that keeps what it hears.
fn heard() -> (GuardrailEvents, Arc<Mutex<Vec<GuardrailTriggered>>>) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&kept);
    let events = GuardrailEvents::new(move |event| {
        sink.lock().unwrap().push(event);
        async {}
    });
    (events, kept)
}

async fn call(tools: &Toolbox, request: ToolRequest) -> Result<String, ToolError> {
    let stream = tools.clone().oneshot(request).await?;
    let result = ToolResult::collect(stream).await;
    match result.error.clone() {
        Some(err) => Err(err),
        None => Ok(result.into_text()),
    }
}

#[tokio::test]
async fn a_rejected_call_never_reaches_the_tool_and_the_model_reads_why() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(query(runs.clone()), GuardrailLayer::new().input(words()));
    let (events, kept) = heard();
    let mut request = ToolRequest::new("query", r#"{"sql": "DROP TABLE users"}"#).with_id("call-1");
    request.extensions_mut().insert(events);

    let err = call(&tools, request).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert_eq!(
        err.message(),
        "guardrail `words` refused this call: this tool only reads; ask for a SELECT"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool ran");
    let kept = kept.lock().unwrap();
    assert_eq!(
        *kept,
        [GuardrailTriggered::new(
            "words",
            Target::ToolCall,
            "query",
            Some("call-1".into()),
            Action::Rejected,
            "this tool only reads; ask for a SELECT",
        )]
    );
}

#[tokio::test]
async fn redacted_arguments_are_what_the_tool_gets() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(query(runs.clone()), GuardrailLayer::new().input(words()));
    let text = call(
        &tools,
        ToolRequest::new("query", r#"{"sql": "SELECT secret"}"#),
    )
    .await
    .unwrap();
    assert_eq!(text, "ran SELECT [redacted]");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_raise_on_the_arguments_is_a_guardrail_error() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(query(runs.clone()), GuardrailLayer::new().input(words()));
    let err = call(&tools, ToolRequest::new("query", r#"{"sql": "shutdown"}"#))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Guardrail);
    assert!(!err.kind().is_retryable());
    assert_eq!(
        err.message(),
        "guardrail `words` raised: an attempt to stop the server"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A tool streaming `items`, counting how many were read from it.
fn streaming(items: &'static [&'static str], read: Arc<AtomicUsize>) -> Toolbox {
    let rows = tool::from_stream("rows", move |_: serde_json::Value| {
        let read = Arc::clone(&read);
        stream::iter(items.iter().map(move |item| {
            read.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>(ToolOutput::text(*item))
        }))
    });
    Toolbox::new().layered(rows, GuardrailLayer::new().output(card_numbers()))
}

/// Rejects a card number, even one split across items.
fn card_numbers() -> Guardrail {
    Guardrail::from_fn("cards", |subject| async move {
        if subject.text.contains("4111 1111 1111 1111") {
            Verdict::reject("a card number")
        } else {
            Verdict::Allow
        }
    })
}

#[tokio::test]
async fn an_output_check_cuts_the_stream_before_the_offending_item() {
    const ITEMS: &[&str] = &["hello\n", "my card is 4111", " 1111 1111 1111", "\nthanks"];
    let read = Arc::new(AtomicUsize::new(0));
    let tools = streaming(ITEMS, Arc::clone(&read));
    let stream = tools
        .clone()
        .oneshot(ToolRequest::new("rows", "{}"))
        .await
        .unwrap();
    let items: Vec<String> = stream
        .map(|item| match item.unwrap() {
            ToolOutput::Text { text } => text,
            other => panic!("{other:?}"),
        })
        .collect()
        .await;
    // The number is found once its second half arrives: that half never
    // passes, and nothing after it is read from the tool.
    assert_eq!(
        items,
        [
            "hello\n",
            "my card is 4111",
            "[the rest of this output was withheld by guardrail `cards`: a card number]"
        ]
    );
    assert_eq!(read.load(Ordering::SeqCst), 3, "read past the cut");
}

#[tokio::test]
async fn without_lookback_a_split_match_is_not_seen() {
    // What the lookback is for: with none, each item is checked alone.
    const ITEMS: &[&str] = &["my card is 4111", " 1111 1111 1111"];
    let rows = tool::from_stream("rows", |_: serde_json::Value| {
        stream::iter(
            ITEMS
                .iter()
                .map(|item| Ok::<_, ToolError>(ToolOutput::text(*item))),
        )
    });
    let tools = Toolbox::new().layered(
        rows,
        GuardrailLayer::new().output(card_numbers()).lookback(0),
    );
    let text = call(&tools, ToolRequest::new("rows", "{}")).await.unwrap();
    // (The model reads the items joined by newlines.)
    assert_eq!(text, "my card is 4111\n 1111 1111 1111");
}

#[tokio::test]
async fn output_is_redacted_item_by_item_and_a_raise_ends_it_with_an_error() {
    let rows = tool::from_stream("rows", |_: serde_json::Value| {
        stream::iter(
            ["a secret\n", "plain\n", "shutdown now", "never read"]
                .map(|item| Ok::<_, ToolError>(ToolOutput::text(item))),
        )
    });
    let tools = Toolbox::new().layered(rows, GuardrailLayer::new().output(words()));
    let stream = tools.oneshot(ToolRequest::new("rows", "{}")).await.unwrap();
    let items: Vec<Result<ToolOutput, ToolError>> = stream.collect().await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(
        items[0].as_ref().unwrap(),
        &ToolOutput::text("a [redacted]\n")
    );
    assert_eq!(items[1].as_ref().unwrap(), &ToolOutput::text("plain\n"));
    let err = items[2].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Guardrail);
    assert!(
        err.message().contains("an attempt to stop the server"),
        "{err}"
    );
}

#[tokio::test]
async fn json_output_is_checked_as_the_text_the_model_reads() {
    let user = tool::from_fn("user", |_: serde_json::Value| async {
        Ok::<_, ToolError>(serde_json::json!({"name": "Ann", "note": "DROP it"}))
    });
    let tools = Toolbox::new().layered(user, GuardrailLayer::new().output(words()));
    let text = call(&tools, ToolRequest::new("user", "{}")).await.unwrap();
    assert!(text.contains("withheld by guardrail `words`"), "{text}");
    assert!(!text.contains("Ann"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_check_that_hangs_refuses_after_its_timeout_or_allows_when_set() {
    let hangs = || {
        Guardrail::from_fn("slow", |_| async {
            std::future::pending::<()>().await;
            Verdict::Allow
        })
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let refusing = Toolbox::new().layered(
        query(runs.clone()),
        GuardrailLayer::new()
            .input(hangs())
            .check_timeout(Duration::from_millis(200)),
    );
    let err = call(
        &refusing,
        ToolRequest::new("query", r#"{"sql": "SELECT 1"}"#),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert!(
        err.message()
            .contains("its check failed (it did not answer within 200ms)"),
        "{err}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let allowing = Toolbox::new().layered(
        query(runs.clone()),
        GuardrailLayer::new()
            .input(hangs())
            .check_timeout(Duration::from_millis(200))
            .on_check_error(OnCheckError::Allow),
    );
    let text = call(
        &allowing,
        ToolRequest::new("query", r#"{"sql": "SELECT 1"}"#),
    )
    .await
    .unwrap();
    assert_eq!(text, "ran SELECT 1");
}

#[tokio::test]
async fn a_check_that_panics_or_fails_is_a_typed_refusal() {
    let panics_now = Guardrail::from_fn("panics_now", |_| -> std::future::Ready<Verdict> {
        panic!("a bug in the check")
    });
    let panics_later =
        Guardrail::from_fn("panics_later", |_| async { panic!("a bug in the check") });
    let fails = Guardrail::from_service(
        "classifier",
        service_fn(|_: toolstack_layers::guardrail::Subject| async {
            Err::<Verdict, _>(ToolError::new(
                ErrorKind::Unavailable,
                "the classifier is down",
            ))
        }),
    );
    for (guardrail, why) in [
        (panics_now, "it panicked"),
        (panics_later, "it panicked"),
        (
            fails,
            "it returned an error: unavailable: the classifier is down",
        ),
    ] {
        let runs = Arc::new(AtomicUsize::new(0));
        let name = guardrail.name().to_owned();
        let tools =
            Toolbox::new().layered(query(runs.clone()), GuardrailLayer::new().input(guardrail));
        let err = call(&tools, ToolRequest::new("query", r#"{"sql": "SELECT 1"}"#))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Denied, "{name}");
        assert!(
            err.message().starts_with(&format!(
                "guardrail `{name}` refused this call: its check failed ({why})"
            )),
            "{name}: {err}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{name}");
    }
}

#[tokio::test]
async fn a_service_check_and_a_chain_in_order() {
    // A classifier service redacts first; the next guardrail sees its text.
    let classifier = Guardrail::from_service(
        "classifier",
        service_fn(|subject: toolstack_layers::guardrail::Subject| async move {
            Ok::<_, ToolError>(Verdict::redact(
                subject.new_text().replace("secret", "DROP"),
                "rewritten",
            ))
        }),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(
        query(runs.clone()),
        GuardrailLayer::new().input(classifier).input(words()),
    );
    let err = call(&tools, ToolRequest::new("query", r#"{"sql": "secret"}"#))
        .await
        .unwrap_err();
    assert!(
        err.message().starts_with("guardrail `words` refused"),
        "{err}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// The echo model's answer.
type Echoed = stream::Iter<std::vec::IntoIter<Result<ModelDelta, ToolError>>>;

/// A model that answers with the last user message, in three deltas.
fn echo_model() -> impl tower::Service<
    ChatRequest,
    Response = Echoed,
    Error = ToolError,
    Future = std::future::Ready<Result<Echoed, ToolError>>,
> + Clone {
    service_fn(|request: ChatRequest| {
        let last = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let deltas = vec![
            Ok(ModelDelta::Text("you said: ".into())),
            Ok(ModelDelta::Text(last)),
            Ok(ModelDelta::Text(" (done)".into())),
        ];
        std::future::ready(Ok(stream::iter(deltas)))
    })
}

async fn texts<S>(model: S, request: ChatRequest) -> Vec<Result<String, ErrorKind>>
where
    S: tower::Service<ChatRequest, Error = ToolError>,
    S::Response: futures_core::Stream<Item = Result<ModelDelta, ToolError>>,
{
    match model.oneshot(request).await {
        Err(err) => vec![Err(err.kind())],
        Ok(stream) => {
            stream
                .map(|delta| match delta {
                    Ok(ModelDelta::Text(text)) => Ok(text),
                    Ok(other) => Ok(format!("{other:?}")),
                    Err(err) => Err(err.kind()),
                })
                .collect()
                .await
        }
    }
}

#[tokio::test]
async fn a_model_is_sent_redacted_messages_and_a_refused_request_is_answered_with_the_reason() {
    let model = ServiceBuilder::new()
        .stream_guardrail(GuardrailLayer::new().input(words()))
        .service(echo_model());
    let said = texts(
        model.clone(),
        ChatRequest::new(vec![
            Message::system("be brief"),
            Message::user("my secret"),
        ]),
    )
    .await;
    assert_eq!(
        said,
        [
            Ok("you said: ".into()),
            Ok("my [redacted]".into()),
            Ok(" (done)".into())
        ]
    );
    // An earlier message is checked again on every call: the conversation
    // is sent whole each time.
    let said = texts(
        model,
        ChatRequest::new(vec![
            Message::user("DROP everything"),
            Message::assistant("no"),
            Message::user("please"),
        ]),
    )
    .await;
    assert_eq!(
        said,
        [Ok(
            "[this request was refused by guardrail `words`: this tool only reads; ask for a SELECT]"
                .into()
        )]
    );
}

#[tokio::test]
async fn a_models_text_is_checked_as_it_streams() {
    let model = ServiceBuilder::new()
        .stream_guardrail(GuardrailLayer::new().output(words()))
        .service(echo_model());
    let said = texts(
        model.clone(),
        ChatRequest::new(vec![Message::user("a secret")]),
    )
    .await;
    assert_eq!(
        said,
        [
            Ok("you said: ".into()),
            Ok("a [redacted]".into()),
            Ok(" (done)".into())
        ]
    );
    let said = texts(model, ChatRequest::new(vec![Message::user("DROP")])).await;
    assert_eq!(
        said,
        [
            Ok("you said: ".into()),
            Ok("[the rest of this output was withheld by guardrail `words`: this tool only reads; ask for a SELECT]".into())
        ]
    );
}

#[tokio::test]
async fn under_an_agent_a_raise_stops_the_run_and_every_trigger_is_streamed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Toolbox::new().layered(query(runs.clone()), GuardrailLayer::new().input(words()));
    let model = ScriptedModel::new([
        Turn::new().tool_call("query", r#"{"sql": "SELECT secret"}"#),
        Turn::new().tool_call("query", r#"{"sql": "shutdown"}"#),
        Turn::new().text("never asked"),
    ]);
    let played = model.clone();
    let events: Vec<AgentEvent> = Agent::new(model, tools)
        .run(vec![Message::user("go")])
        .collect()
        .await;
    let triggered: Vec<(Action, Target)> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::GuardrailTriggered(t) => Some((t.action, t.target)),
            _ => None,
        })
        .collect();
    assert_eq!(
        triggered,
        [
            (Action::Redacted, Target::ToolCall),
            (Action::Raised, Target::ToolCall)
        ]
    );
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done: {events:?}")
    };
    assert_eq!(done.stop, StopReason::Guardrail);
    assert_eq!(
        played.turns_played(),
        2,
        "the model was asked after the raise"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the redacted call ran");
}

#[tokio::test]
async fn under_an_agent_a_guardrail_on_the_model_stops_the_run_on_a_raise() {
    let tools = Toolbox::new();
    let model = ServiceBuilder::new()
        .stream_guardrail(GuardrailLayer::new().output(words()))
        .service(ScriptedModel::new([Turn::new().text("shutdown the host")]));
    let events: Vec<AgentEvent> = Agent::new(model, tools)
        .run(vec![Message::user("go")])
        .collect()
        .await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::GuardrailTriggered(t)
            if t.action == Action::Raised && t.target == Target::LlmOutput && t.call_id.is_none())),
        "{events:?}"
    );
    let Some(AgentEvent::Done(done)) = events.last() else {
        panic!("no Done: {events:?}")
    };
    assert_eq!(done.stop, StopReason::Guardrail);
}

#[tokio::test]
async fn each_check_is_an_apply_guardrail_span_with_its_decision() {
    use support::capture::Capture;
    let capture = Capture::default();
    let _guard = capture.install();
    let runs = Arc::new(AtomicUsize::new(0));
    let stack = ServiceBuilder::new()
        .stream_trace()
        .stream_guardrail(GuardrailLayer::new().input(words()));
    let tools = Toolbox::new().layered(query(runs), stack);
    let _ = call(&tools, ToolRequest::new("query", r#"{"sql": "DROP x"}"#)).await;
    let spans = capture.spans();
    let guardrail = spans
        .iter()
        .find(|s| s.name == "apply_guardrail")
        .expect("an apply_guardrail span");
    let field = |name: &str| guardrail.fields.get(name).map(String::as_str);
    assert_eq!(field("otel.name"), Some("apply_guardrail words"));
    assert_eq!(field("gen_ai.operation.name"), Some("apply_guardrail"));
    assert_eq!(field("gen_ai.guardrail.name"), Some("words"));
    assert_eq!(field("gen_ai.guardrail.target"), Some("tool_call"));
    assert_eq!(field("gen_ai.guardrail.decision"), Some("rejected"));
    assert_eq!(
        field("gen_ai.guardrail.reason"),
        Some("this tool only reads; ask for a SELECT")
    );
    let event = capture
        .events()
        .into_iter()
        .find(|e| e.message() == "guardrail triggered")
        .expect("a guardrail triggered event");
    assert_eq!(event.field("gen_ai.guardrail.decision"), Some("rejected"));
    let parent = event.parent.map(|i| spans[i].name);
    assert_eq!(parent, Some("apply_guardrail"));
}

#[tokio::test]
async fn output_for_programs_is_checked_and_dropped_where_it_would_be_redacted() {
    // The text the model reads, and the same for programs (an MCP server's
    // `structuredContent`): a secret in both.
    let file = tool::from_stream("file", |_: serde_json::Value| {
        stream::iter([
            Ok::<_, ToolError>(ToolOutput::text("a secret\n")),
            Ok(ToolOutput::structured(
                serde_json::json!({"content": "a secret"}),
            )),
            Ok(ToolOutput::structured(
                serde_json::json!({"content": "plain"}),
            )),
        ])
    });
    let tools = Toolbox::new().layered(file, GuardrailLayer::new().output(words()));
    let stream = tools.oneshot(ToolRequest::new("file", "{}")).await.unwrap();
    let items: Vec<Result<ToolOutput, ToolError>> = stream.collect().await;
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(
        items[0].as_ref().unwrap(),
        &ToolOutput::text("a [redacted]\n")
    );
    // The secret's structured copy never passes; a clean one does.
    assert_eq!(
        items[1].as_ref().unwrap(),
        &ToolOutput::structured(serde_json::json!({"content": "plain"}))
    );
}
