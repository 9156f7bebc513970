//! The cost of the stream-aware layers.
//!
//! Per call: the add tool direct (hand-written parse → fn → serialize), the
//! bare typed tool, the typed tool under the full stack (Trace with no
//! subscriber + Timeout with all three bounds + Retry + RateLimit with a
//! quota that never limits + ConcurrencyLimit), and for reference tower's
//! own `service_fn` + stock Timeout + ConcurrencyLimit.
//!
//! Per item: 1,000,000 small items through the same stack against the bare
//! stream.
//!
//! `cargo bench --bench layers` runs criterion, then prints a summary of
//! ratios measured in the same run.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use futures_util::{stream, FutureExt, Stream, StreamExt};
use toolstack::{tool, ToolAnnotations, ToolError, ToolItem, ToolOutput, ToolRequest};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{Service, ServiceBuilder};

use toolstack_demo::add::{add, direct, Add, ARGS};

const ITEMS: u64 = 1_000_000;

/// Wraps a tool in the full stack of this crate's layers.
macro_rules! full_stack {
    ($tool:expr) => {
        ServiceBuilder::new()
            .stream_trace()
            .stream_timeout(
                TimeoutLayer::new()
                    .deadline(Duration::from_secs(30))
                    .first_item(Duration::from_secs(10))
                    .idle(Duration::from_secs(5)),
            )
            .stream_retry(RetryPolicy::new())
            .stream_rate_limit(RateLimitLayer::global(Quota::per_second(NonZeroU32::MAX)))
            .stream_concurrency_limit(1024)
            .service($tool)
    };
}

fn ready<S: Service<ToolRequest>>(svc: &mut S) {
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => panic!("not ready"),
    }
}

/// One call: ready, call, open, first item as JSON text.
fn call_once<S>(svc: &mut S, req: &ToolRequest) -> String
where
    S: Service<ToolRequest>,
    S::Error: std::fmt::Debug,
    S::Response: Stream<Item = ToolItem>,
{
    ready(svc);
    let stream = svc
        .call(req.clone())
        .now_or_never()
        .expect("ready")
        .expect("opened");
    let mut stream = pin!(stream);
    match stream.next().now_or_never().expect("ready") {
        Some(Ok(ToolOutput::Json { value })) => serde_json::to_string(&value).expect("json"),
        other => panic!("unexpected item {other:?}"),
    }
}

fn add_tool() -> impl Service<
    ToolRequest,
    Response = impl Stream<Item = ToolItem>,
    Error = ToolError,
    Future = impl Send,
> + Clone {
    tool::from_fn(
        "add",
        |args: Add| async move { Ok::<_, ToolError>(add(args)) },
    )
    .annotations(ToolAnnotations::new().read_only())
}

fn tower_stock() -> impl FnMut(&ToolRequest) -> String {
    let svc = tower::service_fn(|req: ToolRequest| async move {
        let parsed: Add = serde_json::from_str(req.arguments())
            .map_err(|e| ToolError::invalid_arguments(e.to_string()))?;
        Ok::<_, ToolError>(stream::once(async move {
            Ok::<_, ToolError>(ToolOutput::json(add(parsed).into()))
        }))
    });
    let mut svc = ServiceBuilder::new()
        .concurrency_limit(1024)
        .timeout(Duration::from_secs(30))
        .service(svc);
    move |req| call_once(&mut svc, req)
}

fn items_tool(
) -> impl Service<ToolRequest, Response = impl Stream<Item = ToolItem>, Error = ToolError> + Clone {
    tower::service_fn(|_: ToolRequest| async { Ok::<_, ToolError>(items()) })
}

fn items() -> impl Stream<Item = ToolItem> {
    stream::iter((0..ITEMS).map(|i| Ok(ToolOutput::json(i.into()))))
}

/// Drains a stream whose items are always ready; returns how many came.
fn drain<St: Stream<Item = ToolItem>>(stream: St) -> u64 {
    let mut stream = pin!(stream);
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    let mut n = 0;
    while let Poll::Ready(Some(item)) = stream.as_mut().poll_next(&mut cx) {
        black_box(item.is_ok());
        n += 1;
    }
    n
}

