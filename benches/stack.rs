//! What a tool call costs, measured the way a model sees the result.
//!
//! Every case runs the typed `add` tool on the arguments as a model sends
//! them (`{"a": 1.5, "b": 2.25}`, a string) and ends with **the text the
//! model receives** (`{"sum":3.75}`: what the agent puts in the tool
//! message, `ToolResult::collect(stream).into_text()`), against the same
//! work written by hand, in the same run:
//!
//! * per call: hand-written; tower's `service_fn` + stock `Timeout` +
//!   `ConcurrencyLimit`; the typed tool called directly; through a
//!   `Toolbox`; through the toolbox with the README's stack; the stack plus
//!   `Validate`; and each layer alone over the toolbox, so a regression
//!   shows per layer;
//! * throughput: 64 tasks on a 2-thread runtime, hand-written against the
//!   README stack;
//! * streaming: 1,000,000 small items through the toolbox and the stack,
//!   against draining the bare stream;
//! * memory: 10,000 streaming calls held open, heap per call (bare toolbox,
//!   README stack);
//! * model calls: the spend limit over a model that answers at once, in
//!   memory and in Redis (on a `redis-server` the bench starts; skipped,
//!   loudly, when there is none).
//!
//! `cargo bench --bench stack` runs criterion on the per-call cases, then
//! prints the summary the README's figures come from: best of 7
//! interleaved rounds per case, ratios to the hand-written call of the same
//! round set, allocations per call from the counting allocator below. With
//! `-- --summary` only the summary runs; `-- --model` runs the model cases
//! only.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::Criterion;
use futures_util::{stream, FutureExt, Stream, StreamExt};
use toolstack::{
    tool, ToolAnnotations, ToolError, ToolItem, ToolOutput, ToolRequest, ToolResult, Toolbox,
};
use toolstack_layers::approval::ApprovalLayer;
use toolstack_layers::budget::{BudgetLayer, MemoryOutputStore};
use toolstack_layers::cache::CacheLayer;
use toolstack_layers::coalesce::CoalesceLayer;
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::guardrail::{Guardrail, GuardrailLayer, Verdict};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::repair::RepairLayer;
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::spend::{Limit, SpendLimitLayer, Window};
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Service, ServiceBuilder};

use toolstack_demo::add::{add, direct, Add, ARGS, TEXT};

// ---------------------------------------------------------------------------
// Counting allocator: allocations and live bytes, only while `COUNTING` is
// set (so the multi-threaded cases do not contend on the counters).

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_per_call(f: &mut dyn FnMut() -> String) -> f64 {
    const N: usize = 10_000;
    COUNTING.store(true, Ordering::SeqCst);
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..N {
        black_box(f());
    }
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    COUNTING.store(false, Ordering::SeqCst);
    (after - before) as f64 / N as f64
}

// ---------------------------------------------------------------------------
// The tool and the stacks.

/// A quota no benchmark reaches, and a permit count no benchmark exhausts:
/// the layers do all their work and never wait.
const NEVER: u32 = u32::MAX;
const PERMITS: usize = 1 << 20;

fn add_tool() -> impl toolstack::Describe
       + Service<
    ToolRequest,
    Response = impl Stream<Item = ToolItem> + Send + 'static,
    Error = ToolError,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    tool::from_fn(
        "add",
        |args: Add| async move { Ok::<_, ToolError>(add(args)) },
    )
    .with_description("Adds two numbers.")
    .with_annotations(ToolAnnotations::new().read_only())
}

/// An approver that allows every call at once.
fn allow(
    _: &toolstack::approval::ApprovalRequest,
) -> std::future::Ready<toolstack::approval::Decision> {
    std::future::ready(toolstack::approval::Decision::Allow)
}

/// One input and one output guardrail whose checks allow at once: the
/// layer's own cost (a check's subject, its boxed future, its span).
fn allowing_guardrails() -> GuardrailLayer {
    let allow = || Guardrail::from_fn("allow", |_| std::future::ready(Verdict::Allow));
    GuardrailLayer::new().input(allow()).output(allow())
}

fn timeouts() -> TimeoutLayer {
    TimeoutLayer::new()
        .deadline(Duration::from_secs(30))
        .first_item(Duration::from_secs(10))
        .idle(Duration::from_secs(5))
}

fn per_tool_quota() -> RateLimitLayer {
    RateLimitLayer::per_tool(Quota::per_second(NonZeroU32::new(NEVER).expect("non-zero")))
}

/// The README's stack (without `Validate`): trace (no subscriber),
/// catch-panic, timeout with its three bounds, retry, a per-tool rate limit
/// that never limits, a concurrency limit.
macro_rules! readme_stack {
    () => {
        ServiceBuilder::new()
            .stream_trace()
            .stream_catch_panic()
            .stream_timeout(timeouts())
            .stream_retry(RetryPolicy::new().max_attempts(3))
            .stream_rate_limit(per_tool_quota())
            .layer(ConcurrencyLimitLayer::new(PERMITS))
    };
}

/// The README's stack with `Validate` where the README puts it.
macro_rules! readme_stack_validated {
    () => {
        ServiceBuilder::new()
            .stream_trace()
            .stream_catch_panic()
            .stream_timeout(timeouts())
            .stream_validate()
            .stream_retry(RetryPolicy::new().max_attempts(3))
            .stream_rate_limit(per_tool_quota())
            .layer(ConcurrencyLimitLayer::new(PERMITS))
    };
}

fn stacked() -> Toolbox {
    Toolbox::new().layered(add_tool(), readme_stack!())
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(futures_util::task::noop_waker_ref())
}

fn ready<S: Service<ToolRequest>>(svc: &mut S) {
    match svc.poll_ready(&mut noop_cx()) {
        Poll::Ready(Ok(())) => {}
        _ => panic!("not ready"),
    }
}

