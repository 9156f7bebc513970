//! The cost of calling a tool: a hand-written direct call (parse the
//! argument string with serde_json → call the function → serialize the
//! output) against the same function as a typed tool called directly and
//! through a toolbox.
//!
//! `cargo bench --bench call` runs criterion, then prints a summary: ns per
//! call, the ratio to the direct call measured in the same run, and heap
//! allocations per call (counted by the global allocator below).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use futures_util::{FutureExt, StreamExt};
use toolstack::{tool, ToolError, ToolOutput, ToolRequest, Toolbox};
use tower::Service;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

use toolstack_demo::add::{add, direct, Add, ARGS};

fn item_text(item: Option<Result<ToolOutput, ToolError>>) -> String {
    match item {
        Some(Ok(ToolOutput::Json { value })) => serde_json::to_string(&value).expect("json"),
        other => panic!("unexpected item {other:?}"),
    }
}

fn tools() -> (
    impl FnMut(&ToolRequest) -> String,
    impl FnMut(&ToolRequest) -> String,
) {
    let mut typed = tool::from_fn(
        "add",
        |args: Add| async move { Ok::<_, ToolError>(add(args)) },
    );
    let toolbox = Toolbox::new().tool(typed.clone());
    let typed_call = move |req: &ToolRequest| {
        let stream = typed
            .call(req.clone())
            .now_or_never()
            .expect("ready")
            .expect("opened");
        let mut stream = pin!(stream);
        item_text(stream.next().now_or_never().expect("ready"))
    };
    let toolbox_call = move |req: &ToolRequest| {
        let mut stream = toolbox
            .dispatch(req.clone())
            .now_or_never()
            .expect("ready")
            .expect("opened");
        item_text(stream.next().now_or_never().expect("ready"))
    };
    (typed_call, toolbox_call)
}

fn bench(c: &mut Criterion) {
    let req = ToolRequest::new("add", ARGS).with_id("call_1");
    let (mut typed, mut toolbox) = tools();
    assert_eq!(direct(ARGS), "3");
    assert_eq!(typed(&req), "3");
    assert_eq!(toolbox(&req), "3");

    let mut group = c.benchmark_group("call");
    group.bench_function("direct", |b| b.iter(|| direct(black_box(ARGS))));
    group.bench_function("typed_tool", |b| b.iter(|| typed(black_box(&req))));
    group.bench_function("toolbox", |b| b.iter(|| toolbox(black_box(&req))));
    group.finish();
}

/// Nanoseconds per call: the best of several rounds, so that the variants
/// are compared under the same conditions in the same run.
fn ns_per_call(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..7 {
        let mut n = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(150) {
            for _ in 0..1000 {
                f();
            }
            n += 1000;
        }
        best = best.min(start.elapsed().as_nanos() as f64 / n as f64);
    }
    best
}

fn allocations_per_call(mut f: impl FnMut()) -> f64 {
    const N: usize = 10_000;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..N {
        f();
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / N as f64
}

fn summary() {
    let req = ToolRequest::new("add", ARGS).with_id("call_1");
    let (mut typed, mut toolbox) = tools();
    let base = ns_per_call(|| {
        black_box(direct(black_box(ARGS)));
    });
    let base_allocs = allocations_per_call(|| {
        black_box(direct(black_box(ARGS)));
    });
    println!("\nsummary (best of 7 rounds; ratio to the direct call in this run)");
    println!(
        "{:<12} {:>9} {:>7} {:>12}",
        "variant", "ns/call", "ratio", "allocs/call"
    );
    println!(
        "{:<12} {:>9.1} {:>7.2} {:>12.1}",
        "direct", base, 1.0, base_allocs
    );
    for (name, f) in [
        (
            "typed_tool",
            &mut typed as &mut dyn FnMut(&ToolRequest) -> String,
        ),
        ("toolbox", &mut toolbox),
    ] {
        let ns = ns_per_call(|| {
            black_box(f(black_box(&req)));
        });
        let allocs = allocations_per_call(|| {
            black_box(f(black_box(&req)));
        });
        println!(
            "{:<12} {:>9.1} {:>7.2} {:>12.1}",
            name,
            ns,
            ns / base,
            allocs
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
