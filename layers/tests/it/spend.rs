//! The spend limit over a model, counters in process: refusals before the
//! model is called, per run, per caller and per window, what an answer
//! adds and when, and the price table's checks.

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{stream, StreamExt};
use support::capture::Capture;
use toolstack::model::{
    ChatRequest, Cost, Message, ModelDelta, Price, PriceError, Prices, RunId, ScriptedModel, Turn,
    Usage,
};
use toolstack::{tool, ErrorKind, ToolError, ToolRequest};
use toolstack_layers::spend::{Limit, LimitReached, Scope, SpendLimitLayer, Unpriced, Window};
use toolstack_layers::trace::TraceLayer;
use tower::{Service, ServiceExt};
use tower_layer::Layer;

/// $1 per million prompt tokens, $2 per million generated.
fn prices() -> Prices {
    Prices::builder()
        .model("m", Price::per_million_tokens(1.0, 2.0))
        .build()
        .expect("a good table")
}

/// An answer that reports 100,000 prompt and 50,000 completion tokens:
/// $0.20 on `m`.
fn answer() -> Turn {
    Turn::new().text("ok").usage(Usage::new(100_000, 50_000))
}

fn script(turns: usize) -> ScriptedModel {
    ScriptedModel::new((0..turns).map(|_| answer()))
}

fn request(run: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
        .with_model("m")
        .with_extension(RunId::new(run))
}

/// Calls and reads the whole answer.
async fn call<S>(model: &S, request: ChatRequest) -> Result<Vec<ModelDelta>, ToolError>
where
    S: Service<ChatRequest, Error = ToolError> + Clone,
    S::Response: futures_util::Stream<Item = Result<ModelDelta, ToolError>>,
{
    let answer = model.clone().oneshot(request).await?;
    answer.collect::<Vec<_>>().await.into_iter().collect()
}