/// What the agent does with a tool's response: collect it, take its text.
fn model_text<St: Stream<Item = ToolItem>>(stream: St) -> String {
    ToolResult::collect(stream)
        .now_or_never()
        .expect("ready")
        .into_text()
}

/// The request as the agent builds it from a model's tool call.
fn request() -> ToolRequest {
    ToolRequest::new("add", black_box(ARGS)).with_id("call_1")
}

/// One call of any tool service, to the text the model receives.
fn call_service<S>(svc: &mut S) -> String
where
    S: Service<ToolRequest>,
    S::Error: std::fmt::Debug,
    S::Response: Stream<Item = ToolItem>,
{
    ready(svc);
    let stream = svc
        .call(request())
        .now_or_never()
        .expect("ready")
        .expect("opened");
    model_text(stream)
}

fn call_toolbox(toolbox: &Toolbox) -> String {
    let stream = toolbox
        .dispatch(request())
        .now_or_never()
        .expect("ready")
        .expect("opened");
    model_text(stream)
}

/// tower's own `service_fn` doing the hand-written work, under tower's
/// stock `Timeout` and `ConcurrencyLimit`.
fn tower_stock() -> impl FnMut() -> String {
    let svc = tower::service_fn(|args: &'static str| async move {
        let parsed: Add = serde_json::from_str(args)?;
        serde_json::to_string(&add(parsed))
    });
    let mut svc = ServiceBuilder::new()
        .concurrency_limit(PERMITS)
        .timeout(Duration::from_secs(30))
        .service(svc);
    move || {
        match svc.poll_ready(&mut noop_cx()) {
            Poll::Ready(Ok(())) => {}
            _ => panic!("not ready"),
        }
        svc.call(black_box(ARGS))
            .now_or_never()
            .expect("ready")
            .expect("added")
    }
}

/// The per-call cases, in the order of the README's table.
/// A named per-call case: one call, to the text the model receives.
type Case = (&'static str, Box<dyn FnMut() -> String>);

fn cases() -> Vec<Case> {
    let mut typed = add_tool();
    let toolbox = Toolbox::new().tool(add_tool());
    let stack = stacked();
    let validated = Toolbox::new().layered(add_tool(), readme_stack_validated!());
    vec![
        ("hand-written", Box::new(|| direct(black_box(ARGS)))),
        (
            "tower service_fn + Timeout + ConcurrencyLimit",
            Box::new(tower_stock()),
        ),
        (
            "typed tool, called directly",
            Box::new(move || call_service(&mut typed)),
        ),
        (
            "typed tool through a Toolbox",
            Box::new(move || call_toolbox(&toolbox)),
        ),
        (
            "toolbox + README stack",
            Box::new(move || call_toolbox(&stack)),
        ),
        (
            "toolbox + README stack + Validate",
            Box::new(move || call_toolbox(&validated)),
        ),
    ]
}

/// Each layer alone over the tool, inside the toolbox (where requests carry
/// the tool's description, as retry and validate need).
fn layer_cases() -> Vec<Case> {
    fn one<T, L>(tool: T, layer: L) -> Box<dyn FnMut() -> String>
    where
        T: toolstack::Describe,
        L: tower::Layer<T>,
        L::Service: Service<ToolRequest> + Clone + Send + Sync + 'static,
        <L::Service as Service<ToolRequest>>::Error: Into<ToolError>,
        <L::Service as Service<ToolRequest>>::Future: Send + 'static,
        <L::Service as Service<ToolRequest>>::Response: Stream<Item = ToolItem> + Send + 'static,
    {
        let toolbox = Toolbox::new().layered(tool, layer);
        Box::new(move || call_toolbox(&toolbox))
    }
    let toolbox = Toolbox::new().tool(add_tool());
    vec![
        (
            "no layer (the toolbox)",
            Box::new(move || call_toolbox(&toolbox)),
        ),
        (
            "trace (no subscriber)",
            one(add_tool(), ServiceBuilder::new().stream_trace()),
        ),
        (
            "catch_panic",
            one(add_tool(), ServiceBuilder::new().stream_catch_panic()),
        ),
        (
            "timeout (3 bounds)",
            one(add_tool(), ServiceBuilder::new().stream_timeout(timeouts())),
        ),
        (
            "retry",
            one(
                add_tool(),
                ServiceBuilder::new().stream_retry(RetryPolicy::new()),
            ),
        ),
        (
            "rate_limit (per tool)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_rate_limit(per_tool_quota()),
            ),
        ),
        (
            "concurrency_limit",
            one(
                add_tool(),
                ServiceBuilder::new().layer(ConcurrencyLimitLayer::new(PERMITS)),
            ),
        ),
        (
            "validate",
            one(add_tool(), ServiceBuilder::new().stream_validate()),
        ),
        (
            "budget (never cuts)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_budget(BudgetLayer::new().max_items(1000)),
            ),
        ),
        (
            "budget keeping the output (never cuts)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_budget(
                    BudgetLayer::new()
                        .max_items(1000)
                        .keep(MemoryOutputStore::new(1 << 20, Duration::from_secs(3600))),
                ),
            ),
        ),
        (
            "coalesce",
            one(
                add_tool(),
                ServiceBuilder::new().stream_coalesce(CoalesceLayer::new()),
            ),
        ),
        (
            "repair (arguments valid)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_repair(RepairLayer::new()),
            ),
        ),
        (
            "approval (read-only: not asked)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_approval(ApprovalLayer::new(allow)),
            ),
        ),
        (
            "approval (asked, allowed)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_approval(ApprovalLayer::new(allow).when(|_| true)),
            ),
        ),
        (
            "approval (a policy allows)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_approval(
                    ApprovalLayer::new(allow)
                        .policy(|_| toolstack::approval::Policy::allow("reads are allowed")),
                ),
            ),
        ),
        (
            "guardrail (input and output allowed)",
            one(
                add_tool(),
                ServiceBuilder::new().stream_guardrail(allowing_guardrails()),
            ),
        ),
        (
            "cache (a hit)",
            one(
                add_tool(),
                ServiceBuilder::new()
                    .layer(CacheLayer::in_memory(1 << 20, Duration::from_secs(3600))),
            ),
        ),
        (
            "validate + cache (a hit)",
            one(
                add_tool(),
                ServiceBuilder::new()
                    .stream_validate()
                    .layer(CacheLayer::in_memory(1 << 20, Duration::from_secs(3600))),
            ),
        ),
    ]
}

