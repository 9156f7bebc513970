//! The README's stack saturated, and what each call's outcome says.
//!
//! 1,024 calls in flight over three tools limited to 64, 33 and 17
//! permits, each with a per-tool quota, `wait_at_most(150 ms)` and
//! `max_wait(150 ms)`, a 400 ms deadline, retries: most calls wait, many
//! are refused for capacity and tried again, some run out of time while
//! waiting. On tokio's paused clock (no real time passes), it checks what
//! a model would read of each call:
//!
//! * a call whose tool never ran never ends as a timeout of the tool: it
//!   ends `Overloaded` or `RateLimited`, saying the tool never started;
//! * a call whose first attempt ran and failed, and whose retry was then
//!   refused or ran out of time waiting, ends with that first failure,
//!   the refusal said after it;
//! * a call that ran and was slow does end as a timeout — one that ran out
//!   of time because it started late says how late;
//! * every call ends exactly once (nothing after an error, no call twice).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use toolstack::{tool, ErrorKind, ToolAnnotations, ToolError, ToolRequest, Toolbox};
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::RetryPolicy;
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::ServiceBuilderExt;
use tower::{ServiceBuilder, ServiceExt};

const CALLS: u64 = 6_000;
const IN_FLIGHT: usize = 1_024;
const TOOLS: [(&str, usize); 3] = [("a", 64), ("b", 33), ("c", 17)];

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Job {
    id: u64,
    ms: u64,
    flaky: bool,
}

/// How often each call's tool function ran.
type Runs = Arc<Mutex<HashMap<u64, u32>>>;

fn job(
    name: &'static str,
    runs: &Runs,
) -> impl toolstack::Describe
       + tower::Service<
    ToolRequest,
    Error = ToolError,
    Response = impl futures_util::Stream<Item = toolstack::ToolItem> + Send + 'static,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    let runs = runs.clone();
    tool::from_fn(name, move |Job { id, ms, flaky }: Job| {
        let run = {
            let mut runs = runs.lock().unwrap();
            let n = runs.entry(id).or_default();
            *n += 1;
            *n
        };
        async move {
            if flaky && run == 1 {
                return Err(ToolError::new(
                    ErrorKind::Unavailable,
                    "the backend blinked",
                ));
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, ToolError>("done")
        }
    })
    // Read-only: a failure that reached it may be tried again.
    .with_annotations(ToolAnnotations::new().read_only())
}

fn toolbox(runs: &Runs) -> Toolbox {
    let mut toolbox = Toolbox::new();
    for (name, permits) in TOOLS {
        let stack = ServiceBuilder::new()
            .stream_trace()
            .stream_catch_panic()
            .stream_timeout(TimeoutLayer::new().deadline(Duration::from_millis(400)))
            .stream_retry(RetryPolicy::new().max_attempts(3))
            .stream_rate_limit(
                RateLimitLayer::per_tool(Quota::per_second(NonZeroU32::new(300).unwrap()))
                    .wait_at_most(Duration::from_millis(150)),
            )
            .layer(ConcurrencyLimitLayer::new(permits).max_wait(Duration::from_millis(150)))
            .stream_timeout(
                TimeoutLayer::new()
                    .first_item(Duration::from_secs(1))
                    .idle(Duration::from_millis(500)),
            );
        toolbox = toolbox.layered(job(name, runs), stack);
    }
    toolbox
}

/// What call `id` sends: which tool, for how long, whether its first run
/// fails.
fn plan(id: u64) -> (&'static str, u64, bool) {
    let tool = TOOLS[(id % 3) as usize].0;
    // A few calls are slower than the deadline: those are the tool's fault.
    let ms = if id.is_multiple_of(97) {
        600
    } else {
        10 + id * 37 % 240
    };
    (tool, ms, id.is_multiple_of(5))
}

#[derive(Debug)]
enum Outcome {
    Done,
    Failed(ToolError),
}