#[tokio::test]
async fn a_run_over_its_cost_limit_is_refused_before_the_model_is_called() {
    let inner = script(4);
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::cost(Cost::from_cents(30)));
    let model = layer.layer(inner.clone());

    // $0.20, then $0.40: each admitted on what was spent before it.
    call(&model, request("r1")).await.expect("under the limit");
    call(&model, request("r1"))
        .await
        .expect("still under the limit");
    assert_eq!(inner.turns_played(), 2);

    let err = call(&model, request("r1")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert!(!err.is_retryable());
    assert_eq!(
        err.message(),
        "this run has spent $0.40 of its $0.30 limit (300,000 tokens); the model was not called"
    );
    assert_eq!(inner.turns_played(), 2, "the model was not called");
    let reached = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<LimitReached>())
        .expect("the limit reached, for code to read");
    assert_eq!(reached.scope, Scope::Run);
    assert_eq!(reached.spent, Cost::from_cents(40));
    assert_eq!(reached.spent_tokens, 300_000);
    assert_eq!(reached.window, None);

    // Another run has its own counter; a request of no run has none.
    call(&model, request("r2")).await.expect("another run");
    call(&model, ChatRequest::new(vec![]).with_model("m"))
        .await
        .expect("no run, no per-run limit");
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct User(&'static str);

#[tokio::test]
async fn each_caller_has_its_own_counter_and_the_anonymous_share_one() {
    let inner = script(10);
    let layer = SpendLimitLayer::new(prices()).per_caller::<User>(
        Window::Day,
        Limit::tokens(150_000).and_cost(Cost::from_cents(100)),
    );
    let model = layer.layer(inner.clone());
    let as_user = |user| request("r").with_extension(User(user));

    call(&model, as_user("alice")).await.expect("alice's first");
    let err = call(&model, as_user("alice")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert!(
        err.message().starts_with(
            "this caller has used 150,000 of its 150,000 tokens for today ($0.20 spent); \
             the model was not called; the limit resets at "
        ),
        "{}",
        err.message()
    );
    call(&model, as_user("bob")).await.expect("bob has his own");

    call(&model, request("a"))
        .await
        .expect("the first anonymous call");
    let err = call(&model, request("b")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("anonymous callers have used 150,000"),
        "{}",
        err.message()
    );
    assert_eq!(inner.turns_played(), 3);
}

/// A clock the test moves: seconds since the epoch.
fn clock(at: &Arc<AtomicU64>) -> impl Fn() -> SystemTime + Send + Sync + 'static {
    let at = Arc::clone(at);
    move || UNIX_EPOCH + Duration::from_secs(at.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_windows_limit_holds_until_the_window_rolls_over_at_its_utc_boundary() {
    // 2026-12-01T23:59:00Z.
    let now = Arc::new(AtomicU64::new(1_796_169_540));
    let inner = script(4);
    let layer = SpendLimitLayer::new(prices())
        .global(Window::Day, Limit::cost(Cost::from_cents(20)))
        .clock(clock(&now));
    let model = layer.layer(inner.clone());

    call(&model, request("a")).await.expect("the day's first");
    let err = call(&model, request("b")).await.unwrap_err();
    assert_eq!(
        err.message(),
        "all model calls together have spent $0.20 of their $0.20 limit for today \
         (150,000 tokens); the model was not called; the limit resets at 2026-12-02 00:00 UTC"
    );
    let reached = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<LimitReached>())
        .unwrap();
    assert_eq!(reached.window, Some(Window::Day));
    assert_eq!(
        reached.resets_at,
        Some(UNIX_EPOCH + Duration::from_secs(1_796_169_600))
    );

    // 59 seconds on: the same day.
    now.fetch_add(59, Ordering::SeqCst);
    assert!(call(&model, request("c")).await.is_err());
    // One more: the next day, a new window.
    now.fetch_add(1, Ordering::SeqCst);
    call(&model, request("d")).await.expect("a new day");
    assert!(call(&model, request("e")).await.is_err());
    assert_eq!(inner.turns_played(), 2);
}

#[tokio::test]
async fn usage_is_added_when_the_answer_ends_and_the_reservation_given_back() {
    let inner = script(3);
    // "hi": a prompt of about 5 tokens, and 995 reserved for the output.
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(1_000))
        .reserve_output_tokens(995);
    let model = layer.layer(inner.clone());

    let capture = Capture::default();
    let _guard = capture.install();
    let first = model.clone().oneshot(request("r")).await.unwrap();
    let reserved = capture.events_with("spend reserved");
    assert_eq!(reserved.len(), 1);
    assert_eq!(
        reserved[0]
            .fields
            .get("toolstack.spend.reserved_tokens")
            .map(String::as_str),
        Some("1000")
    );
    // The first answer has not ended: it holds all the run has left.
    let err = model.clone().oneshot(request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(
        err.message(),
        "this run has used 0 of its 1,000 tokens, and calls in flight have reserved 1,000: \
         what is left cannot take this call's prompt (about 5 tokens); the model was not called"
    );
    let reached = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<LimitReached>())
        .expect("a LimitReached");
    assert_eq!((reached.spent_tokens, reached.reserved_tokens), (0, 1_000));
    let _ = first.collect::<Vec<_>>().await;
    let settled = capture.events_with("spend settled");
    assert_eq!(settled.len(), 1);
    let field = |name: &str| settled[0].fields.get(name).cloned();
    assert_eq!(
        field("toolstack.spend.released_tokens").as_deref(),
        Some("1000")
    );
    assert_eq!(
        field("toolstack.spend.settled_tokens").as_deref(),
        Some("150000")
    );
    // The same, as counters for an OpenTelemetry metrics layer; and the
    // refusal above, counted as one.
    assert_eq!(
        field("monotonic_counter.toolstack.spend.settled_tokens").as_deref(),
        Some("150000")
    );
    assert_eq!(
        field("monotonic_counter.toolstack.spend.released_tokens").as_deref(),
        Some("1000")
    );
    assert_eq!(
        reserved[0]
            .fields
            .get("monotonic_counter.toolstack.spend.reserved_tokens")
            .map(String::as_str),
        Some("1000")
    );
    let refused = capture.events_with("spend limit reached");
    assert_eq!(
        refused[0]
            .fields
            .get("monotonic_counter.toolstack.spend.refused_calls")
            .map(String::as_str),
        Some("1")
    );
    // Its usage replaced its reservation: 150,000 tokens spent.
    let err = call(&model, request("r")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("this run has used 150,000 of its 1,000 tokens"),
        "{}",
        err.message()
    );
    assert_eq!(inner.turns_played(), 1);
}

#[tokio::test]
async fn concurrent_calls_reserve_so_together_they_stay_under_the_limit() {
    // Each answer: 5 prompt tokens ("hi", as estimated) and up to 95
    // written; each call reserves 5 + 95.
    let calls = Arc::new(AtomicU64::new(0));
    let spent = Arc::new(AtomicU64::new(0));
    let (counter, total) = (Arc::clone(&calls), Arc::clone(&spent));
    let varied = tower::service_fn(move |_: ChatRequest| {
        let n = counter.fetch_add(1, Ordering::Relaxed);
        let usage = Usage::new(5, 50 + n % 46);
        total.fetch_add(usage.total_tokens(), Ordering::Relaxed);
        let answer = stream::iter([Ok(ModelDelta::Usage(usage))]);
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    });
    let limit = 1_000;
    let layer = SpendLimitLayer::new(prices())
        .global(Window::Day, Limit::tokens(limit))
        .reserve_output_tokens(95);
    let model = layer.layer(varied);
    // All 50 are called before any answer ends.
    let burst = || async {
        let calls = (0..50).map(|_| model.clone().oneshot(request("r")));
        let answers = futures_util::future::join_all(calls).await;
        let admitted: Vec<_> = answers.into_iter().filter_map(Result::ok).collect();
        let count = admitted.len() as u64;
        for answer in admitted {
            let _ = answer.collect::<Vec<_>>().await;
        }
        count
    };
    assert_eq!(burst().await, 10, "ten reservations of 100 fill 1,000");
    let written = spent.load(Ordering::Relaxed);
    assert!(written <= limit, "{written} spent");
    // Every reservation was given back as its answer ended: the next
    // burst has what the ten left, a reservation of 100 a call (the last
    // one capped).
    assert_eq!(burst().await, (limit - written).div_ceil(100));
}

#[tokio::test]
async fn a_reservation_is_given_back_on_error_drop_and_cancel() {
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(100))
        .reserve_output_tokens(95);
    // A call whose model fails before answering.
    let failing = layer.layer(tower::service_fn(|_: ChatRequest| {
        futures_util::future::ready(Err::<Answer, _>(ToolError::new(
            ErrorKind::Unavailable,
            "down",
        )))
    }));
    let err = failing.clone().oneshot(request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);

    let silent = layer.layer(usage_then_silence(None));
    // An answer dropped before it ends.
    let answer = silent.clone().oneshot(request("r")).await.unwrap();
    assert!(silent.clone().oneshot(request("r")).await.is_err(), "held");
    drop(answer);
    // A call cancelled before its future was polled.
    let mut held = silent.clone();
    let future = held.ready().await.unwrap().call(request("r"));
    assert!(silent.clone().oneshot(request("r")).await.is_err(), "held");
    drop(future);
    // Each gave its reservation back: the whole limit is free.
    let answer = silent.clone().oneshot(request("r")).await.unwrap();
    drop(answer);
}

