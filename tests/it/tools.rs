//! Tools from functions: when a call opens (its first item), cancellation,
//! context, codecs, raw tools.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolstack::tool::{self, ToolContext};
use toolstack::{
    ErrorKind, Progress, Resource, ToolError, ToolInfo, ToolOutput, ToolRequest, ToolResult,
};
use tower::{Service, ServiceExt};

#[derive(Deserialize, JsonSchema)]
struct N {
    n: u32,
}

#[derive(Serialize)]
struct Row {
    i: u32,
}

struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn items_after_the_first_are_encoded_only_when_polled() {
    let encoded = Arc::new(AtomicUsize::new(0));
    let counter = encoded.clone();
    let t = tool::from_stream("rows", |N { n }| {
        stream::iter((0..n).map(|i| Ok::<_, ToolError>(Row { i })))
    })
    .encode_with(move |row: Row| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::json(serde_json::json!({ "i": row.i })))
    });
    let mut s = t
        .oneshot(ToolRequest::new("rows", r#"{"n":5}"#))
        .await
        .unwrap();
    assert_eq!(
        encoded.load(Ordering::SeqCst),
        1,
        "the call opened with its first item, and no further"
    );
    s.next().await.unwrap().unwrap();
    s.next().await.unwrap().unwrap();
    assert_eq!(encoded.load(Ordering::SeqCst), 2);
    drop(s);
    assert_eq!(
        encoded.load(Ordering::SeqCst),
        2,
        "the rest is never encoded"
    );
}

#[tokio::test]
async fn the_function_runs_when_the_call_is_polled_and_has_returned_when_it_opens() {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let mut t = tool::from_fn("f", move |_: serde_json::Value| {
        let flag = flag.clone();
        async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, ToolError>("done")
        }
    });
    let call = t.call(ToolRequest::new("f", "{}"));
    tokio::task::yield_now().await;
    assert!(
        !ran.load(Ordering::SeqCst),
        "a future does nothing unpolled"
    );
    let s = call.await.unwrap();
    assert!(ran.load(Ordering::SeqCst), "opened: the function returned");
    let r = ToolResult::collect(s).await;
    assert_eq!(r.text(), "done");
}

#[tokio::test(start_paused = true)]
async fn a_streaming_tool_opens_at_its_first_item_and_streams_the_rest() {
    let t = tool::from_stream("ticker", |_: serde_json::Value| {
        stream::iter(0..3).then(|i| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, ToolError>(i)
        })
    });
    let start = tokio::time::Instant::now();
    let s = t.oneshot(ToolRequest::new("ticker", "{}")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1), "opened at item 0");
    let r = ToolResult::collect(s).await;
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(r.text(), "0\n1\n2");
}

#[tokio::test(start_paused = true)]
async fn progress_opens_a_call_whose_function_is_still_working() {
    let t =
        tool::from_fn_with_context("slow", |_: serde_json::Value, cx: ToolContext| async move {
            cx.report(Progress::new(1.0).total(2.0));
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, ToolError>("done")
        });
    let start = tokio::time::Instant::now();
    let mut s = Box::pin(t.oneshot(ToolRequest::new("slow", "{}")).await.unwrap());
    assert_eq!(start.elapsed(), Duration::ZERO, "opened by its progress");
    let first = s.next().await.unwrap().unwrap();
    assert!(first.as_progress().is_some(), "{first:?}");
    let r = ToolResult::collect(s).await;
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(r.text(), "done");
}

#[tokio::test]
async fn a_stream_that_ends_with_no_item_opens_empty() {
    let t = tool::from_stream("none", |_: serde_json::Value| {
        stream::empty::<Result<u32, ToolError>>()
    });
    let mut s = Box::pin(t.oneshot(ToolRequest::new("none", "{}")).await.unwrap());
    assert!(s.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_cancels_the_function_stream() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let t = tool::from_stream("ticker", move |_: serde_json::Value| {
        let guard = DropFlag(flag.clone());
        stream::unfold((0u32, guard), |(i, guard)| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, ToolError>(i), (i + 1, guard)))
        })
    });
    let mut s = Box::pin(t.oneshot(ToolRequest::new("ticker", "{}")).await.unwrap());
    assert_eq!(
        s.next()
            .await
            .unwrap()
            .unwrap()
            .as_json()
            .map(toolstack::Json::value),
        Some(serde_json::json!(0))
    );
    assert!(!dropped.load(Ordering::SeqCst));
    drop(s);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's stream was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_cancels_an_async_function() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let t = tool::from_fn("slow", move |_: serde_json::Value| {
        let guard = DropFlag(flag.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(guard);
            Ok::<_, ToolError>("never")
        }
    });
    let call = t.oneshot(ToolRequest::new("slow", "{}"));
    let mut call = Box::pin(call);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), call.as_mut())
            .await
            .is_err(),
        "still running"
    );
    assert!(!dropped.load(Ordering::SeqCst));
    drop(call);
    assert!(dropped.load(Ordering::SeqCst));
}