/// A tool that answers with nothing, ready at once: the base for the
/// precise per-layer figures (a layer's own cost, without the tool's work
/// and the noise of a 300 ns call around it).
fn empty_tool() -> impl Service<
    ToolRequest,
    Response = impl Stream<Item = ToolItem> + Send + 'static,
    Error = ToolError,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(|_: ToolRequest| std::future::ready(Ok::<_, ToolError>(stream::empty())))
}

/// One call of a service over the empty tool: ready, call, open, drain.
///
/// The request is built per call, as the agent builds one per tool call: a
/// clone of one request would share its text, and with it what a layer
/// found out about the text on an earlier call.
fn call_empty<S>(svc: &mut S) -> String
where
    S: Service<ToolRequest>,
    S::Error: std::fmt::Debug,
    S::Response: Stream<Item = ToolItem>,
{
    ready(svc);
    let stream = svc
        .call(ToolRequest::new("empty", black_box("{}")))
        .now_or_never()
        .expect("ready")
        .expect("opened");
    assert_eq!(drain(stream), 0);
    String::new()
}

/// A call of a tool answering 20 rows of text under `budget`, which cuts
/// them to 10 (8, the notice, 2): the budget's cost when it cuts, the
/// rows' own included (compare the two cases that use it).
fn rows_cut(budget: BudgetLayer) -> Box<dyn FnMut() -> String> {
    let rows = tower::service_fn(|_: ToolRequest| {
        std::future::ready(Ok::<_, ToolError>(stream::iter(
            (0..20).map(|i| Ok(ToolOutput::text(format!("row {i}")))),
        )))
    });
    let mut svc = ServiceBuilder::new().stream_budget(budget).service(rows);
    Box::new(move || {
        ready(&mut svc);
        let stream = svc
            .call(ToolRequest::new("rows", black_box("{}")))
            .now_or_never()
            .expect("ready")
            .expect("opened");
        assert_eq!(drain(stream), 11);
        String::new()
    })
}

/// Each layer alone over the empty tool, called directly (no toolbox):
/// what the layer itself costs per call.
fn precise_layer_cases() -> Vec<Case> {
    fn one<S>(mut svc: S) -> Box<dyn FnMut() -> String>
    where
        S: Service<ToolRequest> + 'static,
        S::Error: std::fmt::Debug,
        S::Response: Stream<Item = ToolItem>,
    {
        Box::new(move || call_empty(&mut svc))
    }
    vec![
        ("empty tool", one(empty_tool())),
        (
            "trace (no subscriber)",
            one(ServiceBuilder::new().stream_trace().service(empty_tool())),
        ),
        (
            "catch_panic",
            one(ServiceBuilder::new()
                .stream_catch_panic()
                .service(empty_tool())),
        ),
        (
            "timeout (3 bounds)",
            one(ServiceBuilder::new()
                .stream_timeout(timeouts())
                .service(empty_tool())),
        ),
        (
            "retry",
            one(ServiceBuilder::new()
                .stream_retry(RetryPolicy::new())
                .service(empty_tool())),
        ),
        (
            "rate_limit (per tool)",
            one(ServiceBuilder::new()
                .stream_rate_limit(per_tool_quota())
                .service(empty_tool())),
        ),
        (
            "concurrency_limit",
            one(ServiceBuilder::new()
                .layer(ConcurrencyLimitLayer::new(PERMITS))
                .service(empty_tool())),
        ),
        (
            "budget (never cuts)",
            one(ServiceBuilder::new()
                .stream_budget(BudgetLayer::new().max_items(1000))
                .service(empty_tool())),
        ),
        (
            "budget keeping the output (never cuts)",
            one(ServiceBuilder::new()
                .stream_budget(
                    BudgetLayer::new()
                        .max_items(1000)
                        .keep(MemoryOutputStore::new(1 << 20, Duration::from_secs(3600))),
                )
                .service(empty_tool())),
        ),
        (
            "budget (cuts 20 rows to 10; the tool's rows)",
            rows_cut(BudgetLayer::new().max_items(10)),
        ),
        (
            "budget keeping the output (cuts 20 rows to 10; the tool's rows)",
            rows_cut(
                BudgetLayer::new()
                    .max_items(10)
                    .keep(MemoryOutputStore::new(1 << 20, Duration::from_secs(3600))),
            ),
        ),
        (
            "coalesce",
            one(ServiceBuilder::new()
                .stream_coalesce(CoalesceLayer::new())
                .service(empty_tool())),
        ),
        (
            "repair (arguments valid)",
            one(ServiceBuilder::new()
                .stream_repair(RepairLayer::new())
                .service(empty_tool())),
        ),
        (
            "approval (asked, allowed)",
            one(ServiceBuilder::new()
                .stream_approval(ApprovalLayer::new(allow))
                .service(empty_tool())),
        ),
        (
            "guardrail (input and output allowed)",
            one(ServiceBuilder::new()
                .stream_guardrail(allowing_guardrails())
                .service(empty_tool())),
        ),
        ("README stack", one(readme_stack!().service(empty_tool()))),
    ]
}

