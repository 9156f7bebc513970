//! The README's stack under load, with faults injected: thousands of calls
//! through a toolbox whose tools panic, hang, fail mid-stream, fail once
//! and recover, get bad arguments or are walked away from — more calls in
//! flight than there are permits, a quota that limits.
//!
//! It asserts what must hold for every call: exactly one outcome, the
//! expected kind for each injected fault, no item duplicated or reordered,
//! a tool never run for a call that was refused before it, and at the end
//! every permit back and every tool stream dropped. On tokio's paused clock
//! the hangs and waits cost no real time: the whole run takes well under a
//! second of CPU.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{self, FuturesUnordered};
use futures_util::StreamExt;
use tokio::sync::Semaphore;
use toolstack::{tool, ErrorKind, TimeoutPhase, ToolAnnotations, ToolError, ToolRequest, Toolbox};
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::{StreamSummary, TraceLayer};
use toolstack_layers::ServiceBuilderExt;
use tower::{ServiceBuilder, ServiceExt};
use tracing::Span;

const CALLS: u64 = 4_000;
const IN_FLIGHT: usize = 256;
const PERMITS: usize = 16;
const ITEMS: u64 = 3;

#[derive(serde::Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Fault {
    None,
    Panic,
    Hang,
    MidStream,
    FailOnce,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Job {
    id: u64,
    fault: Fault,
}

/// What the tools saw, shared with the test.
#[derive(Default)]
struct World {
    /// Calls whose function ran (a retried call counts each attempt).
    runs: Mutex<BTreeMap<u64, u32>>,
    /// Tool streams alive right now.
    live: AtomicUsize,
    /// Trace outcomes reported: ended + dropped early.
    outcomes: AtomicU64,
}

/// Decremented when the tool's stream is dropped, however it ends.
struct Live(Arc<World>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn job_tool(world: &Arc<World>) -> Toolbox {
    let world = world.clone();
    let job = tool::from_stream("job", move |Job { id, fault }: Job| {
        let attempt = {
            let mut runs = world.runs.lock().unwrap();
            let n = runs.entry(id).or_default();
            *n += 1;
            *n
        };
        world.live.fetch_add(1, Ordering::SeqCst);
        let live = Live(world.clone());
        stream::unfold((0u64, live), move |(n, live)| async move {
            tokio::time::sleep(Duration::from_millis(1 + id % 7)).await;
            let item = match (fault, n) {
                (Fault::FailOnce, 0) if attempt == 1 => Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the backend blinked",
                )),
                (_, n) if n == ITEMS => return None,
                (Fault::Panic, 1) => panic!("job {id} blew up"),
                (Fault::Hang, 1) => std::future::pending().await,
                (Fault::MidStream, 1) => Err(ToolError::failed(format!("job {id} broke"))),
                _ => Ok(format!("{id}:{n}")),
            };
            Some((item, (n + 1, live)))
        })
    })
    // Read-only: a failure before the first item may be retried.
    .with_annotations(ToolAnnotations::new().read_only());
    Toolbox::new().tool(job)
}