type Answer = stream::BoxStream<'static, Result<ModelDelta, ToolError>>;

/// A model whose answer reports usage first (if any) and then never ends.
fn usage_then_silence(
    usage: Option<Usage>,
) -> impl Service<ChatRequest, Response = Answer, Error = ToolError> + Clone {
    tower::service_fn(move |_: ChatRequest| {
        let first = usage.map(|usage| Ok(ModelDelta::Usage(usage)));
        let answer: Answer = stream::iter(first).chain(stream::pending()).boxed();
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    })
}

#[tokio::test]
async fn an_answer_dropped_early_adds_what_it_had_reported_and_one_silent_nothing() {
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(1_000));
    let reported = layer.layer(usage_then_silence(Some(Usage::new(900, 200))));
    let mut answer = reported.clone().oneshot(request("r")).await.unwrap();
    assert!(matches!(
        answer.next().await,
        Some(Ok(ModelDelta::Usage(_)))
    ));
    drop(answer);
    let err = reported.clone().oneshot(request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);

    // One dropped before it wrote or reported anything adds nothing (and
    // gives back what it reserved): a limit that takes one prompt (5
    // tokens) takes the next.
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(5));
    let silent = layer.layer(usage_then_silence(None));
    let answer = silent.clone().oneshot(request("r")).await.unwrap();
    drop(answer);
    assert!(silent.clone().oneshot(request("r")).await.is_ok());
}

