//! tower's own layers on tools, written as a tower user writes them: each
//! does what tower's docs promise, on a typed tool (`from_fn`), a
//! streaming tool (`from_stream`) and a toolbox, because a tool's response
//! future resolves only once the tool has begun answering (its first item,
//! its end, or its failure).
//!
//! * `Timeout` fails a call whose tool has not begun answering in time;
//! * `ConcurrencyLimit` holds its permit while the tool works toward its
//!   first item (and `LoadShed` sheds a call made meanwhile);
//! * `Retry` with a user's `Policy` runs a call that failed again — never
//!   one whose first item reached the caller;
//! * `RateLimit` behind `Buffer` spaces the tool's starts;
//! * `balance`'s pending-request load counts a call that is working;
//! * over a remote MCP tool, `Timeout` bounds the time to its answer.
//!
//! All on tokio's paused clock: no real sleeps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::time::{sleep, Instant};
use toolstack::{
    tool, BoxTool, ErrorKind, TimeoutPhase, ToolError, ToolInfo, ToolItem, ToolRequest, Toolbox,
};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

#[derive(Deserialize, JsonSchema)]
struct Work {
    /// How long the tool works before its first item, in milliseconds.
    ms: u64,
}

fn request(ms: u64) -> ToolRequest {
    ToolRequest::new("work", format!(r#"{{"ms":{ms}}}"#))
}

/// Which tool a scenario runs on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `tool::from_fn`: works `ms`, then answers "done".
    Fn,
    /// `tool::from_stream`: works `ms`, answers "first", works `ms`
    /// again, answers "second".
    Stream,
    /// The `from_fn` tool inside a `Toolbox`, the layer around the toolbox.
    Toolbox,
}

const KINDS: [Kind; 3] = [Kind::Fn, Kind::Stream, Kind::Toolbox];

/// What the tools record: how many calls started, and when.
#[derive(Clone, Default)]
struct Log {
    started: Arc<Mutex<Vec<Duration>>>,
    running: Arc<AtomicUsize>,
    most_running: Arc<AtomicUsize>,
}

impl Log {
    fn start(&self, epoch: Instant) -> Running {
        self.started.lock().unwrap().push(epoch.elapsed());
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        Running(self.running.clone())
    }

    fn starts(&self) -> Vec<Duration> {
        self.started.lock().unwrap().clone()
    }
}

/// Counts a call as running until dropped.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The tool of `kind`, erased only for the scenarios' sake (a `BoxTool`
/// opens exactly as the tool inside it does); `fails` calls fail before
/// answering anything, the later ones work.
fn work_tool(kind: Kind, log: &Log, fails: usize) -> BoxTool {
    let epoch = Instant::now();
    let failures = Arc::new(AtomicUsize::new(fails));
    let fail_now = move || {
        failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    };
    let log = log.clone();
    match kind {
        Kind::Fn | Kind::Toolbox => {
            let typed = tool::from_fn("work", move |Work { ms }| {
                let (log, fail) = (log.clone(), fail_now());
                async move {
                    let _running = log.start(epoch);
                    sleep(Duration::from_millis(ms)).await;
                    if fail {
                        return Err(ToolError::new(ErrorKind::Unavailable, "flaky"));
                    }
                    Ok::<_, ToolError>("done")
                }
            });
            match kind {
                Kind::Toolbox => {
                    BoxTool::with_info(ToolInfo::new("work"), Toolbox::new().tool(typed))
                }
                _ => BoxTool::new(typed),
            }
        }
        Kind::Stream => BoxTool::new(tool::from_stream("work", move |Work { ms }| {
            let (log, fail) = (log.clone(), fail_now());
            stream::once(async move {
                let running = log.start(epoch);
                sleep(Duration::from_millis(ms)).await;
                (running, fail)
            })
            .flat_map(move |(running, fail)| {
                let first: Result<&str, ToolError> = if fail {
                    Err(ToolError::new(ErrorKind::Unavailable, "flaky"))
                } else {
                    Ok("first")
                };
                let second = async move {
                    sleep(Duration::from_millis(ms)).await;
                    drop(running);
                    Ok("second")
                };
                stream::iter([first]).chain(stream::once(second).take(usize::from(!fail)))
            })
        })),
    }
}

/// The texts of a call's items, or its error.
async fn texts<S>(svc: S, request: ToolRequest) -> Result<Vec<String>, ToolError>
where
    S: Service<ToolRequest>,
    S::Error: Into<BoxError>,
    S::Response: futures_core::Stream<Item = ToolItem>,
{
    let stream = svc
        .oneshot(request)
        .await
        .map_err(|e| ToolError::from_box_error(e.into()))?;
    let items: Vec<ToolItem> = stream.collect().await;
    items
        .into_iter()
        .map(|item| item.map(|output| output.as_text().unwrap_or_default().to_owned()))
        .collect()
}

fn first_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Stream => "first",
        _ => "done",
    }
}