fn drain_through_stack() -> u64 {
    let mut svc = full_stack!(items_tool());
    ready(&mut svc);
    let stream = svc
        .call(ToolRequest::new("items", "{}"))
        .now_or_never()
        .expect("ready")
        .expect("opened");
    drain(stream)
}

fn bench(c: &mut Criterion) {
    let req = ToolRequest::new("add", ARGS).with_id("call_1");
    let mut bare = add_tool();
    let mut stacked = full_stack!(add_tool());
    let mut stock = tower_stock();
    assert_eq!(direct(ARGS), "3");
    assert_eq!(call_once(&mut bare, &req), "3");
    assert_eq!(call_once(&mut stacked, &req), "3");
    assert_eq!(stock(&req), "3");

    let mut group = c.benchmark_group("layers");
    group.bench_function("direct", |b| b.iter(|| direct(black_box(ARGS))));
    group.bench_function("bare_tool", |b| {
        b.iter(|| call_once(&mut bare, black_box(&req)))
    });
    group.bench_function("full_stack", |b| {
        b.iter(|| call_once(&mut stacked, black_box(&req)))
    });
    group.bench_function("tower_stock", |b| b.iter(|| stock(black_box(&req))));
    group.finish();

    let mut group = c.benchmark_group("stream_1m_items");
    group.sample_size(10);
    group.bench_function("bare_stream", |b| b.iter(|| drain(items())));
    group.bench_function("full_stack", |b| b.iter(drain_through_stack));
    group.finish();
}

fn best_of(rounds: usize, mut f: impl FnMut() -> (Duration, u64)) -> f64 {
    (0..rounds)
        .map(|_| {
            let (elapsed, n) = f();
            elapsed.as_nanos() as f64 / n as f64
        })
        .fold(f64::MAX, f64::min)
}

fn ns_per_call(mut f: impl FnMut()) -> f64 {
    best_of(7, || {
        let mut n = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(150) {
            for _ in 0..1000 {
                f();
            }
            n += 1000;
        }
        (start.elapsed(), n)
    })
}

fn summary() {
    let req = ToolRequest::new("add", ARGS).with_id("call_1");
    let mut bare = add_tool();
    let mut stacked = full_stack!(add_tool());
    let mut stock = tower_stock();
    let base = ns_per_call(|| {
        black_box(direct(black_box(ARGS)));
    });
    let bare_ns = ns_per_call(|| {
        black_box(call_once(&mut bare, black_box(&req)));
    });
    let stack_ns = ns_per_call(|| {
        black_box(call_once(&mut stacked, black_box(&req)));
    });
    let stock_ns = ns_per_call(|| {
        black_box(stock(black_box(&req)));
    });
    println!("\nsummary, per call (best of 7 rounds; ratio to the direct call in this run)");
    println!("{:<40} {:>9} {:>7}", "variant", "ns/call", "ratio");
    for (name, ns) in [
        ("direct (parse → fn → serialize)", base),
        ("typed tool, no layer", bare_ns),
        ("typed tool, full stack", stack_ns),
        ("tower service_fn + Timeout + ConcLimit", stock_ns),
    ] {
        println!("{name:<40} {ns:>9.1} {:>7.2}", ns / base);
    }
    println!(
        "full stack over the bare typed tool: {:.2}x (+{:.1} ns)",
        stack_ns / bare_ns,
        stack_ns - bare_ns
    );

    let bare_stream = best_of(5, || {
        let start = Instant::now();
        let n = drain(items());
        (start.elapsed(), n)
    });
    let stacked_stream = best_of(5, || {
        let start = Instant::now();
        let n = drain_through_stack();
        (start.elapsed(), n)
    });
    println!("\nsummary, {ITEMS} items streamed (best of 5)");
    println!(
        "bare stream:  {:>6.2} ns/item  {:>6.1} M items/s",
        bare_stream,
        1e3 / bare_stream
    );
    println!(
        "full stack:   {:>6.2} ns/item  {:>6.1} M items/s  ({:.2}x the bare stream's items/s)",
        stacked_stream,
        1e3 / stacked_stream,
        bare_stream / stacked_stream
    );
}

criterion_group!(benches, bench);

fn main() {
    // tower's Timeout arms its timer on every call, which needs a runtime's
    // timer; ours arm timers only when a tool waits.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let _context = runtime.enter();
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
