//! "An error is the last item", enforced: after an `Err` item, every layer
//! that watches the stream — and the toolbox's `ToolStream` — yields
//! nothing more and drops the stream behind it.

use crate::support;

use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use support::DropFlag;
use toolstack::{
    tool, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest, ToolStream, Toolbox,
};
use toolstack_layers::catch_panic::CatchPanicLayer;
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::guardrail::{Guardrail, GuardrailLayer, Verdict};
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::{RetryLayer, RetryPolicy};
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use tower::{Layer, Service, ServiceExt};

/// `[Ok("before"), Err(failed), Ok("after")]`, counting how many items were
/// pulled and flagging its drop — a tool that breaks the convention.
struct ErrThenOk {
    pulled: Arc<AtomicUsize>,
    _dropped: DropFlag,
}

impl Stream for ErrThenOk {
    type Item = ToolItem;

    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<ToolItem>> {
        let n = self.pulled.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(match n {
            0 => Some(Ok(ToolOutput::text("before"))),
            1 => Some(Err(ToolError::failed("broke"))),
            2 => Some(Ok(ToolOutput::text("after"))),
            _ => None,
        })
    }
}

#[derive(Clone, Default)]
struct Probe {
    pulled: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

impl Probe {
    fn service(
        &self,
    ) -> impl Service<
        ToolRequest,
        Response = ErrThenOk,
        Error = ToolError,
        Future = std::future::Ready<Result<ErrThenOk, ToolError>>,
    > + Clone
           + Send
           + Sync
           + 'static {
        let probe = self.clone();
        tower::service_fn(move |_: ToolRequest| {
            std::future::ready(Ok(ErrThenOk {
                pulled: probe.pulled.clone(),
                _dropped: DropFlag(probe.dropped.clone()),
            }))
        })
    }
}

/// Reads two items, checks the error came second, then polls again.
async fn check<St: Stream<Item = ToolItem> + Unpin>(name: &str, mut stream: St, probe: &Probe) {
    assert_eq!(
        stream.next().await.unwrap().unwrap().as_text(),
        Some("before"),
        "{name}"
    );
    let err = stream.next().await.unwrap().unwrap_err();
    assert_eq!(err.message(), "broke", "{name}");
    assert!(
        probe.dropped.load(Ordering::SeqCst),
        "{name}: the stream behind the error was not dropped"
    );
    assert!(
        stream.next().await.is_none(),
        "{name}: an item after the error"
    );
    assert!(stream.next().await.is_none(), "{name}");
    assert_eq!(
        probe.pulled.load(Ordering::SeqCst),
        2,
        "{name}: pulled past the error"
    );
}

macro_rules! layered {
    ($name:expr, $layer:expr) => {{
        let probe = Probe::default();
        let mut svc = $layer.layer(probe.service());
        let stream = svc
            .ready()
            .await
            .unwrap()
            .call(ToolRequest::new("t", "{}"))
            .await
            .unwrap();
        check($name, Box::pin(stream), &probe).await;
    }};
}

#[tokio::test(start_paused = true)]
async fn no_layer_that_watches_the_stream_lets_an_item_through_after_an_error() {
    layered!("trace", TraceLayer::new());
    layered!("timeout", TimeoutLayer::new().idle(Duration::from_secs(1)));
    layered!("retry", RetryLayer::new(RetryPolicy::new()));
    layered!("concurrency", ConcurrencyLimitLayer::new(1));
    layered!("catch_panic", CatchPanicLayer::new());
    let allow = || Guardrail::from_fn("allow", |_| std::future::ready(Verdict::Allow));
    layered!("guardrail", GuardrailLayer::new().output(allow()));
}

#[tokio::test]
async fn a_tool_stream_and_the_toolbox_stop_at_the_first_error() {
    let probe = Probe::default();
    let stream = ToolStream::new(
        probe
            .service()
            .oneshot(ToolRequest::new("t", "{}"))
            .await
            .unwrap(),
    );
    check("ToolStream::new", stream, &probe).await;

    let probe = Probe::default();
    let raw = tool::raw(ToolInfo::new("raw"), {
        let probe = probe.clone();
        move |_| ErrThenOk {
            pulled: probe.pulled.clone(),
            _dropped: DropFlag(probe.dropped.clone()),
        }
    });
    let toolbox = Toolbox::new().tool(raw);
    let stream = toolbox
        .oneshot(ToolRequest::new("raw", "{}"))
        .await
        .unwrap();
    check("Toolbox", stream, &probe).await;
}

#[tokio::test(start_paused = true)]
async fn a_permit_is_never_given_back_while_the_failed_stream_still_runs() {
    // Limit 1: once the first call's stream failed, its stream is gone
    // before the permit is, so a second call never runs beside it.
    let first = Probe::default();
    let mut limited = ConcurrencyLimitLayer::new(1).layer(first.service());
    let mut stream = limited
        .ready()
        .await
        .unwrap()
        .call(ToolRequest::new("t", "{}"))
        .await
        .unwrap();
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.holds_permit());
    assert!(stream.next().await.unwrap().is_err());
    assert!(first.dropped.load(Ordering::SeqCst));
    assert!(!stream.holds_permit());
    // The permit is free for the next call while `stream` is still alive.
    let next = tokio::time::timeout(Duration::from_secs(1), limited.ready()).await;
    assert!(next.is_ok(), "the permit was not released at the error");
    drop(stream);

    // The rate limit hands the stream through; the toolbox fuses it.
    let probe = Probe::default();
    let toolbox = Toolbox::new().service(
        ToolInfo::new("limited"),
        RateLimitLayer::global(Quota::per_second(NonZeroU32::MAX)).layer(probe.service()),
    );
    let stream = toolbox
        .oneshot(ToolRequest::new("limited", "{}"))
        .await
        .unwrap();
    check("rate_limit in a toolbox", stream, &probe).await;
}