// ---------------------------------------------------------------------------
// Timing.

/// ns per call of each case: 7 rounds, each case measured for 100 ms in
/// every round (interleaved, so drift hits every case alike), best round.
fn measure(cases: &mut [Case]) -> Vec<f64> {
    let mut best = vec![f64::MAX; cases.len()];
    for _ in 0..7 {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            let mut n = 0u64;
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(100) {
                for _ in 0..500 {
                    black_box(f());
                }
                n += 500;
            }
            best[i] = best[i].min(start.elapsed().as_nanos() as f64 / n as f64);
        }
    }
    best
}

/// Measures `cases` and prints them as a table: name, ns/call, the
/// comparison `compare(ns, i)` with the first case, allocations per call.
/// Returns the ns/call figures.
fn table(
    title: &str,
    columns: &str,
    cases: &mut [Case],
    compare: impl Fn(&[f64], usize) -> String,
) -> Vec<f64> {
    let ns = measure(cases);
    println!("\n## {title}\n");
    println!("{columns}");
    println!("|---|---|---|---|");
    for (i, (name, f)) in cases.iter_mut().enumerate() {
        let allocs = allocations_per_call(f.as_mut());
        println!(
            "| {name} | {:.1} | {} | {allocs:.1} |",
            ns[i],
            compare(&ns, i)
        );
    }
    ns
}

/// Runs each case once and checks it answers the model's text.
fn checked(mut cases: Vec<Case>) -> Vec<Case> {
    for (name, f) in cases.iter_mut() {
        assert_eq!(f(), TEXT, "{name}");
    }
    cases
}

fn per_call_summary() {
    let ns = table(
        "per call (best of 7 interleaved rounds; × hand-written in this run)",
        "| path | ns/call | × hand-written | allocations/call |",
        &mut checked(cases()),
        |ns, i| format!("{:.2}×", ns[i] / ns[0]),
    );
    let stack = ns[4];
    println!(
        "\nValidate on top of the README stack: +{:.2}× hand-written (+{:.1} ns)",
        (ns[5] - stack) / ns[0],
        ns[5] - stack
    );
    table(
        "each layer alone over the tool, in a toolbox",
        "| layer | ns/call | + ns over no layer | allocations/call |",
        &mut checked(layer_cases()),
        |ns, i| format!("{:+.1}", ns[i] - ns[0]),
    );
}

/// A model that answers every call at once: one text delta, usage.
fn instant_model() -> impl Service<
    toolstack::model::ChatRequest,
    Response = impl Stream<Item = Result<toolstack::model::ModelDelta, toolstack::ToolError>>,
    Error = toolstack::ToolError,
> + Clone {
    use toolstack::model::{ModelDelta, Usage};
    tower::service_fn(|_: toolstack::model::ChatRequest| {
        let answer = stream::iter([
            Ok(ModelDelta::Text(TEXT.to_owned())),
            Ok(ModelDelta::Usage(Usage::new(1_000, 100))),
        ]);
        std::future::ready(Ok::<_, toolstack::ToolError>(answer))
    })
}

/// The text deltas of [`streaming_model`]'s answer, and each one's text:
/// an answer of about 250 tokens, streamed as a provider streams one.
const DELTAS: usize = 64;
const PIECE: &str = "a streamed word ";

/// A model that answers every call at once with [`DELTAS`] text deltas,
/// then the usage: what a layer's cost per delta shows on (the spend
/// limit counts an answer's output as it streams).
fn streaming_model() -> impl Service<
    toolstack::model::ChatRequest,
    Response = impl Stream<Item = Result<toolstack::model::ModelDelta, toolstack::ToolError>>,
    Error = toolstack::ToolError,
> + Clone {
    use toolstack::model::{ModelDelta, Usage};
    tower::service_fn(|_: toolstack::model::ChatRequest| {
        let text = (0..DELTAS).map(|_| Ok(ModelDelta::Text(PIECE.to_owned())));
        let answer = stream::iter(text.chain([Ok(ModelDelta::Usage(Usage::new(1_000, 250)))]));
        std::future::ready(Ok::<_, toolstack::ToolError>(answer))
    })
}

/// The check of a streamed answer's text, then the text the other cases
/// answer (so that every case passes `checked`).
fn streamed(text: String) -> String {
    assert_eq!(text.len(), DELTAS * PIECE.len());
    TEXT.to_owned()
}