async fn one_call(toolbox: Toolbox, id: u64) -> (u64, Outcome) {
    let (tool, ms, flaky) = plan(id);
    let request = ToolRequest::new(tool, format!(r#"{{"id":{id},"ms":{ms},"flaky":{flaky}}}"#))
        .with_id(format!("call_{id}"));
    let mut stream = match toolbox.oneshot(request).await {
        Ok(stream) => stream,
        Err(err) => return (id, Outcome::Failed(err)),
    };
    let mut items = 0;
    while let Some(item) = stream.next().await {
        match item {
            Ok(_) => items += 1,
            Err(err) => {
                assert!(
                    stream.next().await.is_none(),
                    "call {id}: an item after its error"
                );
                return (id, Outcome::Failed(err));
            }
        }
    }
    assert_eq!(items, 1, "call {id}: one answer");
    (id, Outcome::Done)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_saturated_stack_never_blames_the_tool_for_a_wait_and_keeps_the_first_failure() {
    let runs: Runs = Arc::default();
    let toolbox = toolbox(&runs);
    let mut pending = FuturesUnordered::new();
    let mut results = Vec::with_capacity(CALLS as usize);
    let mut next = 0;
    while next < CALLS || !pending.is_empty() {
        while next < CALLS && pending.len() < IN_FLIGHT {
            pending.push(one_call(toolbox.clone(), next));
            next += 1;
        }
        if let Some(done) = pending.next().await {
            results.push(done);
        }
    }

    let runs = runs.lock().unwrap().clone();
    let mut seen = HashSet::new();
    let mut tally: BTreeMap<&str, u64> = BTreeMap::new();
    for (id, outcome) in &results {
        assert!(seen.insert(*id), "call {id} ended twice");
        let ran = runs.get(id).copied().unwrap_or(0);
        let (_, ms, flaky) = plan(*id);
        let err = match outcome {
            Outcome::Done => {
                assert!(ran >= 1, "call {id} answered without running");
                *tally.entry("done").or_default() += 1;
                continue;
            }
            Outcome::Failed(err) => err,
        };
        let message = err.message();
        if ran == 0 {
            // Never ran: never the tool's timeout, always capacity.
            assert!(
                matches!(
                    err.kind(),
                    ErrorKind::Overloaded | ErrorKind::RateLimited { .. }
                ),
                "call {id} never ran but ended as {:?}: {message}",
                err.kind()
            );
            assert!(message.contains("never started"), "call {id}: {message}");
            *tally.entry("never started").or_default() += 1;
        } else if flaky && ran == 1 {
            // Its one run failed; its retry never ran: the first failure
            // is the call's, with what happened to the retry after it.
            assert_eq!(err.kind(), ErrorKind::Unavailable, "call {id}: {message}");
            assert!(
                message.starts_with("the backend blinked"),
                "call {id}: {message}"
            );
            if message != "the backend blinked" {
                *tally
                    .entry("first failure kept, retry refused")
                    .or_default() += 1;
            }
        } else if matches!(err.kind(), ErrorKind::Timeout { .. }) {
            // It ran (above), and the deadline passed while it did: the
            // slow tools, and tools that started late after a long wait.
            let case = if ms > 400 {
                "timed out in the tool"
            } else {
                // It could only run out of time by starting late: the
                // message says so.
                assert!(
                    message.contains("after the call, having waited for capacity"),
                    "call {id} ran for {ms} ms: {message}"
                );
                "timed out in the tool, having started late"
            };
            *tally.entry(case).or_default() += 1;
        } else {
            *tally.entry("other").or_default() += 1;
        }
    }
    assert_eq!(results.len() as u64, CALLS, "every call ended");
    println!("outcomes: {tally:?}");
    // The run was saturated enough to see each case.
    for case in [
        "done",
        "never started",
        "first failure kept, retry refused",
        "timed out in the tool",
    ] {
        assert!(
            tally.get(case).copied().unwrap_or(0) > 0,
            "no call was `{case}`: {tally:?}"
        );
    }
}
