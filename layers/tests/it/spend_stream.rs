//! The spend limit while an answer streams, counters in process: its
//! output counted as it comes (bytes / 4, or the endpoint's own count),
//! more reserved when it writes past what its call reserved, and the
//! answer cut — a typed `SpendLimited` error after what was written — when
//! no limit has room; what a cut or dropped answer wrote is counted.

use futures_util::{stream, StreamExt};
use toolstack::model::{ChatRequest, Cost, Message, ModelDelta, Price, Prices, RunId, Usage};
use toolstack::{ErrorKind, ToolError};
use toolstack_layers::spend::{Limit, LimitReached, SpendLimitLayer};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

/// $1 per million prompt tokens, $2 per million generated.
fn prices() -> Prices {
    Prices::builder()
        .model("m", Price::per_million_tokens(1.0, 2.0))
        .build()
        .expect("a good table")
}

/// "hi": estimated at 5 prompt tokens (1 for its text, 4 for the message).
const PROMPT: u64 = 5;

fn request(run: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
        .with_model("m")
        .with_extension(RunId::new(run))
}

type Answer = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;

/// A model that writes `deltas` pieces of 40 bytes (10 tokens each), then
/// reports `usage` (if any).
fn writer(
    deltas: usize,
    usage: Option<Usage>,
) -> impl Service<ChatRequest, Response = Answer, Error = ToolError> + Clone {
    tower::service_fn(move |_: ChatRequest| {
        let text = (0..deltas).map(|_| Ok(ModelDelta::Text("x".repeat(40))));
        let answer: Answer = stream::iter(text)
            .chain(stream::iter(
                usage.map(|usage| Ok(ModelDelta::Usage(usage))),
            ))
            .boxed();
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    })
}

/// Reads a whole answer: the text's tokens (bytes / 4), and the error it
/// ended with, if any.
async fn read(answer: Answer) -> (u64, Option<ToolError>) {
    let mut answer = answer;
    let mut tokens = 0;
    while let Some(item) = answer.next().await {
        match item {
            Ok(ModelDelta::Text(text)) => tokens += text.len() as u64 / 4,
            Ok(_) => {}
            Err(err) => {
                assert!(answer.next().await.is_none(), "an error ends the answer");
                return (tokens, Some(err));
            }
        }
    }
    (tokens, None)
}

#[tokio::test]
async fn an_answer_longer_than_its_reservation_gets_more_while_the_limit_has_room() {
    // 100 output tokens reserved; the answer writes 1,000 under a limit of
    // 10,000: it asks for more, ten times, and is never cut.
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(10_000))
        .reserve_output_tokens(100);
    let model = layer.layer(writer(100, Some(Usage::new(PROMPT, 1_000))));
    let answer = model.clone().oneshot(request("r")).await.unwrap().boxed();
    let (tokens, err) = read(answer).await;
    assert_eq!(tokens, 1_000);
    assert!(err.is_none(), "{err:?}");

    // What it reported is what counts (1,005 tokens): after a call of
    // 8,991 more, 4 are left, which cannot take a prompt of 5.
    let next = layer.layer(writer(0, Some(Usage::new(8_991, 0))));
    let (_, err) = read(next.oneshot(request("r")).await.unwrap().boxed()).await;
    assert!(err.is_none());
    let err = model.oneshot(request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited, "{err}");
}