/// One model call, read to its end (the last delta, where the spend limit
/// settles the call): the answer's text.
async fn model_call<S>(model: &mut S, request: &toolstack::model::ChatRequest) -> String
where
    S: Service<
        toolstack::model::ChatRequest,
        Response: Stream<Item = Result<toolstack::model::ModelDelta, toolstack::ToolError>>,
        Error = toolstack::ToolError,
    >,
{
    std::future::poll_fn(|cx| model.poll_ready(cx))
        .await
        .expect("ready");
    let answer = model.call(request.clone()).await.expect("answered");
    let deltas: Vec<_> = answer.collect().await;
    deltas
        .into_iter()
        .filter_map(|d| match d {
            Ok(toolstack::model::ModelDelta::Text(text)) => Some(text),
            _ => None,
        })
        .collect()
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Caller(u64);

/// The spend limit of the model cases: a run's and a caller's day, neither
/// reached.
fn spend_limit() -> SpendLimitLayer {
    let prices = toolstack::model::Prices::builder()
        .model("m", toolstack::model::Price::per_million_tokens(1.0, 2.0))
        .build()
        .expect("a good table");
    SpendLimitLayer::new(prices)
        .per_run(Limit::tokens(u64::MAX))
        .per_caller::<Caller>(Window::Day, Limit::tokens(u64::MAX))
}

fn model_request() -> toolstack::model::ChatRequest {
    toolstack::model::ChatRequest::new(vec![])
        .with_model("m")
        .with_extension(toolstack::model::RunId::new("run"))
        .with_extension(Caller(7))
}

/// Model calls: the spend limit in memory, under its limits, over a model
/// that answers at once; then (when `redis-server` can be started) the
/// same limit in Redis.
fn model_cases() -> Vec<Case> {
    let request = model_request();
    let mut bare = instant_model();
    let mut limited = ServiceBuilder::new()
        .layer(spend_limit())
        .service(instant_model());
    let mut bare_streaming = streaming_model();
    let mut limited_streaming = ServiceBuilder::new()
        .layer(spend_limit())
        .service(streaming_model());
    let (second, third, fourth) = (request.clone(), request.clone(), request.clone());
    let mut cases: Vec<Case> = vec![
        (
            "model answering at once",
            Box::new(move || {
                model_call(&mut bare, &request)
                    .now_or_never()
                    .expect("ready")
            }),
        ),
        (
            "spend limit (in memory, under its limit)",
            Box::new(move || {
                model_call(&mut limited, &second)
                    .now_or_never()
                    .expect("ready")
            }),
        ),
        (
            STREAMING_MODEL,
            Box::new(move || {
                streamed(
                    model_call(&mut bare_streaming, &third)
                        .now_or_never()
                        .expect("ready"),
                )
            }),
        ),
        (
            "spend limit (in memory, under its limit), 64 deltas",
            Box::new(move || {
                streamed(
                    model_call(&mut limited_streaming, &fourth)
                        .now_or_never()
                        .expect("ready"),
                )
            }),
        ),
    ];
    cases.extend(redis_model_cases());
    cases
}

/// The spend limit in Redis, on a `redis-server` of the bench's own (over
/// loopback, one connection), next to a bare `PING` on the same connection:
/// a call is admitted by one script and settled by another before its
/// answer's end is passed on, so its cost is about two round trips. Empty,
/// with a SKIPPED line on stderr, when no `redis-server` can be started.
fn redis_model_cases() -> Vec<Case> {
    use redis::aio::{ConnectionManager, ConnectionManagerConfig};
    use toolstack_demo::redis_server::RedisProcess;
    use toolstack_layers::spend::RedisSpend;

    let skipped = |why: &dyn std::fmt::Display| {
        eprintln!(
            "\n*** SKIPPED: the spend limit in Redis (the model cases' Redis rows): {why} ***\n"
        );
        Vec::new()
    };
    let server = match RedisProcess::start("bench-spend") {
        Ok(server) => server,
        Err(err) => return skipped(&err),
    };
    // The connection's I/O runs on this runtime, driven by each call's
    // `block_on`.
    let runtime = std::rc::Rc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    );
    // Generous timeouts: a call that fails fails the bench (the limit is
    // closed), rather than being measured on the fallback.
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let client = match redis::Client::open(server.url()) {
        Ok(client) => client,
        Err(err) => return skipped(&err),
    };
    let manager = match runtime.block_on(ConnectionManager::new_with_config(client, config)) {
        Ok(manager) => manager,
        Err(err) => return skipped(&err),
    };
    let server = std::rc::Rc::new(server);
    let mut limited = ServiceBuilder::new()
        .layer(
            spend_limit().redis(
                RedisSpend::new(manager.clone())
                    .prefix("bench:spend")
                    .timeout(Duration::from_secs(5))
                    .fail_closed(),
            ),
        )
        .service(instant_model());
    let mut limited_streaming = ServiceBuilder::new()
        .layer(
            spend_limit().redis(
                RedisSpend::new(manager.clone())
                    .prefix("bench:spend:streaming")
                    .timeout(Duration::from_secs(5))
                    .fail_closed(),
            ),
        )
        .service(streaming_model());
    let request = model_request();
    let second = request.clone();
    let mut ping = manager;
    let (on, also) = (std::rc::Rc::clone(&runtime), std::rc::Rc::clone(&server));
    let (on_too, held_too) = (std::rc::Rc::clone(&runtime), std::rc::Rc::clone(&server));
    vec![
        (
            "Redis PING (one round trip; the Redis rows' yardstick)",
            Box::new(move || {
                let _held = &also;
                let pong: String = on
                    .block_on(redis::cmd("PING").query_async(&mut ping))
                    .expect("PONG");
                assert_eq!(pong, "PONG");
                TEXT.to_owned()
            }),
        ),
        (
            "spend limit (in Redis, under its limit)",
            Box::new(move || {
                let _held = &server;
                runtime.block_on(model_call(&mut limited, &request))
            }),
        ),
        (
            "spend limit (in Redis, under its limit), 64 deltas",
            Box::new(move || {
                let _held = &held_too;
                streamed(on_too.block_on(model_call(&mut limited_streaming, &second)))
            }),
        ),
    ]
}

const STREAMING_MODEL: &str = "model streaming 64 deltas at once";

