//! The concurrency limit: the permit lives as long as the stream.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use support::{texts, Scripted, Step};
use tokio::sync::Semaphore;
use toolstack::{ErrorKind, ToolError, ToolRequest};
use toolstack_layers::concurrency::{ConcurrencyLimit, ConcurrencyLimitLayer};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

fn request() -> ToolRequest {
    ToolRequest::new("scripted", "{}")
}

fn is_ready<S: Service<ToolRequest>>(svc: &mut S) -> bool {
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    matches!(svc.poll_ready(&mut cx), std::task::Poll::Ready(Ok(())))
}

#[tokio::test(start_paused = true)]
async fn concurrency_permit_held_until_stream_drop() {
    let tool = Scripted::new(vec![vec![Step::Text(1, "a"), Step::Hang]]);
    let mut svc = ConcurrencyLimit::new(tool, 1);
    let mut first = svc.ready().await.unwrap().call(request()).await.unwrap();
    // The future has resolved: tower's limit would have released here.
    assert!(first.holds_permit());
    assert!(!is_ready(&mut svc), "the open stream still counts");
    assert!(first.next().await.unwrap().is_ok());
    assert!(!is_ready(&mut svc));
    drop(first);
    assert!(
        is_ready(&mut svc),
        "dropping the stream releases the permit"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrency_permit_released_at_end_of_stream() {
    let tool = Scripted::new(vec![vec![Step::Text(1, "a"), Step::Text(1, "b")]]);
    let mut svc = ConcurrencyLimit::new(tool, 1);
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.holds_permit());
    assert!(stream.next().await.is_none());
    assert!(!stream.holds_permit());
    // Released although the stream itself is still alive.
    assert!(is_ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn concurrency_permit_released_at_terminal_error() {
    let tool = Scripted::new(vec![vec![
        Step::Fail(1, ToolError::failed("boom")),
        Step::Hang,
    ]]);
    let mut svc = ConcurrencyLimit::new(tool, 1);
    let mut stream = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap_err().kind(),
        ErrorKind::Failed
    );
    assert!(!stream.holds_permit());
    assert!(is_ready(&mut svc));
}

#[tokio::test(start_paused = true)]
async fn concurrency_permit_released_when_opening_fails_or_is_dropped() {
    let tool = Scripted::new(vec![vec![Step::Text(0, "a")]]).open_after(1_000);
    let mut svc = ConcurrencyLimit::new(tool, 1);
    let fut = svc.ready().await.unwrap().call(request());
    assert!(!is_ready(&mut svc));
    drop(fut);
    assert!(is_ready(&mut svc), "a dropped future releases the permit");

    let failing = tower::service_fn(|_: ToolRequest| async {
        Err::<toolstack::ToolStream, _>(ToolError::failed("cannot open"))
    });
    let mut svc = ConcurrencyLimit::new(failing, 1);
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap_err();
    assert_eq!(err.message(), "cannot open");
    assert!(is_ready(&mut svc), "a failed opening releases the permit");
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_waits_for_a_permit_and_honours_inner_readiness() {
    let (mock, mut handle) = mock::pair::<ToolRequest, toolstack::ToolStream>();
    let mut svc = ConcurrencyLimit::new(mock, 2);
    // The inner is not ready: the limit must not call it.
    handle.allow(0);
    assert!(!is_ready(&mut svc));
    handle.allow(1);
    let fut = svc.ready().await.unwrap().call(request());
    let (req, send) = handle.next_request().await.unwrap();
    assert_eq!(req.name(), "scripted");
    send.send_response(toolstack::ToolStream::error(ToolError::failed("x")));
    let stream = fut.await.unwrap();
    assert_eq!(texts(stream).await, ["ERR(failed)"]);
}

#[tokio::test(start_paused = true)]
async fn concurrency_clones_share_the_limit() {
    let tool = Scripted::new(vec![vec![Step::Hang]]);
    let mut a = ConcurrencyLimit::new(tool, 1);
    let mut b = a.clone();
    let stream = a.ready().await.unwrap().call(request()).await.unwrap();
    assert!(!is_ready(&mut b));
    drop(stream);
    assert!(is_ready(&mut b));
}

#[tokio::test(start_paused = true)]
async fn concurrency_layer_gives_each_service_its_own_limit_unless_shared() {
    let layer = ConcurrencyLimitLayer::new(1);
    let mut a = layer.layer(Scripted::new(vec![vec![Step::Hang]]));
    let mut b = layer.layer(Scripted::new(vec![vec![Step::Hang]]));
    let _held = a.ready().await.unwrap().call(request()).await.unwrap();
    assert!(is_ready(&mut b), "separate services, separate limits");

    let semaphore = Arc::new(Semaphore::new(1));
    let shared = ConcurrencyLimitLayer::with_semaphore(semaphore.clone());
    let mut a = shared.layer(Scripted::new(vec![vec![Step::Hang]]));
    let mut b = shared.layer(Scripted::new(vec![vec![Step::Hang]]));
    let held = a.ready().await.unwrap().call(request()).await.unwrap();
    assert!(!is_ready(&mut b), "one shared limit");
    assert_eq!(semaphore.available_permits(), 0);
    drop(held);
    assert!(is_ready(&mut b));
}

#[tokio::test(start_paused = true)]
async fn concurrency_limit_closed_semaphore_is_unavailable() {
    let semaphore = Arc::new(Semaphore::new(1));
    let mut svc =
        ConcurrencyLimit::with_semaphore(Scripted::new(vec![vec![Step::Hang]]), semaphore.clone());
    semaphore.close();
    let err = svc.ready().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
}

#[tokio::test(start_paused = true)]
async fn concurrency_queued_call_proceeds_when_the_stream_ends() {
    let tool = Scripted::new(vec![
        vec![Step::Text(100, "first")],
        vec![Step::Text(1, "second")],
    ]);
    let svc = ConcurrencyLimit::new(tool, 1);
    let mut a = svc.clone();
    let mut b = svc.clone();
    let first = a.ready().await.unwrap().call(request()).await.unwrap();
    let second = tokio::spawn(async move {
        let stream = b.ready().await.unwrap().call(request()).await.unwrap();
        (tokio::time::Instant::now(), texts(stream).await)
    });
    let started = tokio::time::Instant::now();
    assert_eq!(texts(first).await, ["first"]);
    let (at, items) = second.await.unwrap();
    assert_eq!(items, ["second"]);
    assert!(
        at - started >= Duration::from_millis(100),
        "the second call waited for the first stream"
    );
}

/// Many threads take and give back the limit's own permits (the atomic
/// path, the queue when none is free, waits given up): never more calls
/// in flight than permits, and at the end every permit is back — as many
/// calls as permits can then be in flight together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_own_permits_are_never_exceeded_nor_lost_across_threads() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PERMITS: usize = 3;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Barrier::new(PERMITS + 1));
    let holding = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tool = {
        let (in_flight, most, gate, holding) = (
            in_flight.clone(),
            most.clone(),
            gate.clone(),
            holding.clone(),
        );
        tower::service_fn(move |_: ToolRequest| {
            let (in_flight, most, gate, holding) = (
                in_flight.clone(),
                most.clone(),
                gate.clone(),
                holding.clone(),
            );
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if holding.load(Ordering::SeqCst) {
                    gate.wait().await;
                } else {
                    tokio::task::yield_now().await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>(futures_util::stream::iter([Ok::<_, ToolError>(
                    toolstack::ToolOutput::text("done"),
                )]))
            }
        })
    };
    let layer = ConcurrencyLimitLayer::shared(PERMITS);
    let patient = layer.layer(tool.clone());
    let hasty = layer
        .clone()
        .max_wait(Duration::from_micros(50))
        .layer(tool);
    let mut tasks = Vec::new();
    for task in 0..16 {
        let (mut patient, mut hasty) = (patient.clone(), hasty.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut shed) = (0, 0);
            for n in 0..500 {
                let svc = if (task + n) % 4 == 0 {
                    &mut hasty
                } else {
                    &mut patient
                };
                match svc.ready().await.unwrap().call(request()).await {
                    Ok(stream) => {
                        assert_eq!(texts(stream).await, ["done"]);
                        done += 1;
                    }
                    Err(err) => {
                        assert_eq!(err.kind(), ErrorKind::Overloaded, "{err}");
                        shed += 1;
                    }
                }
            }
            (done, shed)
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the calls finished")
            .unwrap()
            .0;
    }
    assert!(done > 0);
    assert!(
        most.load(Ordering::SeqCst) <= PERMITS,
        "more calls than permits"
    );
    assert_eq!(in_flight.load(Ordering::SeqCst), 0);

    // Every permit is back: PERMITS calls can be in flight at once.
    holding.store(true, Ordering::SeqCst);
    let holders: Vec<_> = (0..PERMITS)
        .map(|_| {
            let mut patient = patient.clone();
            tokio::spawn(async move {
                let stream = patient
                    .ready()
                    .await
                    .unwrap()
                    .call(request())
                    .await
                    .unwrap();
                texts(stream).await
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(60), gate.wait())
        .await
        .expect("a permit was lost: not every holder got in");
    for holder in holders {
        assert_eq!(holder.await.unwrap(), ["done"]);
    }
}
