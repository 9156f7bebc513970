//! One behaviour across every layer (and the toolbox) for a future or a
//! stream polled again after it completed: a future answers with
//! `ToolError::polled_after_completion` (kind `failed`, never a panic, never
//! the inner future polled again), a stream stays ended.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::noop_waker_ref;
use futures_util::Stream;
use toolstack::Toolbox;
use toolstack::{BoxTool, ErrorKind, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest};
use toolstack_layers::catch_panic::CatchPanicLayer;
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use toolstack_layers::retry::{RetryLayer, RetryPolicy};
use toolstack_layers::timeout::TimeoutLayer;
use toolstack_layers::trace::TraceLayer;
use toolstack_layers::validate::ValidateLayer;
use tower::{Layer, Service};

/// A tool whose one text item is ready at once; its future and stream
/// panic if polled after completion, as many futures may.
fn strict_service() -> impl Service<
    ToolRequest,
    Response = StrictStream,
    Error = ToolError,
    Future = impl Future<Output = Result<StrictStream, ToolError>> + Send,
> + Clone
       + Send
       + Sync {
    tower::service_fn(|_: ToolRequest| {
        let mut done = false;
        std::future::poll_fn(move |_| {
            assert!(!done, "the inner future was polled after it completed");
            done = true;
            Poll::Ready(Ok::<_, ToolError>(strict_stream()))
        })
    })
}

fn strict_tool() -> BoxTool {
    BoxTool::with_info(ToolInfo::new("t"), strict_service())
}

fn strict_stream() -> StrictStream {
    StrictStream(0)
}

struct StrictStream(u8);

impl Stream for StrictStream {
    type Item = ToolItem;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<ToolItem>> {
        self.0 += 1;
        match self.0 {
            1 => Poll::Ready(Some(Ok(ToolOutput::text("ok")))),
            2 => Poll::Ready(None),
            _ => panic!("the inner stream was polled after it ended"),
        }
    }
}

/// Polls `future` twice after it is ready, and its stream past its end.
fn check<F, St>(name: &str, future: F)
where
    F: Future<Output = Result<St, ToolError>>,
    St: Stream<Item = ToolItem>,
{
    check_future(name, future, true)
}

/// As [`check`], for a layer that hands the tool's stream through
/// unchanged: only the future is the layer's.
fn check_future_only<F, St>(name: &str, future: F)
where
    F: Future<Output = Result<St, ToolError>>,
    St: Stream<Item = ToolItem>,
{
    check_future(name, future, false)
}

fn check_future<F, St>(name: &str, future: F, stream_too: bool)
where
    F: Future<Output = Result<St, ToolError>>,
    St: Stream<Item = ToolItem>,
{
    eprintln!("checking {name}");
    let mut cx = Context::from_waker(noop_waker_ref());
    let mut future = pin!(future);
    let Poll::Ready(Ok(stream)) = future.as_mut().poll(&mut cx) else {
        panic!("{name}: the call did not open at once");
    };
    for _ in 0..2 {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(Err(err)) => {
                assert_eq!(err.kind(), ErrorKind::Failed, "{name}: {err}");
                assert!(!err.is_retryable(), "{name}");
                assert!(
                    err.message().contains("was polled after it completed"),
                    "{name}: {err}"
                );
            }
            Poll::Ready(Ok(_)) => panic!("{name}: opened a second time"),
            Poll::Pending => panic!("{name}: pending after completion"),
        }
    }
    if !stream_too {
        return;
    }
    let mut stream = pin!(stream);
    assert!(matches!(
        stream.as_mut().poll_next(&mut cx),
        Poll::Ready(Some(Ok(_)))
    ));
    for _ in 0..3 {
        assert!(
            matches!(stream.as_mut().poll_next(&mut cx), Poll::Ready(None)),
            "{name}: the stream did not stay ended"
        );
    }
}

/// Calls the layer over the strict tool directly (not through a toolbox,
/// whose own stream would hide the layer's), with the description a
/// toolbox would set.
macro_rules! call {
    ($layer:expr) => {{
        let mut service = $layer.layer(strict_service());
        let mut cx = Context::from_waker(noop_waker_ref());
        assert!(service.poll_ready(&mut cx).is_ready());
        let mut request = ToolRequest::new("t", "{}");
        request.set_info(Arc::new(ToolInfo::new("t")));
        service.call(request)
    }};
}

#[tokio::test(start_paused = true)]
async fn every_layer_answers_a_poll_after_completion_with_one_typed_error() {
    check("trace", call!(TraceLayer::new()));
    check(
        "timeout",
        call!(TimeoutLayer::new().deadline(Duration::from_secs(1))),
    );
    check("retry", call!(RetryLayer::new(RetryPolicy::new())));
    check_future_only(
        "rate_limit",
        call!(RateLimitLayer::global(Quota::per_second(NonZeroU32::MAX))),
    );
    check("concurrency", call!(ConcurrencyLimitLayer::new(1)));
    check("catch_panic", call!(CatchPanicLayer::new()));
    check_future_only("validate", call!(ValidateLayer::new()));
}

#[tokio::test]
async fn a_box_tool_and_a_toolbox_answer_a_poll_after_completion_the_same_way() {
    check(
        "BoxTool",
        strict_tool().call_shared(ToolRequest::new("t", "{}")),
    );
    let toolbox = Toolbox::new().boxed(strict_tool());
    check("Toolbox", toolbox.dispatch(ToolRequest::new("t", "{}")));
}

#[test]
fn the_error_names_what_was_polled() {
    let err = ToolError::polled_after_completion("timeout::ResponseFuture");
    assert_eq!(
        err.message(),
        "timeout::ResponseFuture was polled after it completed (a bug in the code polling it)"
    );
}