fn model_summary() {
    let mut cases = checked(model_cases());
    let ns = table(
        "a model call through a layer",
        "| layer | ns/call | + ns over the model answering at once | allocations/call |",
        &mut cases,
        |ns, i| format!("{:+.1}", ns[i] - ns[0]),
    );
    let at = |name: &str| {
        cases
            .iter()
            .position(|(case, _)| *case == name)
            .map(|i| ns[i])
    };
    let (Some(model), Some(memory), Some(streaming), Some(memory_streaming)) = (
        at("model answering at once"),
        at("spend limit (in memory, under its limit)"),
        at(STREAMING_MODEL),
        at("spend limit (in memory, under its limit), 64 deltas"),
    ) else {
        return;
    };
    println!(
        "\nspend limit in memory: +{:.0} ns, {:.2}× the model answering at once; \
         +{:.0} ns over a {DELTAS}-delta answer",
        memory - model,
        memory / model,
        memory_streaming - streaming,
    );
    if let (Some(ping), Some(redis), Some(redis_streaming)) = (
        at("Redis PING (one round trip; the Redis rows' yardstick)"),
        at("spend limit (in Redis, under its limit)"),
        at("spend limit (in Redis, under its limit), 64 deltas"),
    ) {
        println!(
            "spend limit in Redis: {:.1} µs/call, {:.2}× a PING round trip; \
             +{:.1} µs over a {DELTAS}-delta answer",
            redis / 1e3,
            redis / ping,
            (redis_streaming - streaming) / 1e3,
        );
    }
}

fn precise_layer_summary() {
    table(
        "each layer alone over an empty tool, called directly",
        "| layer | ns/call | + ns over the empty tool | allocations/call |",
        &mut precise_layer_cases(),
        |ns, i| format!("{:+.1}", ns[i] - ns[0]),
    );
    #[cfg(feature = "http")]
    signing_summary();
}

/// What a signed approval adds where it is made (the AI SDK endpoint signs
/// each request and verifies each answer): next to the hand-written call.
/// (Feature `http`, which the endpoint and its signatures need.)
#[cfg(feature = "http")]
fn signing_summary() {
    let keys = toolstack::approval::ApprovalKeys::new("k1", [7u8; 32]).expect("a key");
    let arguments = r#"{"sql": "DELETE FROM rows WHERE day < 20200101", "limit": 100}"#;
    let approval_id = "0123456789abcdef0123456789abcdef:call_0_0";
    let signature = keys.sign(approval_id, "call_0_0", "execute_sql", arguments);
    let signer = keys.clone();
    let cases: Vec<Case> = vec![
        ("hand-written call", Box::new(|| direct(black_box(ARGS)))),
        (
            "sign an approval request",
            Box::new(move || {
                signer.sign(approval_id, "call_0_0", "execute_sql", black_box(arguments))
            }),
        ),
        (
            "verify an answer",
            Box::new(move || {
                let verified = keys.verify(
                    &signature,
                    approval_id,
                    "call_0_0",
                    "execute_sql",
                    black_box(arguments),
                );
                verified.expect("it verifies").to_owned()
            }),
        ),
    ];
    table(
        "a signed approval, once per request and once per answer",
        "| step | ns | × the hand-written call | allocations |",
        &mut { cases },
        |ns, i| format!("{:.2}×", ns[i] / ns[0]),
    );
}

// ---------------------------------------------------------------------------
// Throughput: 64 tasks on 2 worker threads.

const TASKS: usize = 64;
const CALLS_PER_TASK: usize = 20_000;

fn throughput<F, Fut>(runtime: &tokio::runtime::Runtime, make_task: F) -> f64
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    runtime.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS).map(|_| tokio::spawn(make_task())).collect();
        for task in tasks {
            task.await.expect("task");
        }
        (TASKS * CALLS_PER_TASK) as f64 / start.elapsed().as_secs_f64()
    })
}

fn throughput_summary() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let hand = || async {
        for i in 0..CALLS_PER_TASK {
            black_box(direct(black_box(ARGS)));
            if i % 16 == 0 {
                tokio::task::yield_now().await;
            }
        }
    };
    // tower's own two layers, one limit shared by all the tasks (each task
    // holds a clone, as each of a server's connections would).
    let (tower_stock, stack, toolbox) = runtime.block_on(async {
        let svc = tower::service_fn(|args: &'static str| async move {
            let parsed: Add = serde_json::from_str(args)?;
            serde_json::to_string(&add(parsed))
        });
        let stock = ServiceBuilder::new()
            .concurrency_limit(PERMITS)
            .timeout(Duration::from_secs(30))
            .service(svc);
        (stock, stacked(), Toolbox::new().tool(add_tool()))
    });
    let tower = || {
        let mut svc = tower_stock.clone();
        async move {
            for i in 0..CALLS_PER_TASK {
                let text = tower::ServiceExt::ready(&mut svc)
                    .await
                    .expect("ready")
                    .call(black_box(ARGS))
                    .await
                    .expect("added");
                black_box(text);
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    };
    let through = |toolbox: &Toolbox| {
        let toolbox = toolbox.clone();
        async move {
            for i in 0..CALLS_PER_TASK {
                // The agent's path: `dispatch(&self)`, no toolbox clone.
                let stream = toolbox.dispatch(request()).await.expect("opened");
                let text = ToolResult::collect(stream).await.into_text();
                black_box(text);
                if i % 16 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    };
    let mut best = [0f64; 4];
    for _ in 0..5 {
        best[0] = best[0].max(throughput(&runtime, hand));
        best[1] = best[1].max(throughput(&runtime, tower));
        best[2] = best[2].max(throughput(&runtime, || through(&toolbox)));
        best[3] = best[3].max(throughput(&runtime, || through(&stack)));
    }
    println!("\n## throughput, {TASKS} tasks on 2 worker threads (best of 5)\n");
    println!("| path | calls/s | × hand-written |");
    println!("|---|---|---|");
    let names = [
        "hand-written",
        "tower service_fn + Timeout + ConcurrencyLimit",
        "typed tool through a Toolbox",
        "toolbox + README stack",
    ];
    for (name, calls) in names.iter().zip(best) {
        println!("| {name} | {calls:.0} | {:.2}× |", calls / best[0]);
    }
}

// ---------------------------------------------------------------------------
// Streaming: 1,000,000 small items.

const ITEMS: u64 = 1_000_000;

fn items() -> impl Stream<Item = ToolItem> + Send + 'static {
    stream::iter((0..ITEMS).map(|i| Ok(ToolOutput::json(serde_json::Value::from(i)))))
}

fn items_tool() -> impl Service<
    ToolRequest,
    Response = impl Stream<Item = ToolItem> + Send + 'static,
    Error = ToolError,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    tower::service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(items()) })
}

