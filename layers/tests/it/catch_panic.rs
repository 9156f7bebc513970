//! CatchPanic: a panic in `call`, in the response future or in the stream
//! becomes one `Panicked` error; everything around the tool carries on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::{stream, StreamExt};
use toolstack::{tool, ErrorKind, ToolError, ToolInfo, ToolItem, ToolOutput, ToolRequest, Toolbox};
use toolstack_layers::catch_panic::{CatchPanic, CatchPanicLayer};
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_service::Service;

fn text(n: u32) -> ToolItem {
    Ok(ToolOutput::text(n.to_string()))
}

fn texts(items: &[ToolItem]) -> Vec<&str> {
    items
        .iter()
        .map(|i| {
            i.as_ref()
                .ok()
                .and_then(ToolOutput::as_text)
                .unwrap_or("<err>")
        })
        .collect()
}

/// Counts how many of its clones are alive, to see when a stream is dropped.
#[derive(Clone)]
struct Alive(Arc<()>);

impl Alive {
    fn new() -> Self {
        Alive(Arc::new(()))
    }
    fn count(&self) -> usize {
        Arc::strong_count(&self.0) - 1
    }
}

/// Yields 1, 2, then panics while producing 3.
fn panics_at_three(alive: Alive) -> impl futures_core::Stream<Item = ToolItem> + Send {
    stream::iter(1..=3).map(move |n| {
        let _keep = &alive;
        if n == 3 {
            panic!("stream broke at {n}");
        }
        text(n)
    })
}

#[tokio::test]
async fn normal_items_and_errors_pass_through_unchanged() {
    let t = tool::raw(ToolInfo::new("t"), |_| {
        stream::iter([text(1), text(2), Err(ToolError::failed("no"))])
    });
    let svc = CatchPanic::new(t);
    let items: Vec<_> = svc
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items.len(), 3);
    assert_eq!(texts(&items[..2]), ["1", "2"]);
    assert_eq!(items[2], Err(ToolError::failed("no")));
}

#[tokio::test]
async fn an_inner_error_keeps_its_kind() {
    let svc = service_fn(|_: ToolRequest| async {
        Err::<stream::Empty<ToolItem>, _>(ToolError::not_found("gone"))
    });
    let err = CatchPanic::new(svc)
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn panic_in_the_response_future_becomes_a_panicked_error() {
    let svc = service_fn(|_: ToolRequest| async {
        if true {
            panic!("future broke");
        }
        Ok::<_, ToolError>(stream::empty::<ToolItem>())
    });
    let err = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .service(svc)
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    assert_eq!(err.message(), "the tool panicked: future broke");
}

#[tokio::test]
async fn panic_in_the_stream_yields_the_items_then_one_panicked_error_then_the_end() {
    let alive = Alive::new();
    let a = alive.clone();
    let t = tool::raw(ToolInfo::new("t"), move |_| panics_at_three(a.clone()));
    let mut s = Box::pin(
        CatchPanic::new(t)
            .oneshot(ToolRequest::new("t", "{}"))
            .await
            .unwrap(),
    );
    assert_eq!(s.next().await, Some(text(1)));
    assert_eq!(s.next().await, Some(text(2)));
    let err = s.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    assert_eq!(err.message(), "the tool panicked: stream broke at 3");
    // The broken stream is dropped at once, not when the wrapper is.
    assert_eq!(alive.count(), 0);
    assert_eq!(s.next().await, None);
    assert_eq!(s.next().await, None);
}

#[tokio::test]
async fn panic_in_a_function_tool_body_becomes_a_panicked_error() {
    let t = tool::from_fn("f", |_: serde_json::Value| async {
        if true {
            panic!("body broke");
        }
        Ok::<_, ToolError>(1)
    });
    // The function runs in the call's future, so the panic fails it.
    let err = CatchPanic::new(t)
        .oneshot(ToolRequest::new("f", "{}"))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::new(ErrorKind::Panicked, "the tool panicked: body broke")
    );
}

/// A service whose `call` (or `poll_ready`) itself panics.
#[derive(Clone)]
struct PanicsIn {
    ready: bool,
}