/// tower's `Elapsed`, classified: the call did not open in time.
fn assert_timed_out_opening(err: &ToolError, what: impl std::fmt::Debug) {
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Timeout {
                phase: TimeoutPhase::Open
            }
        ),
        "{what:?}: {err}"
    );
}

#[tokio::test(start_paused = true)]
async fn tower_timeout_fails_a_tool_that_has_not_begun_answering_in_time() {
    for kind in KINDS {
        let log = Log::default();
        let svc = ServiceBuilder::new()
            .timeout(Duration::from_millis(100))
            .service(work_tool(kind, &log, 0));
        let started = Instant::now();
        let err = texts(svc.clone(), request(300)).await.unwrap_err();
        assert_timed_out_opening(&err, kind);
        assert_eq!(started.elapsed(), Duration::from_millis(100), "{kind:?}");
        assert_eq!(
            log.running.load(Ordering::SeqCst),
            0,
            "{kind:?}: the work was dropped"
        );

        // In time, the whole answer comes through: the timeout bounds the
        // opening, the rest is the stream's.
        let answer = texts(svc, request(50)).await.unwrap();
        assert_eq!(answer[0], first_text(kind), "{kind:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn tower_concurrency_limit_holds_its_permit_while_the_tool_works_and_load_shed_sheds() {
    for kind in KINDS {
        let log = Log::default();
        let svc = ServiceBuilder::new()
            .load_shed()
            .concurrency_limit(1)
            .service(work_tool(kind, &log, 0));

        let first = tokio::spawn(texts(svc.clone(), request(300)));
        sleep(Duration::from_millis(10)).await;
        assert_eq!(log.starts().len(), 1, "{kind:?}: the first call is working");

        // A call while the first works toward its first item is shed.
        let err = texts(svc.clone(), request(300)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Overloaded, "{kind:?}: {err}");
        assert_eq!(log.starts().len(), 1, "{kind:?}: the shed call never ran");

        let answer = first.await.unwrap().unwrap();
        assert_eq!(answer[0], first_text(kind), "{kind:?}");
        // The permit came back with the first item: a new call runs.
        texts(svc, request(10)).await.unwrap();
        assert_eq!(log.starts().len(), 2, "{kind:?}");
        assert_eq!(log.most_running.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}

/// A user's retry policy: up to `left` more attempts on any error.
#[derive(Clone)]
struct Attempts {
    left: usize,
}

impl<Res> tower::retry::Policy<ToolRequest, Res, BoxError> for Attempts {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        _req: &mut ToolRequest,
        result: &mut Result<Res, BoxError>,
    ) -> Option<Self::Future> {
        (result.is_err() && self.left > 0).then(|| {
            self.left -= 1;
            std::future::ready(())
        })
    }

    fn clone_request(&mut self, req: &ToolRequest) -> Option<ToolRequest> {
        Some(req.clone())
    }
}

/// tower's `Retry` wants `BoxError`s from below, as tower's layers give.
fn boxed_errors(tool: BoxTool) -> tower::util::MapErr<BoxTool, fn(ToolError) -> BoxError> {
    tool.map_err(BoxError::from as fn(ToolError) -> BoxError)
}

#[tokio::test(start_paused = true)]
async fn tower_retry_with_a_users_policy_runs_a_failed_call_again() {
    for kind in KINDS {
        let log = Log::default();
        let svc = ServiceBuilder::new()
            .retry(Attempts { left: 2 })
            .service(boxed_errors(work_tool(kind, &log, 1)));
        let answer = texts(svc, request(20)).await.unwrap();
        assert_eq!(answer[0], first_text(kind), "{kind:?}");
        assert_eq!(
            log.starts().len(),
            2,
            "{kind:?}: failed once, then ran again"
        );

        // Out of attempts, the last error is the call's.
        let log = Log::default();
        let svc = ServiceBuilder::new()
            .retry(Attempts { left: 2 })
            .service(boxed_errors(work_tool(kind, &log, 5)));
        let err = texts(svc, request(20)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{kind:?}: {err}");
        assert_eq!(log.starts().len(), 3, "{kind:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn tower_retry_never_runs_a_call_again_once_an_item_reached_the_caller() {
    // The stream answers its first item, then fails: the call is the
    // stream's from its first item on, so no policy can duplicate it.
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tool = tool::from_stream("work", move |Work { ms }| {
        counted.fetch_add(1, Ordering::SeqCst);
        stream::iter([
            Ok("first"),
            Err(ToolError::new(
                ErrorKind::Unavailable,
                "broke after answering",
            )),
        ])
        .then(move |item| async move {
            sleep(Duration::from_millis(ms)).await;
            item
        })
    });
    let svc = ServiceBuilder::new()
        .retry(Attempts { left: 3 })
        .service(boxed_errors(BoxTool::new(tool)));
    let stream = svc.oneshot(request(10)).await.unwrap();
    let items: Vec<ToolItem> = stream.collect().await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].as_ref().unwrap().as_text(), Some("first"));
    assert_eq!(
        items[1].as_ref().unwrap_err().kind(),
        ErrorKind::Unavailable
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn tower_rate_limit_behind_buffer_spaces_the_tools_starts() {
    for kind in KINDS {
        let log = Log::default();
        let svc = ServiceBuilder::new()
            .buffer(8)
            .rate_limit(1, Duration::from_secs(1))
            .service(work_tool(kind, &log, 0));
        let calls: Vec<_> = (0..3)
            .map(|_| tokio::spawn(texts(svc.clone(), request(10))))
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let starts: Vec<u64> = log
            .starts()
            .iter()
            .map(|d| d.as_millis() as u64 / 1000)
            .collect();
        assert_eq!(starts, [0, 1, 2], "{kind:?}: one start per second");
    }
}

#[tokio::test(start_paused = true)]
async fn tower_balance_counts_a_working_call_as_load() {
    use tower::balance::p2c::Balance;
    use tower::discover::ServiceList;
    use tower::load::{CompleteOnResponse, PendingRequestsDiscover};

    for kind in KINDS {
        let (a, b) = (Log::default(), Log::default());
        let replicas = ServiceList::new(vec![
            boxed_errors(work_tool(kind, &a, 0)),
            boxed_errors(work_tool(kind, &b, 0)),
        ]);
        let mut balance = Balance::new(PendingRequestsDiscover::new(
            replicas,
            CompleteOnResponse::default(),
        ));

        // Three calls, each made while the ones before are still working
        // toward their first item: p2c over two replicas picks the one
        // with fewer pending requests, so the first two never share one.
        let mut calls = Vec::new();
        for _ in 0..2 {
            balance.ready().await.unwrap();
            calls.push(tokio::spawn(balance.call(request(300))));
            sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            (a.starts().len(), b.starts().len()),
            (1, 1),
            "{kind:?}: the second call went to the idle replica"
        );
        for call in calls {
            call.await.unwrap().unwrap();
        }
    }
}

#[cfg(feature = "mcp")]
#[tokio::test(start_paused = true)]
async fn tower_timeout_bounds_a_remote_mcp_tool_until_its_answer() {
    // The `from_fn` tool, served over MCP (in memory), called as a remote
    // tool: its call opens at the server's first progress or its result.
    let log = Log::default();
    let served = Toolbox::new().boxed(work_tool(Kind::Fn, &log, 0));
    let remote = crate::mcp::in_memory(served).await.toolbox().await.unwrap();
    let svc = ServiceBuilder::new()
        .timeout(Duration::from_millis(100))
        .service(BoxTool::with_info(ToolInfo::new("work"), remote));

    let started = Instant::now();
    let err = texts(svc.clone(), request(300)).await.unwrap_err();
    assert_timed_out_opening(&err, "remote");
    assert_eq!(started.elapsed(), Duration::from_millis(100));

    let answer = texts(svc, request(50)).await.unwrap();
    assert_eq!(answer, ["done"]);
}