/// Drains a stream whose items are always ready; returns how many came.
fn drain<St: Stream<Item = ToolItem>>(stream: St) -> u64 {
    let mut stream = pin!(stream);
    let mut cx = noop_cx();
    let mut n = 0;
    while let Poll::Ready(Some(item)) = stream.as_mut().poll_next(&mut cx) {
        black_box(item.is_ok());
        n += 1;
    }
    n
}

fn streaming_summary() {
    let info =
        || toolstack::ToolInfo::new("items").with_annotations(ToolAnnotations::new().read_only());
    let toolbox = Toolbox::new().service(info(), items_tool());
    let stack = Toolbox::new().service(info(), readme_stack!().service(items_tool()));
    let through = |toolbox: &Toolbox| {
        let stream = toolbox
            .dispatch(ToolRequest::new("items", "{}"))
            .now_or_never()
            .expect("ready")
            .expect("opened");
        drain(stream)
    };
    let mut best = [f64::MAX; 3];
    for _ in 0..5 {
        for (i, best) in best.iter_mut().enumerate() {
            let start = Instant::now();
            let n = match i {
                0 => drain(items()),
                1 => through(&toolbox),
                _ => through(&stack),
            };
            assert_eq!(n, ITEMS);
            *best = best.min(start.elapsed().as_nanos() as f64 / ITEMS as f64);
        }
    }
    if std::env::args().any(|a| a == "--stream") {
        // Per layer, for finding which one costs per item.
        let only = std::env::var("STREAM_ONLY").ok();
        let per = |name: &str, toolbox: Toolbox| {
            if only.as_deref().is_some_and(|o| o != name) {
                return;
            }
            let best = (0..3)
                .map(|_| {
                    let start = Instant::now();
                    assert_eq!(through(&toolbox), ITEMS);
                    start.elapsed().as_nanos() as f64 / ITEMS as f64
                })
                .fold(f64::MAX, f64::min);
            println!("{name:<24} {best:.2} ns/item");
        };
        per(
            "concurrency",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .layer(ConcurrencyLimitLayer::new(PERMITS))
                    .service(items_tool()),
            ),
        );
        per("toolbox", Toolbox::new().service(info(), items_tool()));
        per(
            "trace",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new().stream_trace().service(items_tool()),
            ),
        );
        per(
            "catch_panic",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_catch_panic()
                    .service(items_tool()),
            ),
        );
        per(
            "timeout",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_timeout(timeouts())
                    .service(items_tool()),
            ),
        );
        per(
            "retry",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_retry(RetryPolicy::new())
                    .service(items_tool()),
            ),
        );
        per(
            "rate_limit",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_rate_limit(per_tool_quota())
                    .service(items_tool()),
            ),
        );
        per(
            "budget (never cuts)",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_budget(BudgetLayer::new().max_items(ITEMS as usize))
                    .service(items_tool()),
            ),
        );
        per(
            "coalesce (JSON items)",
            Toolbox::new().service(
                info(),
                ServiceBuilder::new()
                    .stream_coalesce(CoalesceLayer::new())
                    .service(items_tool()),
            ),
        );
        if only.as_deref().is_none_or(|o| o == "coalesce (text items)") {
            // Small text items, all ready at once: merged into 4 KiB items.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime");
            let _entered = runtime.enter();
            let best = (0..3)
                .map(|_| {
                    let texts = stream::iter((0..ITEMS).map(|_| Ok(ToolOutput::text("word "))));
                    let start = Instant::now();
                    let out = drain(toolstack_layers::coalesce::Coalesced::new(texts));
                    assert!(out < ITEMS / 100, "{out} items out");
                    start.elapsed().as_nanos() as f64 / ITEMS as f64
                })
                .fold(f64::MAX, f64::min);
            let bare = (0..3)
                .map(|_| {
                    let texts = stream::iter((0..ITEMS).map(|_| Ok(ToolOutput::text("word "))));
                    let start = Instant::now();
                    assert_eq!(drain(texts), ITEMS);
                    start.elapsed().as_nanos() as f64 / ITEMS as f64
                })
                .fold(f64::MAX, f64::min);
            println!(
                "{:<24} {best:.2} ns/item in (bare text stream {bare:.2})",
                "coalesce (text items)"
            );
        }
        if only.is_some() {
            return;
        }
    }
    println!("\n## {ITEMS} items streamed (best of 5)\n");
    println!("| path | ns/item | M items/s | × the bare stream's items/s |");
    println!("|---|---|---|---|");
    for (name, ns) in [
        ("bare stream", best[0]),
        ("through a Toolbox", best[1]),
        ("through the toolbox + README stack", best[2]),
    ] {
        println!(
            "| {name} | {ns:.2} | {:.1} | {:.2}× |",
            1e3 / ns,
            best[0] / ns
        );
    }
}

// ---------------------------------------------------------------------------
// Memory: 10,000 streaming calls held open.

const HELD: usize = 10_000;

fn held_tool() -> impl toolstack::Describe
       + Service<
    ToolRequest,
    Response = impl Stream<Item = ToolItem> + Send + 'static,
    Error = ToolError,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    // A streaming tool that has begun answering (its call opens at its
    // first item) and waits.
    tool::from_stream("held", |_: serde_json::Value| {
        stream::iter([Ok::<_, ToolError>(String::from("begun"))]).chain(stream::pending())
    })
    .with_annotations(ToolAnnotations::new().read_only())
}