#[derive(Clone, Debug, PartialEq)]
struct Caller(&'static str);

#[tokio::test]
async fn context_carries_call_id_name_and_extensions() {
    let t = tool::from_fn_with_context(
        "whoami",
        |_: serde_json::Value, ctx: ToolContext| async move {
            let caller = ctx.extensions().get::<Caller>().cloned();
            Ok::<_, ToolError>(format!(
                "{} {} {:?}",
                ctx.call_id(),
                ctx.tool_name(),
                caller
            ))
        },
    );
    let req = ToolRequest::new("whoami", "{}")
        .with_id("call_7")
        .with_extension(Caller("alice"));
    let r = ToolResult::collect(t.oneshot(req).await.unwrap()).await;
    assert_eq!(r.text(), "call_7 whoami Some(Caller(\"alice\"))");
}

#[tokio::test]
async fn progress_from_a_spawned_task_reaches_the_stream_in_order() {
    let t = tool::from_fn_with_context("work", |N { n }, ctx: ToolContext| async move {
        let reporter = ctx.progress().clone();
        tokio::spawn(async move {
            for i in 1..=n {
                reporter.report(Progress::new(f64::from(i)).total(f64::from(n)));
                tokio::task::yield_now().await;
            }
        })
        .await
        .map_err(|e| ToolError::failed(e.to_string()))?;
        Ok::<_, ToolError>("finished")
    });
    let s = t
        .oneshot(ToolRequest::new("work", r#"{"n":3}"#))
        .await
        .unwrap();
    let items: Vec<ToolOutput> = s.map(Result::unwrap).collect().await;
    let progress: Vec<f64> = items
        .iter()
        .filter_map(|i| i.as_progress().map(|p| p.progress))
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0]);
    assert_eq!(items.last().unwrap().as_text(), Some("finished"));
}

#[tokio::test]
async fn progress_backlog_keeps_the_newest_reports() {
    let t = tool::from_fn_with_context(
        "burst",
        |_: serde_json::Value, ctx: ToolContext| async move {
            for i in 0..100 {
                ctx.report(Progress::new(f64::from(i)));
            }
            Ok::<_, ToolError>("ok")
        },
    );
    let s = t.oneshot(ToolRequest::new("burst", "{}")).await.unwrap();
    let items: Vec<ToolOutput> = s.map(Result::unwrap).collect().await;
    let progress: Vec<f64> = items
        .iter()
        .filter_map(|i| i.as_progress().map(|p| p.progress))
        .collect();
    assert_eq!(progress.len(), tool::PROGRESS_BACKLOG);
    assert_eq!(progress.last(), Some(&99.0));
    assert_eq!(
        progress.first(),
        Some(&((100 - tool::PROGRESS_BACKLOG) as f64))
    );
}

#[tokio::test]
async fn reporter_knows_when_the_stream_is_gone() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let t = tool::from_fn_with_context("keep", move |_: serde_json::Value, ctx: ToolContext| {
        if let Some(tx) = tx.lock().unwrap().take() {
            let _ = tx.send(ctx.progress().clone());
        }
        async { Ok::<_, ToolError>("ok") }
    });
    let s = t.oneshot(ToolRequest::new("keep", "{}")).await.unwrap();
    let reporter = rx.await.unwrap();
    assert!(!reporter.is_closed());
    drop(s);
    assert!(reporter.is_closed());
    reporter.report(Progress::new(1.0)); // goes nowhere, does not panic
}

#[tokio::test]
async fn an_error_ends_the_stream() {
    let t = tool::from_stream("flaky", |_: serde_json::Value| {
        stream::iter(vec![
            Ok("one".to_string()),
            Err(ToolError::failed("broke")),
            Ok("never".to_string()),
        ])
    });
    let s = t.oneshot(ToolRequest::new("flaky", "{}")).await.unwrap();
    let items: Vec<_> = s.collect().await;
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].as_ref().unwrap_err().message(), "broke");
}

