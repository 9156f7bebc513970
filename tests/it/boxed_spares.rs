//! A toolbox call reuses a spare handle of a tool that was ready at once
//! (no clone of the tool per call), and hands a tool that is not ready to
//! the call's future, which waits for it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use toolstack::{tool, BoxTool, ToolError, ToolInfo, ToolOutput, ToolRequest, ToolResult};
use tower::{Service, ServiceBuilder};

/// Counts clones; fails readiness while `fail_ready` is set.
#[derive(Debug)]
struct Probe<S> {
    inner: S,
    clones: Arc<AtomicUsize>,
    fail_ready: Arc<std::sync::atomic::AtomicBool>,
}

impl<S: Clone> Clone for Probe<S> {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Probe {
            inner: self.inner.clone(),
            clones: self.clones.clone(),
            fail_ready: self.fail_ready.clone(),
        }
    }
}

impl<S> Service<ToolRequest> for Probe<S>
where
    S: Service<ToolRequest, Error = ToolError>,
{
    type Response = S::Response;
    type Error = ToolError;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        if self.fail_ready.load(Ordering::SeqCst) {
            return Poll::Ready(Err(ToolError::new(
                toolstack::ErrorKind::Unavailable,
                "not today",
            )));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ToolRequest) -> S::Future {
        self.inner.call(request)
    }
}

fn echo() -> impl Service<
    ToolRequest,
    Response = impl futures_util::Stream<Item = toolstack::ToolItem> + Send + 'static,
    Error = ToolError,
    Future = impl Send + 'static,
> + Clone
       + Send
       + Sync
       + 'static {
    tool::raw(ToolInfo::new("echo"), |req: ToolRequest| {
        futures_util::stream::iter([Ok(ToolOutput::text(req.arguments().to_owned()))])
    })
}

fn probe<S>(
    inner: S,
) -> (
    Probe<S>,
    Arc<AtomicUsize>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let clones = Arc::new(AtomicUsize::new(0));
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    (
        Probe {
            inner,
            clones: clones.clone(),
            fail_ready: fail.clone(),
        },
        clones,
        fail,
    )
}

async fn text(tool: &BoxTool, arguments: &'static str) -> Result<String, ToolError> {
    let stream = tool
        .call_shared(ToolRequest::new("echo", arguments))
        .await?;
    Ok(ToolResult::collect(stream).await.into_text())
}

#[tokio::test(flavor = "current_thread")]
async fn a_tool_ready_at_once_is_not_cloned_for_every_call() {
    let (service, clones, _) = probe(echo());
    let tool = BoxTool::with_info(ToolInfo::new("echo"), service);
    let made = clones.load(Ordering::SeqCst);
    for _ in 0..100 {
        assert_eq!(text(&tool, "{}").await.unwrap(), "{}");
    }
    // One clone for the first call; every later call on this thread reuses
    // that handle.
    assert_eq!(clones.load(Ordering::SeqCst) - made, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_tool_that_is_not_ready_is_waited_for_and_its_handle_holds_nothing_after() {
    let (service, _, _) = probe(echo());
    let limited = ServiceBuilder::new().concurrency_limit(1).service(service);
    let tool = BoxTool::with_info(ToolInfo::new("echo"), limited);
    let within = |f| tokio::time::timeout(Duration::from_secs(5), f);

    // The first call holds the only permit while its stream is open.
    let first = within(tool.call_shared(ToolRequest::new("echo", "1")))
        .await
        .expect("opens at once")
        .unwrap();
    // The second is not ready: its future waits for the permit.
    let second = tool.call_shared(ToolRequest::new("echo", "2"));
    drop(first);
    let second = within(second).await.expect("opens once the permit is back");
    let items: Vec<_> = second.unwrap().collect().await;
    assert_eq!(items[0].as_ref().unwrap().as_text(), Some("2"));
    // The spare handles hold no permit: more calls go through.
    for _ in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(5), text(&tool, "3"));
        assert_eq!(answer.await.expect("not stuck").unwrap(), "3");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_readiness_failure_is_the_calls_error_and_the_next_call_starts_afresh() {
    let (service, _, fail) = probe(echo());
    let tool = BoxTool::with_info(ToolInfo::new("echo"), service);
    fail.store(true, Ordering::SeqCst);
    let err = text(&tool, "{}").await.unwrap_err();
    assert_eq!(err.message(), "not today");
    fail.store(false, Ordering::SeqCst);
    assert_eq!(text(&tool, "{}").await.unwrap(), "{}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_handle_whose_call_panicked_is_never_lent_again() {
    // A raw tool whose `call` panics on "boom" (no catch-panic layer): the
    // panic reaches the caller; the handle it held is dropped, the next
    // call makes one fresh handle, and the calls after reuse that one.
    let panicky = tool::raw(ToolInfo::new("echo"), |req: ToolRequest| {
        assert_ne!(req.arguments(), "boom", "the tool's call panics");
        futures_util::stream::iter([Ok(ToolOutput::text(req.arguments().to_owned()))])
    });
    let (service, clones, _) = probe(panicky);
    let tool = BoxTool::with_info(ToolInfo::new("echo"), service);
    assert_eq!(text(&tool, "{}").await.unwrap(), "{}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(tool.call_shared(ToolRequest::new("echo", "boom")));
    }));
    assert!(panicked.is_err());
    let before = clones.load(Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(text(&tool, "{}").await.unwrap(), "{}");
    }
    assert_eq!(
        clones.load(Ordering::SeqCst) - before,
        1,
        "one fresh handle, then reused"
    );
}