impl Service<ToolRequest> for PanicsIn {
    type Response = stream::Empty<ToolItem>;
    type Error = ToolError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ToolError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ToolError>> {
        if self.ready {
            std::panic::panic_any(42_u32);
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: ToolRequest) -> Self::Future {
        panic!("call broke")
    }
}

#[tokio::test]
async fn panic_in_call_becomes_a_panicked_error() {
    let err = CatchPanic::new(PanicsIn { ready: false })
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    assert_eq!(err.message(), "the tool panicked: call broke");
}

#[tokio::test]
async fn panic_in_poll_ready_with_a_non_string_payload_becomes_a_panicked_error() {
    let err = CatchPanic::new(PanicsIn { ready: true })
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    assert_eq!(err.message(), "the tool panicked");
}

fn toolbox() -> Toolbox {
    let boom = tool::from_fn("boom", |_: serde_json::Value| async {
        if true {
            panic!("boom");
        }
        Ok::<_, ToolError>(0)
    });
    let good = tool::from_fn("good", |_: serde_json::Value| async {
        Ok::<_, ToolError>("fine")
    });
    Toolbox::new()
        .layered(boom, CatchPanicLayer::new())
        .layered(good, CatchPanicLayer::new())
}

async fn call(tb: &Toolbox, name: &str) -> Vec<ToolItem> {
    match tb
        .clone()
        .oneshot(ToolRequest::new(name.to_owned(), "{}"))
        .await
    {
        Ok(s) => s.collect().await,
        Err(e) => vec![Err(e)],
    }
}

#[tokio::test]
async fn a_toolbox_keeps_serving_after_a_tool_panics() {
    let tb = toolbox();
    for _ in 0..2 {
        let items = call(&tb, "boom").await;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].as_ref().unwrap_err().kind(), ErrorKind::Panicked);
        assert_eq!(texts(&call(&tb, "good").await), ["fine"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_to_a_panicking_and_a_good_tool_are_isolated() {
    let tb = toolbox();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let tb = tb.clone();
            let name = if i % 2 == 0 { "boom" } else { "good" };
            tokio::spawn(async move { (name, call(&tb, name).await) })
        })
        .collect();
    for task in tasks {
        let (name, items) = task.await.expect("the task itself must not panic");
        assert_eq!(items.len(), 1);
        match name {
            "boom" => assert_eq!(items[0].as_ref().unwrap_err().kind(), ErrorKind::Panicked),
            _ => assert_eq!(texts(&items), ["fine"]),
        }
    }
}

#[tokio::test]
async fn a_stream_dropped_early_drops_the_tool_stream() {
    let alive = Alive::new();
    let a = alive.clone();
    let t = tool::raw(ToolInfo::new("t"), move |_| panics_at_three(a.clone()));
    let mut s = CatchPanic::new(t)
        .oneshot(ToolRequest::new("t", "{}"))
        .await
        .unwrap();
    assert_eq!(s.next().await, Some(text(1)));
    assert_eq!(alive.count(), 1);
    drop(s);
    assert_eq!(alive.count(), 0);
}

#[tokio::test]
async fn call_counter_sees_every_call_once() {
    // The layer adds no calls of its own (no retry, no double poll).
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let svc = service_fn(move |_: ToolRequest| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ToolError>(stream::iter([text(7)])) }
    });
    let mut svc = CatchPanic::new(svc);
    for _ in 0..3 {
        let s = svc.ready().await.unwrap().call(ToolRequest::new("t", "{}"));
        let items: Vec<_> = s.await.unwrap().collect().await;
        assert_eq!(texts(&items), ["7"]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_ended_stream_is_not_polled_again() {
    // `unfold` panics when polled after its end; the wrapper must not turn
    // that into an error item after `None`.
    let t = tool::raw(ToolInfo::new("t"), |_| {
        stream::unfold(0_u32, |n| async move { (n < 1).then(|| (text(n), n + 1)) })
    });
    let mut s = Box::pin(
        CatchPanic::new(t)
            .oneshot(ToolRequest::new("t", "{}"))
            .await
            .unwrap(),
    );
    assert_eq!(s.next().await, Some(text(0)));
    assert_eq!(s.next().await, None);
    assert_eq!(s.next().await, None);
}
