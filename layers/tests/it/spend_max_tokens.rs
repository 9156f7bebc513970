//! The spend limit and a request's `max_tokens`: a call reserves its
//! prompt and its `max_tokens` (else the layer's `reserve_output_tokens`),
//! and a call whose reservation the limits capped — the last to fit — goes
//! to the model with its `max_tokens` lowered to the output its
//! reservation pays for: never raised, never below 1; in process, and
//! after Redis's verdict (feature `redis`).

use std::sync::{Arc, Mutex};

use futures_util::{stream, StreamExt};
use toolstack::model::{ChatRequest, Cost, Message, ModelDelta, Price, Prices, RunId, Usage};
use toolstack::ToolError;
use toolstack_layers::spend::{Limit, SpendLimitLayer};
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

fn request(max_tokens: Option<u32>) -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("hi")])
        .with_model("m")
        .with_extension(RunId::new("run-1"));
    request.max_tokens = max_tokens;
    request
}

type Answer = futures_util::stream::BoxStream<'static, Result<ModelDelta, ToolError>>;

/// The `max_tokens` of each request the model was sent, in order.
type Seen = Arc<Mutex<Vec<Option<u32>>>>;

/// How a model's answers go.
#[derive(Clone, Copy)]
enum Answers {
    /// "ok", then this usage: the call ends, and settles to it.
    Spend(u64),
    /// "…", and never an end: the call holds its reservation.
    Hold,
}

/// A model that notes the `max_tokens` it is sent, and answers as told.
fn model(
    seen: &Seen,
    answers: Answers,
) -> impl Service<ChatRequest, Response = Answer, Error = ToolError> + Clone {
    let seen = Arc::clone(seen);
    tower::service_fn(move |request: ChatRequest| {
        seen.lock().expect("not poisoned").push(request.max_tokens);
        let answer: Answer = match answers {
            Answers::Spend(output) => stream::iter([
                Ok(ModelDelta::Text("ok".into())),
                Ok(ModelDelta::Usage(Usage::new(PROMPT, output))),
            ])
            .boxed(),
            Answers::Hold => stream::iter([Ok(ModelDelta::Text("…".into()))])
                .chain(stream::pending())
                .boxed(),
        };
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    })
}

fn seen(seen: &Seen) -> Vec<Option<u32>> {
    seen.lock().expect("not poisoned").clone()
}

/// Calls and reads the whole answer.
async fn spend<S>(model: &S, request: ChatRequest)
where
    S: Service<ChatRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = Result<ModelDelta, ToolError>>,
{
    let answer = model.clone().oneshot(request).await.expect("admitted");
    let items: Vec<_> = answer.collect().await;
    assert!(items.iter().all(Result::is_ok), "{items:?}");
}

#[tokio::test]
async fn the_last_call_to_fit_goes_with_its_max_tokens_lowered_to_what_is_left() {
    let sent = Seen::default();
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(1_000));
    let model = layer.layer(model(&sent, Answers::Spend(895)));
    // 900 of the run's 1,000 tokens spent: 100 left, 95 after the prompt.
    spend(&model, request(None)).await;
    spend(&model, request(Some(500))).await;
    assert_eq!(
        seen(&sent),
        [Some(995), Some(95)],
        "the first wants 4,096 of output (the default), capped to the 995 \
         the limit has; the second's 500 lowered to the 95 left"
    );
}

#[tokio::test]
async fn a_cost_limit_lowers_max_tokens_to_the_output_its_reservation_pays_for() {
    let sent = Seen::default();
    // $0.001: 5 prompt tokens ($0.000005), then 497 output tokens at $2
    // per million ($0.000994) — 497.5, rounded down.
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::cost(Cost::from_nanos(1_000_000)));
    let model = layer.layer(model(&sent, Answers::Spend(1)));
    spend(&model, request(Some(2_000))).await;
    assert_eq!(seen(&sent), [Some(497)]);
}

#[tokio::test]
async fn a_call_with_room_goes_with_its_own_max_tokens_and_reserves_only_that() {
    let sent = Seen::default();
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(1_000));
    let held = layer.layer(model(&sent, Answers::Hold));
    // 5 + 100 reserved while the answer streams, not 5 + 4,096 (which
    // would hold the whole limit).
    let first = held.clone().oneshot(request(Some(100))).await.unwrap();
    // No max_tokens, room for the default: none is given.
    let roomy = SpendLimitLayer::new(prices()).per_run(Limit::tokens(100_000));
    spend(&roomy.layer(model(&sent, Answers::Spend(1))), request(None)).await;
    // The next call in the run fits in what the first left: 1,000 - 105,
    // its prompt 5, 890 of output.
    let second = held.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(seen(&sent), [Some(100), None, Some(890)]);
    drop((first, second));
}

#[tokio::test]
async fn a_request_without_max_tokens_under_a_cap_gets_one_and_never_zero() {
    let sent = Seen::default();
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(1_000))
        .reserve_output_tokens(4_096);
    spend(&layer.layer(model(&sent, Answers::Spend(1))), request(None)).await;
    // A limit that takes the prompt and nothing more: 1 token, the least
    // an endpoint takes, rather than 0.
    let exact = SpendLimitLayer::new(prices()).per_run(Limit::tokens(PROMPT));
    let answer = exact
        .layer(model(&sent, Answers::Hold))
        .oneshot(request(Some(50)))
        .await
        .expect("admitted: the prompt fits");
    drop(answer);
    assert_eq!(seen(&sent), [Some(995), Some(1)]);
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::redis_server::{eventually, RedisServer, PATIENCE, PATIENT_TIMEOUT};
    use toolstack_layers::spend::RedisSpend;

    #[tokio::test]
    async fn the_second_replicas_call_is_lowered_to_what_the_first_left_in_redis() {
        let Some(redis) = RedisServer::start("the_second_replicas_call_is_lowered") else {
            return;
        };
        let replica = |manager| {
            SpendLimitLayer::new(prices())
                .per_run(Limit::tokens(1_000))
                .redis(
                    RedisSpend::new(manager)
                        .prefix("t")
                        .timeout(PATIENT_TIMEOUT),
                )
        };
        let sent = Seen::default();
        let a = replica(redis.patient_manager().await).layer(model(&sent, Answers::Hold));
        let b = replica(redis.patient_manager().await).layer(model(&sent, Answers::Spend(1)));
        // a's call holds 5 + 600 in Redis while its answer streams; b's,
        // asking for 2,000, gets what is left: 395, its prompt 5.
        let held = a.clone().oneshot(request(Some(600))).await.unwrap();
        spend(&b, request(Some(2_000))).await;
        assert_eq!(seen(&sent), [Some(600), Some(390)]);
        drop(held);
        eventually(PATIENCE, "no reservation left", || {
            let redis = &redis;
            async move { !redis.keys().await.iter().any(|k| k.ends_with(":r")) }
        })
        .await;
    }
}
