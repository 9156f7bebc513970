//! Model traffic recorded once and replayed (`model::record`): an agent's
//! run replayed exactly, a changed prompt failing with a diff, the two
//! orders, a request's max_tokens matched, the recorded timing on a
//! paused clock, an answer dropped while recorded, and recordings that
//! are truncated, corrupt, edited or newer.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::record::{Order, Pace, RecordLayer, ReplayError, ReplayModel};
use toolstack::model::{ChatRequest, Message, ModelDelta, ScriptedModel, Turn};
use toolstack::{ErrorKind, ToolError, Toolbox};
use tower::{service_fn, Layer, ServiceExt};

fn file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "toolstack-record-{name}-{}-{:?}.jsonl",
        std::process::id(),
        std::time::SystemTime::now()
    ))
}

fn script() -> ScriptedModel {
    ScriptedModel::new([
        Turn::new()
            .text("Counting.")
            .tool_call("count", r#"{"to":3}"#),
        Turn::new().text("Counted to 3."),
    ])
    .fragment_chars(3)
}

fn tools() -> Toolbox {
    Toolbox::new().tool(toolstack_demo::tools::count())
}

async fn run<M: toolstack::model::ModelService + Sync>(model: M, prompt: &str) -> Vec<AgentEvent> {
    Agent::new(model, tools())
        .run(vec![Message::user(prompt)])
        .collect()
        .await
}

#[tokio::test]
async fn an_agent_run_replays_exactly_and_a_changed_prompt_fails_with_a_diff() {
    let path = file("agent");
    let live = run(
        RecordLayer::create(&path).unwrap().layer(script()),
        "count to 3",
    )
    .await;
    let replay = ReplayModel::open(&path).unwrap();
    assert_eq!(replay.len(), 2);
    let replayed = run(replay, "count to 3").await;
    assert_eq!(format!("{replayed:?}"), format!("{live:?}"));

    // The prompt changed: the model call fails, naming what differs.
    let changed = run(ReplayModel::open(&path).unwrap(), "count to 4").await;
    let error = changed
        .iter()
        .find_map(|e| match e {
            AgentEvent::Error(err) => Some(err.clone()),
            _ => None,
        })
        .expect("the replay refused the call");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    let message = error.message();
    assert!(
        message.starts_with("call 1 of the replay was not recorded"),
        "{message}"
    );
    assert!(
        message.contains(r#"-       "content": "count to 3""#),
        "{message}"
    );
    assert!(
        message.contains(r#"+       "content": "count to 4""#),
        "{message}"
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn by_match_answers_out_of_order_and_in_order_does_not() {
    let path = file("order");
    let model = ScriptedModel::new([Turn::new().text("one"), Turn::new().text("two")]);
    let recorded = RecordLayer::create(&path).unwrap().layer(model);
    let ask = |text: &str| ChatRequest::new(vec![Message::user(text)]);
    for text in ["first", "second"] {
        let _: Vec<_> = recorded
            .clone()
            .oneshot(ask(text))
            .await
            .unwrap()
            .collect()
            .await;
    }
    let texts = |deltas: Vec<Result<ModelDelta, ToolError>>| -> String {
        deltas
            .into_iter()
            .filter_map(|d| match d {
                Ok(ModelDelta::Text(t)) => Some(t),
                _ => None,
            })
            .collect()
    };
    let by_match = ReplayModel::open(&path).unwrap().order(Order::ByMatch);
    let second = by_match.clone().oneshot(ask("second")).await.unwrap();
    assert_eq!(texts(second.collect().await), "two");
    let first = by_match.clone().oneshot(ask("first")).await.unwrap();
    assert_eq!(texts(first.collect().await), "one");
    // Each exchange answers once.
    let again = by_match.oneshot(ask("first")).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound);
    assert!(again.message().contains("exchange 1"), "{again}");

    let in_order = ReplayModel::open(&path).unwrap();
    let err = in_order.oneshot(ask("second")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("call 1 of the replay was not recorded"),
        "{err}"
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_requests_max_tokens_is_recorded_and_matched() {
    let path = file("max-tokens");
    let recorded = RecordLayer::create(&path)
        .unwrap()
        .layer(ScriptedModel::new([Turn::new().text("short")]));
    let ask = |max_tokens: Option<u32>| {
        let mut request = ChatRequest::new(vec![Message::user("hi")]);
        request.max_tokens = max_tokens;
        request
    };
    let _: Vec<_> = recorded
        .oneshot(ask(Some(100)))
        .await
        .unwrap()
        .collect()
        .await;
    // Another limit is another request: it can end the answer sooner.
    let err = ReplayModel::open(&path)
        .unwrap()
        .oneshot(ask(None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains(r#"-   "max_tokens": 100"#), "{err}");
    let same = ReplayModel::open(&path).unwrap().oneshot(ask(Some(100)));
    assert!(same.await.is_ok());
    let _ = std::fs::remove_file(&path);
}

/// A model that writes "a", "b", "c", 100 ms apart.
fn slow() -> impl toolstack::model::ModelService {
    service_fn(|_: ChatRequest| async {
        let deltas = stream::iter(["a", "b", "c"]).then(|text| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, ToolError>(ModelDelta::Text(text.into()))
        });
        Ok::<_, ToolError>(deltas.boxed())
    })
}

#[tokio::test(start_paused = true)]
async fn the_recorded_timing_is_replayed_or_skipped() {
    let path = file("timing");
    let recorded = RecordLayer::create(&path).unwrap().layer(slow());
    let request = || ChatRequest::new(vec![Message::user("slowly")]);
    let _: Vec<_> = recorded.oneshot(request()).await.unwrap().collect().await;

    let paced = ReplayModel::open(&path).unwrap().pace(Pace::Recorded);
    let start = tokio::time::Instant::now();
    let deltas: Vec<_> = paced.oneshot(request()).await.unwrap().collect().await;
    assert_eq!(deltas.len(), 3);
    assert_eq!(start.elapsed(), Duration::from_millis(300));

    let fast = ReplayModel::open(&path).unwrap();
    let start = tokio::time::Instant::now();
    let _: Vec<_> = fast.oneshot(request()).await.unwrap().collect().await;
    assert_eq!(start.elapsed(), Duration::ZERO);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(start_paused = true)]
async fn an_answer_dropped_while_recorded_is_kept_as_far_as_it_came() {
    let path = file("dropped");
    let recorded = RecordLayer::create(&path).unwrap().layer(slow());
    let request = || ChatRequest::new(vec![Message::user("slowly")]);
    let mut answer = Box::pin(recorded.oneshot(request()).await.unwrap());
    let _ = answer.next().await;
    drop(answer);
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().nth(1).expect("the exchange's line");
    assert!(line.contains(r#""complete":false"#), "{line}");
    let replay = ReplayModel::open(&path).unwrap();
    let deltas: Vec<_> = replay.oneshot(request()).await.unwrap().collect().await;
    assert_eq!(deltas.len(), 1);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_model_error_is_recorded_and_replayed_typed() {
    let path = file("error");
    let failing = service_fn(|_: ChatRequest| async {
        Err::<futures_util::stream::Empty<Result<ModelDelta, ToolError>>, _>(
            ToolError::rate_limited(Some(Duration::from_millis(1500))),
        )
    });
    let recorded = RecordLayer::create(&path).unwrap().layer(failing);
    let request = || ChatRequest::new(vec![Message::user("hi")]);
    let live = recorded.oneshot(request()).await.unwrap_err();
    let replay = ReplayModel::open(&path).unwrap();
    let mut answer = replay.oneshot(request()).await.unwrap();
    let replayed = answer.next().await.unwrap().unwrap_err();
    assert_eq!(replayed.kind(), live.kind());
    assert_eq!(replayed.message(), live.message());
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn bad_recordings_are_typed_errors_naming_the_line() {
    let path = file("bad");
    let _ = run(
        RecordLayer::create(&path).unwrap().layer(script()),
        "count to 3",
    )
    .await;
    let good = std::fs::read_to_string(&path).unwrap();
    let write = |text: &str| {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };

    // Truncated mid-line: the line is named.
    write(&good[..good.len() - 40]);
    match ReplayModel::open(&path) {
        Err(ReplayError::Corrupt { line, why }) => {
            assert_eq!(line, 3, "{why}");
            assert!(why.contains("truncated or corrupt"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // An edited request no longer matches its digest.
    write(&good.replacen("count to 3", "count to 9", 1));
    assert!(matches!(
        ReplayModel::open(&path),
        Err(ReplayError::Corrupt { line: 2, .. })
    ));
    // A newer format names both versions.
    write(&good.replacen(r#""version":1"#, r#""version":7"#, 1));
    let err = ReplayModel::open(&path).unwrap_err();
    assert!(
        matches!(
            err,
            ReplayError::NewerFormat {
                found: 7,
                supported: 1
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "the recording is of format version 7; this library reads up to version 1"
    );
    // Not a recording at all; nothing at all.
    write("{\"hello\": 1}\n");
    assert!(matches!(
        ReplayModel::open(&path),
        Err(ReplayError::Corrupt { line: 1, .. })
    ));
    write("");
    assert!(matches!(
        ReplayModel::open(&path),
        Err(ReplayError::Corrupt { line: 1, .. })
    ));
    let _ = std::fs::remove_file(&path);
    assert!(matches!(ReplayModel::open(&path), Err(ReplayError::Io(_))));
}