#[tokio::test]
async fn an_answer_that_breaks_off_adds_the_usage_it_reported_then_ends_with_its_error() {
    let broken = tower::service_fn(|_: ChatRequest| {
        let answer = stream::iter([
            Ok(ModelDelta::Usage(Usage::new(10, 10))),
            Err(ToolError::new(ErrorKind::Unavailable, "connection reset")),
            Ok(ModelDelta::Text("never seen".into())),
        ]);
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    });
    let layer = SpendLimitLayer::new(prices()).per_run(Limit::tokens(20));
    let model = layer.layer(broken);
    let items: Vec<_> = model
        .clone()
        .oneshot(request("r"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items.len(), 2, "the error ends the answer: {items:?}");
    assert_eq!(
        items[1].as_ref().unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert!(model.clone().oneshot(request("r")).await.is_err());
}

/// A model that answers as `answered`, reporting 50,000 prompt and
/// 50,000 completion tokens.
fn answered_as(
    answered: &'static str,
) -> impl Service<
    ChatRequest,
    Response = impl futures_util::Stream<Item = Result<ModelDelta, ToolError>>,
    Error = ToolError,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_: ChatRequest| {
        let answer = stream::iter([
            Ok(ModelDelta::Model(answered.into())),
            Ok(ModelDelta::Usage(Usage::new(50_000, 50_000))),
        ]);
        futures_util::future::ready(Ok::<_, ToolError>(answer))
    })
}