#[tokio::test]
async fn custom_decoder_accepts_plain_text() {
    let t = tool::from_fn("shout", |text: String| async move {
        Ok::<_, ToolError>(text.to_uppercase())
    })
    .decode_with(|raw: &str| -> Result<String, ToolError> {
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(v) => v["text"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ToolError::invalid_arguments("missing field `text`")),
            Err(_) => Ok(raw.to_owned()),
        }
    });
    let r = ToolResult::collect(
        t.clone()
            .oneshot(ToolRequest::new("shout", "hi there"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.text(), "HI THERE");
    let r = ToolResult::collect(
        t.clone()
            .oneshot(ToolRequest::new("shout", r#"{"text":"yo"}"#))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.text(), "YO");
    let err = t
        .oneshot(ToolRequest::new("shout", "{}"))
        .await
        .unwrap_err();
    assert_eq!(err.message(), "missing field `text`");
}

#[tokio::test]
async fn default_encoder_maps_strings_values_and_tool_outputs() {
    let t = tool::from_stream("mixed", |_: serde_json::Value| {
        stream::iter(vec![
            Ok::<_, ToolError>(serde_json::json!("a string")),
            Ok(serde_json::json!({"k": 1})),
        ])
    });
    let items: Vec<ToolOutput> = t
        .oneshot(ToolRequest::new("mixed", "{}"))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(items[0], ToolOutput::text("a string"));
    assert_eq!(items[1], ToolOutput::json(serde_json::json!({"k": 1})));

    let t = tool::from_stream("content", |_: serde_json::Value| {
        stream::iter(vec![
            Ok::<_, ToolError>(ToolOutput::image("iVBORw0KGgo=", "image/png")),
            Ok(ToolOutput::resource(
                Resource::text("file:///a.txt", "hello").mime_type("text/plain"),
            )),
        ])
    });
    let r = ToolResult::collect(t.oneshot(ToolRequest::new("content", "{}")).await.unwrap()).await;
    assert!(matches!(r.content[0], ToolOutput::Image(ref m) if m.mime_type == "image/png"));
    assert!(
        matches!(r.content[1], ToolOutput::Resource(ref res) if res.text.as_deref() == Some("hello"))
    );
}

#[tokio::test]
async fn raw_tool_receives_the_arguments_untouched() {
    let info = ToolInfo::new("echo_raw").with_description("Echoes its raw arguments");
    let t = tool::raw(info, |req: ToolRequest| {
        stream::iter([Ok(ToolOutput::text(format!("<{}>", req.arguments())))])
    });
    let r = ToolResult::collect(
        t.oneshot(ToolRequest::new("echo_raw", "not json {"))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.text(), "<not json {>");
}

#[tokio::test]
async fn errors_from_the_function_keep_their_kind() {
    let t = tool::from_fn("deny", |_: serde_json::Value| async {
        Err::<String, _>(ToolError::new(ErrorKind::Denied, "not allowed"))
    });
    // Failed before answering anything: the call's future fails.
    let err = t.oneshot(ToolRequest::new("deny", "{}")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Denied);
    let r = ToolResult::from_error(err);
    assert_eq!(r.text(), r#"{"error":"not allowed","kind":"denied"}"#);
}

#[tokio::test]
async fn an_error_after_an_item_is_the_streams_last_item() {
    let t = tool::from_stream("half", |_: serde_json::Value| {
        stream::iter([Ok(1), Err(ToolError::new(ErrorKind::Denied, "no more"))])
    });
    let r = ToolResult::collect(t.oneshot(ToolRequest::new("half", "{}")).await.unwrap()).await;
    assert!(r.is_error);
    assert_eq!(r.error.as_ref().unwrap().kind(), ErrorKind::Denied);
}

#[tokio::test]
async fn string_errors_become_failures() {
    let t = tool::from_fn("s", |_: serde_json::Value| async {
        Err::<String, String>("it went wrong".into())
    });
    let err = t.oneshot(ToolRequest::new("s", "{}")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.message(), "it went wrong");
}

#[test]
fn retry_after_is_rounded_up_to_the_next_whole_millisecond_for_the_model() {
    for (after, ms) in [
        (Duration::from_micros(1_000_500), 1001),
        (Duration::from_nanos(1), 1),
        (Duration::from_millis(1500), 1500),
        (Duration::from_micros(999), 1),
        (Duration::ZERO, 0),
    ] {
        let err = ToolError::rate_limited(Some(after));
        assert_eq!(err.to_model_json()["retry_after_ms"], ms, "{after:?}");
        assert_eq!(
            err.message(),
            format!("rate limited; retry after {ms} ms"),
            "{after:?}"
        );
        // Read back, it is never shorter than what was asked.
        let back = ToolError::from_model_json(&err.to_model_json()).unwrap();
        assert!(back.retry_after().unwrap() >= after, "{after:?}");
    }
    let forever = ToolError::rate_limited(Some(Duration::MAX));
    assert_eq!(forever.to_model_json()["retry_after_ms"], u64::MAX);
}

#[test]
fn any_error_that_says_when_to_come_back_tells_the_model_and_reads_back() {
    // An unavailable endpoint's `Retry-After: 2` (the OpenAI client sets it)
    // reaches the model, and survives a trip through MCP or HTTP.
    let err = ToolError::new(ErrorKind::Unavailable, "the endpoint is down")
        .with_retry_after(Duration::from_millis(2000));
    let json = err.to_model_json();
    assert_eq!(json["kind"], "unavailable");
    assert_eq!(json["retry_after_ms"], 2000);
    let back = ToolError::from_model_json(&json).unwrap();
    assert_eq!(back.kind(), ErrorKind::Unavailable);
    assert_eq!(back.retry_after(), Some(Duration::from_secs(2)));
    // Without one, no field.
    let plain = ToolError::failed("no");
    assert!(plain.to_model_json().get("retry_after_ms").is_none());
}