#[tokio::test]
async fn an_answer_that_crosses_a_limit_is_cut_after_what_it_wrote() {
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(300))
        .reserve_output_tokens(100);
    // 2,000 tokens' worth, never reached.
    let model = layer.layer(writer(200, Some(Usage::new(PROMPT, 2_000))));
    let answer = model.clone().oneshot(request("r")).await.unwrap().boxed();
    let (tokens, err) = read(answer).await;

    // The limit leaves 295 output tokens: 29 pieces fit, the 30th crosses
    // (written, so passed on and counted), and the answer ends.
    assert_eq!(tokens, 300);
    let err = err.expect("the answer is cut");
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert!(!err.is_retryable());
    assert_eq!(
        err.message(),
        "this run has used 0 of its 300 tokens, and calls in flight have reserved 300: \
         what is left cannot take more of this answer (about 5 tokens); \
         the answer was cut after about 300 output tokens"
    );
    let reached = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<LimitReached>())
        .expect("the limit reached, for code to read");
    assert!(reached.cut_an_answer());

    // What it wrote counts (its prompt and 300 tokens): the run is over
    // its limit, and the next call is refused before the model is called.
    let err = model.oneshot(request("r")).await.unwrap_err();
    assert_eq!(
        err.message(),
        "this run has used 305 of its 300 tokens ($0.000605 spent); the model was not called"
    );
}

#[tokio::test]
async fn a_cost_limit_cuts_an_answer_on_what_its_output_costs() {
    // $2 per million output tokens: $0.001 pays for 500 of them, less the
    // prompt ($0.000005).
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::cost(Cost::from_nanos(1_000_000)))
        .reserve_output_tokens(100);
    let model = layer.layer(writer(200, None));
    let answer = model.oneshot(request("r")).await.unwrap().boxed();
    let (tokens, err) = read(answer).await;
    let err = err.expect("the answer is cut");
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(tokens, 500, "{err}");
    assert!(err
        .message()
        .ends_with("the answer was cut after about 500 output tokens"));
}

#[tokio::test]
async fn answers_at_the_same_time_share_what_is_left_and_overshoot_by_a_piece_each_at_most() {
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(1_000))
        .reserve_output_tokens(50);
    let model = layer.layer(writer(200, None));
    // Four answers, their pieces interleaved.
    let answers =
        futures_util::future::join_all((0..4).map(|_| model.clone().oneshot(request("r")))).await;
    let answers: Vec<Answer> = answers.into_iter().map(|a| a.unwrap().boxed()).collect();
    let read_all = stream::select_all(answers.into_iter().map(|answer| {
        stream::unfold(answer, |mut answer| async move {
            let item = answer.next().await?;
            Some((item, answer))
        })
        .boxed()
    }));
    let items: Vec<_> = read_all.collect().await;
    let written: u64 = items
        .iter()
        .filter_map(|item| match item {
            Ok(ModelDelta::Text(text)) => Some(text.len() as u64 / 4),
            _ => None,
        })
        .sum();
    let cut = items
        .iter()
        .filter(|item| matches!(item, Err(err) if err.kind() == ErrorKind::SpendLimited))
        .count();
    assert_eq!(cut, 4, "every answer is cut");
    // 4 prompts of 5, and what they wrote: past the limit by at most the
    // piece (10 tokens) each wrote when it crossed.
    let spent = 4 * PROMPT + written;
    assert!(spent > 1_000 - 40, "the limit was used: {spent}");
    assert!(
        spent <= 1_000 + 4 * 10,
        "overshoot by a piece each at most: {spent}"
    );
}

#[tokio::test]
async fn an_answer_dropped_early_counts_what_it_wrote() {
    // Written, not reported: 100 tokens, then nothing more.
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(2 * PROMPT + 100));
    let silent = layer.layer(tower::service_fn(|_: ChatRequest| {
        let answer: Answer = stream::iter([Ok(ModelDelta::Text("x".repeat(400)))])
            .chain(stream::pending())
            .boxed();
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    }));
    let mut answer = silent.clone().oneshot(request("r")).await.unwrap();
    assert!(matches!(answer.next().await, Some(Ok(ModelDelta::Text(_)))));
    drop(answer);
    // Its prompt and 100 tokens counted: 5 are left, enough for a prompt.
    let mut answer = silent.clone().oneshot(request("r")).await.unwrap();
    assert!(answer.next().await.is_some());
    drop(answer);
    // Now 105 more: over.
    let err = silent.oneshot(request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited, "{err}");
}