/// Heap bytes per call while `HELD` calls are open, each polled once.
fn heap_per_held_call(toolbox: &Toolbox) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut streams = Vec::with_capacity(HELD);
        COUNTING.store(true, Ordering::SeqCst);
        let before = LIVE_BYTES.load(Ordering::SeqCst);
        for _ in 0..HELD {
            let mut stream = toolbox
                .dispatch(ToolRequest::new("held", "{}").with_id("call_1"))
                .await
                .expect("opened");
            std::future::poll_fn(|cx| {
                assert!(matches!(
                    stream.poll_next_unpin(cx),
                    Poll::Ready(Some(Ok(_)))
                ));
                assert!(stream.poll_next_unpin(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            streams.push(stream);
        }
        let after = LIVE_BYTES.load(Ordering::SeqCst);
        COUNTING.store(false, Ordering::SeqCst);
        drop(streams);
        (after - before) as f64 / HELD as f64
    })
}

fn memory_summary() {
    let bare = Toolbox::new().tool(held_tool());
    let stack = Toolbox::new().layered(held_tool(), readme_stack!());
    println!("\n## {HELD} streaming calls held open\n");
    println!("| path | heap bytes per open call |");
    println!("|---|---|");
    println!("| toolbox | {:.0} |", heap_per_held_call(&bare));
    println!(
        "| toolbox + README stack | {:.0} |",
        heap_per_held_call(&stack)
    );
}

// ---------------------------------------------------------------------------

/// `-- --sizes`: the bytes each layer's service, future and stream take
/// (moved on every call and poll).
fn sizes() {
    fn show<S: Service<ToolRequest>>(name: &str, mut svc: S)
    where
        S::Error: std::fmt::Debug,
    {
        ready(&mut svc);
        let fut = svc.call(request());
        let service = std::mem::size_of_val(&svc);
        let future = std::mem::size_of_val(&fut);
        let stream = fut.now_or_never().expect("ready").expect("opened");
        println!(
            "{name:<24} service {service:>4} B  future {future:>4} B  stream {:>4} B",
            std::mem::size_of_val(&stream)
        );
    }
    println!(
        "ToolRequest {} B, ToolOutput {} B, ToolItem {} B, ToolResult {} B",
        std::mem::size_of::<ToolRequest>(),
        std::mem::size_of::<ToolOutput>(),
        std::mem::size_of::<ToolItem>(),
        std::mem::size_of::<ToolResult>()
    );
    show("tool", add_tool());
    show(
        "trace",
        ServiceBuilder::new().stream_trace().service(add_tool()),
    );
    show(
        "catch_panic",
        ServiceBuilder::new()
            .stream_catch_panic()
            .service(add_tool()),
    );
    show(
        "timeout",
        ServiceBuilder::new()
            .stream_timeout(timeouts())
            .service(add_tool()),
    );
    show(
        "retry",
        ServiceBuilder::new()
            .stream_retry(RetryPolicy::new())
            .service(add_tool()),
    );
    show(
        "rate_limit",
        ServiceBuilder::new()
            .stream_rate_limit(per_tool_quota())
            .service(add_tool()),
    );
    show(
        "concurrency",
        ServiceBuilder::new()
            .layer(ConcurrencyLimitLayer::new(PERMITS))
            .service(add_tool()),
    );
    show("README stack", readme_stack!().service(add_tool()));
}

fn criterion_cases(c: &mut Criterion) {
    let mut group = c.benchmark_group("call");
    for (name, mut f) in cases() {
        group.bench_function(name, |b| b.iter(&mut f));
    }
    group.finish();
    let mut group = c.benchmark_group("layer");
    for (name, mut f) in layer_cases() {
        group.bench_function(name, |b| b.iter(&mut f));
    }
    group.finish();
}

fn main() {
    // tower's `Timeout` arms a timer on every call, which needs a runtime;
    // toolstack's timeout arms one only when a tool waits.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _entered = runtime.enter();
    let args: Vec<String> = std::env::args().collect();
    // `-- --profile NAME`: loop the per-call case whose name contains NAME
    // for 10 s, for `perf record`.
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let wanted = &args[i + 1];
        let mut all = cases();
        all.extend(layer_cases());
        // Named `precise NAME`.
        all.extend(
            precise_layer_cases()
                .into_iter()
                .map(|(name, f)| (&*format!("precise {name}").leak(), f)),
        );
        let (name, f) = all
            .iter_mut()
            .find(|(name, _)| name.contains(wanted.as_str()))
            .expect("a case of that name");
        eprintln!("profiling {name}");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            for _ in 0..1000 {
                black_box(f());
            }
        }
        return;
    }
    if args.iter().any(|a| a == "--stream") {
        streaming_summary();
        return;
    }
    if args.iter().any(|a| a == "--layers") {
        precise_layer_summary();
        model_summary();
        return;
    }
    // `-- --model`: the model cases only (the spend limit, in memory and
    // in Redis).
    if args.iter().any(|a| a == "--model") {
        model_summary();
        return;
    }
    if args.iter().any(|a| a == "--throughput") {
        throughput_summary();
        return;
    }
    if args.iter().any(|a| a == "--sizes") {
        sizes();
        return;
    }
    // `-- --calls`: the per-call tables only (a quick look while working).
    if args.iter().any(|a| a == "--calls") {
        per_call_summary();
        return;
    }
    let summary_only = args.iter().any(|a| a == "--summary");
    if !summary_only {
        let mut c = Criterion::default().configure_from_args();
        criterion_cases(&mut c);
        c.final_summary();
    }
    per_call_summary();
    precise_layer_summary();
    model_summary();
    throughput_summary();
    streaming_summary();
    memory_summary();
}