#[tokio::test]
async fn the_model_that_answered_is_priced_else_the_one_asked_for() {
    let prices = Prices::builder()
        .model("m", Price::per_million_tokens(1.0, 1.0))
        .model("m-*", Price::per_million_tokens(10.0, 10.0))
        .build()
        .unwrap();
    // Asked for `m`, answered by the snapshot `m-2026`: $10 per million.
    let layer = SpendLimitLayer::new(prices.clone()).per_run(Limit::cost(Cost::from_cents(100)));
    let model = layer.layer(answered_as("m-2026"));
    call(&model, request("r")).await.unwrap();
    let err = call(&model, request("r")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("this run has spent $1.00 of its $1.00 limit"),
        "{}",
        err.message()
    );

    // Answered by `x-1`, which the table does not price: priced as `m`,
    // the model asked for ($1 per million), not left uncounted.
    let layer = SpendLimitLayer::new(prices).per_run(Limit::cost(Cost::from_cents(10)));
    let model = layer.layer(answered_as("x-1"));
    call(&model, request("r")).await.unwrap();
    let err = call(&model, request("r")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("this run has spent $0.10 of its $0.10 limit"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn an_unpriced_model_under_a_cost_limit_is_refused_before_it_is_called() {
    let prices = Prices::builder()
        .model("other", Price::per_million_tokens(1.0, 1.0))
        .build()
        .unwrap();
    let inner = script(3);
    let layer = SpendLimitLayer::new(prices.clone()).per_run(Limit::cost(Cost::from_cents(100)));
    let model = layer.layer(inner.clone());
    let err = call(&model, request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert!(!err.kind().is_retryable());
    assert_eq!(
        err.message(),
        "the spend limit has no price for the model `m`, and a cost limit applies to this call: \
         its cost could not be counted; the model was not called. Price it in the table \
         (Prices::builder().model(\"m\", Price::per_million_tokens(input, output)), or a default \
         entry \"*\" for every model), or count its tokens only \
         (SpendLimitLayer::unpriced(Unpriced::TokensOnly))"
    );
    assert_eq!(inner.turns_played(), 0, "the model was not called");

    // A request that names no model, with no default price: refused too.
    let err = call(
        &model,
        ChatRequest::new(vec![Message::user("hi")]).with_extension(RunId::new("r")),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    assert!(
        err.message().starts_with("the request names no model"),
        "{}",
        err.message()
    );

    // A limit on tokens alone needs no price: the call goes, its tokens count.
    let layer = SpendLimitLayer::new(prices.clone()).per_run(Limit::tokens(150_000));
    let model = layer.layer(inner.clone());
    call(&model, request("r")).await.unwrap();
    let err = call(&model, request("r")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SpendLimited);
    assert_eq!(inner.turns_played(), 1);

    // A default entry (`*`) is the fallback price: every model is priced.
    let fallback = Prices::builder()
        .model("*", Price::per_million_tokens(1.0, 2.0))
        .build()
        .unwrap();
    let layer = SpendLimitLayer::new(fallback).per_run(Limit::cost(Cost::from_cents(20)));
    let model = layer.layer(script(2));
    call(&model, request("r")).await.unwrap();
    let err = call(&model, request("r")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("this run has spent $0.20 of its $0.20 limit"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn an_unpriced_model_counts_its_tokens_only_when_told_to_and_says_so() {
    let prices = Prices::builder()
        .model("other", Price::per_million_tokens(1.0, 1.0))
        .build()
        .unwrap();
    let capture = Capture::default();
    let _guard = capture.install();
    let layer = SpendLimitLayer::new(prices)
        .unpriced(Unpriced::TokensOnly)
        .per_run(Limit::cost(Cost::from_nanos(1)))
        .per_run(Limit::tokens(150_000));
    let model = layer.layer(script(3));
    call(&model, request("r")).await.unwrap();
    let err = call(&model, request("r")).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("this run has used 150,000 of its 150,000 tokens ($0.00 spent)"),
        "{}",
        err.message()
    );
    assert_eq!(
        capture
            .events_with(
                "the spend limit has no price for this model: its tokens count, its cost does not"
            )
            .len(),
        1,
        "a warning says the cost is not covered"
    );
}

#[tokio::test]
async fn the_counters_kept_in_process_are_bounded() {
    let layer = SpendLimitLayer::new(prices())
        .per_run(Limit::tokens(100))
        .max_counters(2);
    let model = layer.layer(script(3));
    for run in ["a", "b", "c"] {
        call(&model, request(run)).await.unwrap();
        assert!(layer.counters() <= 2);
    }
    assert_eq!(layer.counters(), 2);
    // The soonest to expire (the oldest run) made room; the newest is kept.
    assert!(call(&model, request("c")).await.is_err());
}

#[test]
fn a_malformed_price_table_is_refused_naming_the_entry() {
    let built = |price: Price| Prices::builder().model("gpt", price).build().unwrap_err();
    let err = built(Price::per_million_tokens(-1.0, 1.0));
    assert!(matches!(err, PriceError::BadPrice { field: "input", .. }));
    assert_eq!(
        err.to_string(),
        "price table entry `gpt`: its `input` price (-1) is negative; \
         a price is dollars per million tokens, zero or more"
    );
    let err = built(Price::per_million_tokens(1.0, f64::NAN));
    assert!(matches!(
        err,
        PriceError::BadPrice {
            field: "output",
            problem: "is not a number",
            ..
        }
    ));
    let err = built(Price::per_million_tokens(1.0, 1.0).cached_input(f64::INFINITY));
    assert!(
        matches!(
            err,
            PriceError::BadPrice {
                field: "cached_input",
                ..
            }
        ),
        "{err}"
    );
    let err = built(Price::per_million_tokens(1.0, 1.0).reasoning(2e6));
    assert!(err.to_string().contains("per token, or in cents"), "{err}");

    let err = Prices::builder()
        .model("a", Price::per_million_tokens(1.0, 1.0))
        .model(" ", Price::per_million_tokens(1.0, 1.0))
        .build()
        .unwrap_err();
    assert!(matches!(err, PriceError::EmptyModel { entry: 1 }), "{err}");
    for twice in ["gpt", "gpt*", "*"] {
        let err = Prices::builder()
            .model(twice, Price::per_million_tokens(1.0, 1.0))
            .model(twice, Price::per_million_tokens(2.0, 1.0))
            .build()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("price table entry `{twice}` is listed twice")
        );
    }

    let json = |text: &str| Prices::from_json(text).unwrap_err().to_string();
    assert_eq!(
        json(r#"[{"model": "a", "input": 1, "output": 1}, {"model": "b", "input": 1, "output": 1, "cache": 1}]"#)
            .split(':')
            .next(),
        Some("price table at `[1].cache`")
    );
    assert!(json(r#"[{"model": "a", "input": 1}]"#).contains("missing field `output`"));
    assert!(json(r#"[{"model": "a", "input": "1", "output": 1}]"#).contains("[0].input"));
    assert!(json(r#"{"a": {"input": 1, "output": 1}}"#).contains("expected a sequence"));
    assert!(json(r#"[{"model": "a", "input": -0.5, "output": 1}]"#).contains("is negative"));
    assert!(
        json(r#"[{"model": "", "input": 1, "output": 1}]"#).contains("entry 0 has an empty model")
    );
    assert!(json(
        r#"[{"model": "a", "input": 1, "output": 1}, {"model": "a", "input": 2, "output": 2}]"#
    )
    .contains("listed twice"));

    let good = Prices::from_json(
        r#"[{"model": "gpt-4o", "input": 2.5, "cached_input": 1.25, "output": 10},
            {"model": "gpt-4o-mini*", "input": 0.15, "output": 0.6},
            {"model": "*", "input": 1, "output": 1}]"#,
    )
    .unwrap();
    let usage = Usage::new(1_000_000, 0);
    assert_eq!(good.cost("gpt-4o", &usage), Some(Cost::from_cents(250)));
    assert_eq!(
        good.cost("gpt-4o-mini-2024", &usage),
        Some(Cost::from_cents(15))
    );
    assert_eq!(good.cost("other", &usage), Some(Cost::from_cents(100)));
}

#[tokio::test]
async fn a_tool_calls_span_records_the_tokens_its_output_adds_to_the_next_prompt() {
    let capture = Capture::default();
    let _guard = capture.install();
    // 41 bytes: 11 tokens at four bytes a token.
    let tool = tool::from_fn("echo", |_: serde_json::Value| async {
        Ok::<_, ToolError>("a result of forty-one bytes, give or take")
    });
    let traced = TraceLayer::new().layer(tool);
    let items: Vec<_> = traced
        .oneshot(ToolRequest::new("echo", "{}"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items.len(), 1);
    let span = capture.tool_span();
    assert_eq!(
        span.fields
            .get("toolstack.tool.result_tokens")
            .map(String::as_str),
        Some("11")
    );
}