fn stack(permits: Arc<Semaphore>, world: &Arc<World>) -> Toolbox {
    let (ended, dropped) = (world.clone(), world.clone());
    let layers = ServiceBuilder::new()
        .layer(
            TraceLayer::new()
                .on_end(move |_: &StreamSummary, _: &Span| {
                    ended.outcomes.fetch_add(1, Ordering::SeqCst);
                })
                .on_early_drop(move |_: &StreamSummary, _: &Span| {
                    dropped.outcomes.fetch_add(1, Ordering::SeqCst);
                }),
        )
        .stream_catch_panic()
        .stream_timeout(TimeoutLayer::new().deadline(Duration::from_secs(30)))
        .stream_validate()
        .stream_retry(
            RetryPolicy::new()
                .max_attempts(4)
                .backoff(Duration::from_millis(20), Duration::from_millis(200)),
        )
        .stream_rate_limit(
            RateLimitLayer::per_tool(Quota::per_second(std::num::NonZeroU32::new(2_000).unwrap()))
                .wait_at_most(Duration::from_secs(5)),
        )
        .layer(ConcurrencyLimitLayer::with_semaphore(permits).max_wait(Duration::from_millis(250)))
        .stream_timeout(
            TimeoutLayer::new()
                .first_item(Duration::from_secs(1))
                .idle(Duration::from_millis(500)),
        );
    job_tool(world).layer(layers)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Completed,
    Walked,
    Error(&'static str),
}

/// What each call sends, and what the consumer does.
fn plan(id: u64) -> (String, Fault, bool) {
    let fault = match id % 10 {
        0 => Fault::Panic,
        1 => Fault::Hang,
        2 => Fault::MidStream,
        3 => Fault::FailOnce,
        _ => Fault::None,
    };
    let fault_name = match fault {
        Fault::None => "none",
        Fault::Panic => "panic",
        Fault::Hang => "hang",
        Fault::MidStream => "mid_stream",
        Fault::FailOnce => "fail_once",
    };
    let arguments = if id.is_multiple_of(23) {
        format!(r#"{{"id":{id},"fault":"sometimes"}}"#) // not a fault the tool knows
    } else {
        format!(r#"{{"id":{id},"fault":"{fault_name}"}}"#)
    };
    let walk_away = id % 10 == 9;
    (arguments, fault, walk_away)
}

async fn one_call(toolbox: Toolbox, id: u64) -> (u64, Outcome, Vec<String>) {
    let (arguments, _, walk_away) = plan(id);
    let request = ToolRequest::new("job", arguments).with_id(format!("call_{id}"));
    let mut items = Vec::new();
    let mut stream = match toolbox.oneshot(request).await {
        Ok(stream) => stream,
        Err(err) => return (id, Outcome::Error(err.kind().as_str()), items),
    };
    while let Some(item) = stream.next().await {
        match item {
            Ok(output) => {
                items.push(output.as_text().unwrap_or_default().to_owned());
                if walk_away {
                    return (id, Outcome::Walked, items);
                }
            }
            Err(err) => {
                // Exactly one outcome: nothing may follow an error.
                assert!(
                    stream.next().await.is_none(),
                    "call {id}: an item after its error"
                );
                let kind = match err.kind() {
                    ErrorKind::Timeout {
                        phase: TimeoutPhase::Idle,
                    } => "timeout_idle",
                    other => other.as_str(),
                };
                return (id, Outcome::Error(kind), items);
            }
        }
    }
    (id, Outcome::Completed, items)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_readme_stack_gives_every_call_one_right_outcome_under_load_and_faults() {
    // The injected panics are caught by the stack; keep them off the output
    // (this binary holds this one test, so the hook is ours alone). Any
    // other panic — a failed assertion — is reported as usual.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.ends_with("blew up"));
        if !injected {
            report(info);
        }
    }));
    let started = std::time::Instant::now();
    let clock = tokio::time::Instant::now();
    let world = Arc::new(World::default());
    let permits = Arc::new(Semaphore::new(PERMITS));
    let toolbox = stack(permits.clone(), &world);

    let mut pending = FuturesUnordered::new();
    let mut next = 0;
    let mut results = Vec::with_capacity(CALLS as usize);
    while next < CALLS || !pending.is_empty() {
        while next < CALLS && pending.len() < IN_FLIGHT {
            pending.push(one_call(toolbox.clone(), next));
            next += 1;
        }
        if let Some(done) = pending.next().await {
            results.push(done);
        }
    }

    let mut by_outcome: BTreeMap<Outcome, u64> = BTreeMap::new();
    let runs = world.runs.lock().unwrap().clone();
    let mut seen = HashSet::new();
    for (id, outcome, items) in &results {
        assert!(seen.insert(*id), "call {id} ended twice");
        *by_outcome.entry(*outcome).or_default() += 1;
        // No item duplicated or out of order: `id:0`, `id:1`, … exactly.
        let expected: Vec<String> = (0..items.len() as u64)
            .map(|n| format!("{id}:{n}"))
            .collect();
        assert_eq!(items, &expected, "call {id}");
        let (_, fault, walk_away) = plan(*id);
        let bad_arguments = id % 23 == 0;
        let expected_outcome = if bad_arguments {
            Outcome::Error("invalid_arguments")
        } else if walk_away {
            Outcome::Walked
        } else {
            match fault {
                Fault::None | Fault::FailOnce => Outcome::Completed,
                Fault::Panic => Outcome::Error("panicked"),
                Fault::Hang => Outcome::Error("timeout_idle"),
                Fault::MidStream => Outcome::Error("failed"),
            }
        };
        // Under saturation a call may also be refused before it ran (the
        // retry gave up on capacity): then its last attempt never reached
        // the tool, and nothing was emitted.
        if *outcome == Outcome::Error("overloaded") || *outcome == Outcome::Error("rate_limited") {
            let earlier = u32::from(fault == Fault::FailOnce && !bad_arguments);
            assert!(
                runs.get(id).copied().unwrap_or(0) <= earlier,
                "call {id} was refused, yet its last attempt ran"
            );
            assert!(items.is_empty(), "call {id}");
            continue;
        }
        // A call that failed once may have spent its attempts waiting for
        // capacity before it ran: then its one run's error is the answer.
        if fault == Fault::FailOnce && !bad_arguments && *outcome == Outcome::Error("unavailable") {
            assert_eq!(runs.get(id), Some(&1), "call {id}");
            assert!(items.is_empty(), "call {id}");
            continue;
        }
        assert_eq!(
            *outcome,
            expected_outcome,
            "call {id} ({fault:?}, items {items:?}, runs {:?})",
            runs.get(id)
        );
        match (bad_arguments, fault) {
            (true, _) => assert!(
                !runs.contains_key(id),
                "call {id}: bad arguments reached the tool"
            ),
            // Failed once before its first item: run twice, emitted once.
            (false, Fault::FailOnce) => assert_eq!(runs.get(id), Some(&2), "call {id}"),
            (false, _) => assert_eq!(runs.get(id), Some(&1), "call {id} ran more than once"),
        }
    }
    assert_eq!(results.len() as u64, CALLS);
    // Every call reported exactly one end to the trace.
    assert_eq!(world.outcomes.load(Ordering::SeqCst), CALLS);
    // Nothing left behind: permits back, tool streams dropped.
    assert_eq!(permits.available_permits(), PERMITS);
    assert_eq!(world.live.load(Ordering::SeqCst), 0);
    let completed = by_outcome.get(&Outcome::Completed).copied().unwrap_or(0);
    assert!(completed > CALLS / 3, "{by_outcome:?}");

    println!(
        "{CALLS} calls, {IN_FLIGHT} in flight over {PERMITS} permits: {by_outcome:?}; \
         {:?} of tokio time, {:?} of real time",
        clock.elapsed(),
        started.elapsed()
    );
}
