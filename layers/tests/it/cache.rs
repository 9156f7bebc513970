//! The result cache: hits replay and are marked, only safe tools are
//! cached, canonical keys, callers kept apart, only complete successful
//! results stored, expiry, single flight, size bound, under the agent.
#![cfg(feature = "cache")]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use toolstack::agent::{Agent, AgentEvent};
use toolstack::model::{Message, ScriptedModel, Turn};
use toolstack::{
    tool, BoxTool, ErrorKind, ToolAnnotations, ToolError, ToolItem, ToolOutput, ToolRequest,
    ToolResult, Toolbox,
};
use toolstack_layers::cache::{CacheLayer, MemoryCacheStore};
use tower::ServiceExt;

#[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
#[schemars(crate = "toolstack::schemars")]
struct Q {
    #[serde(default)]
    a: i64,
    #[serde(default)]
    b: i64,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    big: usize,
}

/// A tool that counts its runs; read-only unless `annotated` is false.
fn counting(runs: Arc<AtomicUsize>, annotated: bool) -> BoxTool {
    let tool = tool::from_stream("lookup", move |q: Q| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        stream::once(async move {
            if q.wait_ms > 0 {
                tokio::time::sleep(Duration::from_millis(q.wait_ms)).await;
            }
            if q.fail {
                return Err(ToolError::failed("lookup failed"));
            }
            Ok(ToolOutput::text(format!(
                "{}+{} (run {n}){}",
                q.a,
                q.b,
                "x".repeat(q.big)
            )))
        })
    });
    let tool = if annotated {
        tool.with_annotations(ToolAnnotations {
            read_only_hint: Some(true),
            ..Default::default()
        })
    } else {
        tool
    };
    BoxTool::new(tool)
}

async fn items<S>(service: &S, args: &str) -> Vec<ToolItem>
where
    S: tower::Service<ToolRequest, Response = toolstack::ToolStream, Error = ToolError> + Clone,
{
    // A call that failed before its first item: its error is its one item.
    match service
        .clone()
        .oneshot(ToolRequest::new("lookup", args.to_owned()))
        .await
    {
        Ok(stream) => stream.collect().await,
        Err(err) => vec![Err(err)],
    }
}

fn text(items: &[ToolItem]) -> String {
    let mut result = ToolResult::default();
    for item in items {
        match item {
            Ok(output) if !matches!(output, ToolOutput::Progress(_)) => result.push(output.clone()),
            Ok(_) => {}
            Err(err) => result.push_error(err.clone()),
        }
    }
    result.into_text()
}

fn layer() -> CacheLayer {
    CacheLayer::in_memory(1 << 20, Duration::from_secs(60))
}

/// The tool in a toolbox, under `layer`: the toolbox gives the layer the
/// tool's description (its annotations) through the request.
fn cached(tool: BoxTool, layer: CacheLayer) -> Toolbox {
    Toolbox::new().layered(tool, layer)
}

#[tokio::test]
async fn a_hit_replays_the_result_without_running_the_tool_and_is_marked() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(counting(runs.clone(), true), layer());
    let first = items(&service, r#"{"a": 1, "b": 2}"#).await;
    let second = items(&service, r#"{"a": 1, "b": 2}"#).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(text(&first), "1+2 (run 1)");
    assert_eq!(text(&second), "1+2 (run 1)");
    // The first run is not marked; the hit begins with its mark.
    assert!(!matches!(first[0], Ok(ToolOutput::Progress(_))));
    match &second[0] {
        Ok(ToolOutput::Progress(p)) => {
            assert!(p.message.as_deref().unwrap().starts_with("cached result"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_tool_not_annotated_safe_is_never_cached_unless_told() {
    let runs = Arc::new(AtomicUsize::new(0));
    let plain = cached(counting(runs.clone(), false), layer());
    items(&plain, "{}").await;
    items(&plain, "{}").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let all = cached(counting(runs.clone(), false), layer().cache_all());
    items(&all, "{}").await;
    items(&all, "{}").await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn key_order_and_whitespace_do_not_make_another_key_but_values_do() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(counting(runs.clone(), true), layer());
    items(&service, r#"{"b": 1, "a": 2}"#).await;
    items(&service, "{ \"a\":2,\n \"b\":1 }").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    items(&service, r#"{"a": 2, "b": 2}"#).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn text_the_tool_refuses_is_never_answered_from_another_calls_entry() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(counting(runs.clone(), true), layer());
    assert_eq!(text(&items(&service, "{}").await), "0+0 (run 1)");
    // Blank to the eye, not to the argument rules: a no-break space is not
    // `{}`, so the call is the tool's to refuse, not `{}`'s cached result.
    for blank in ["\u{a0}", "\u{2003}{}"] {
        let err = service
            .clone()
            .oneshot(ToolRequest::new("lookup", blank))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArguments, "{blank:?}");
        assert!(err.message().contains("U+"), "{blank:?}: {err}");
    }
    // Blank in JSON's own whitespace is `{}`, and hits.
    assert_eq!(text(&items(&service, " \n\t").await), "0+0 (run 1)");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "validate")]
#[tokio::test]
async fn under_a_validation_the_key_is_of_the_text_the_tool_gets_even_after_a_rewrite() {
    // The validation lends the value it parsed to the layers below; a layer
    // between that rewrites the text leaves that value behind with the old
    // text, and the cache keys the new one.
    let runs = Arc::new(AtomicUsize::new(0));
    let rewrite = |mut request: ToolRequest| {
        request.set_arguments(r#"{"a": 9}"#);
        request
    };
    let service = Toolbox::new().layered(
        counting(runs.clone(), true),
        tower::ServiceBuilder::new()
            .layer(toolstack_layers::validate::ValidateLayer::new())
            .map_request(rewrite)
            .layer(layer()),
    );
    assert_eq!(text(&items(&service, r#"{"a": 1}"#).await), "9+0 (run 1)");
    assert_eq!(text(&items(&service, r#"{"a": 2}"#).await), "9+0 (run 1)");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[derive(Clone, Debug, PartialEq)]
struct User(&'static str);

#[tokio::test]
async fn callers_are_kept_apart_and_a_call_without_one_is_not_cached() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(
        counting(runs.clone(), true),
        layer().caller_key(|ext| ext.get::<User>().map(|u| u.0.to_owned())),
    );
    let call = |user: Option<&'static str>| {
        let service = service.clone();
        async move {
            let mut request = ToolRequest::new("lookup", "{}");
            if let Some(user) = user {
                request.extensions_mut().insert(User(user));
            }
            let stream = service.oneshot(request).await.unwrap();
            text(&stream.collect::<Vec<ToolItem>>().await)
        }
    };
    assert_eq!(call(Some("ann")).await, "0+0 (run 1)");
    assert_eq!(call(Some("bob")).await, "0+0 (run 2)");
    assert_eq!(call(Some("ann")).await, "0+0 (run 1)");
    assert_eq!(call(None).await, "0+0 (run 3)");
    assert_eq!(call(None).await, "0+0 (run 4)");
}

#[tokio::test]
async fn errors_dropped_streams_and_results_too_large_are_not_stored() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(counting(runs.clone(), true), layer().max_entry_bytes(100));
    let failed = items(&service, r#"{"fail": true}"#).await;
    assert_eq!(
        failed.last().unwrap().as_ref().unwrap_err().kind(),
        ErrorKind::Failed
    );
    items(&service, r#"{"fail": true}"#).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let stream = service
        .clone()
        .oneshot(ToolRequest::new("lookup", r#"{"a": 7}"#))
        .await
        .unwrap();
    drop(stream);
    // The dropped call ran (3); nothing was stored, so it runs again (4).
    items(&service, r#"{"a": 7}"#).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);

    items(&service, r#"{"big": 200}"#).await;
    items(&service, r#"{"big": 200}"#).await;
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

#[tokio::test(start_paused = true)]
async fn an_entry_expires_after_its_time_to_live() {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = MemoryCacheStore::new(1 << 20, Duration::from_millis(50));
    let service = cached(counting(runs.clone(), true), CacheLayer::new(store.clone()));
    items(&service, "{}").await;
    items(&service, "{}").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(store.len(), 1);
    tokio::time::advance(Duration::from_millis(40)).await;
    items(&service, "{}").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "still fresh");
    tokio::time::advance(Duration::from_millis(20)).await;
    items(&service, "{}").await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "expired");
}

#[tokio::test(start_paused = true)]
async fn concurrent_identical_calls_run_the_tool_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let service = cached(counting(runs.clone(), true), layer());
    let calls = (0..10).map(|_| items(&service, r#"{"a": 5, "wait_ms": 100}"#));
    let results = futures_util::future::join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for result in &results {
        assert_eq!(text(result), "5+0 (run 1)");
    }
    // A leader that fails lets each follower run for itself.
    let calls = (0..3).map(|_| items(&service, r#"{"fail": true, "wait_ms": 100}"#));
    let results = futures_util::future::join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert!(results.iter().all(|r| r.last().unwrap().is_err()));
}

#[tokio::test]
async fn under_the_agent_a_repeated_call_is_answered_from_the_cache() {
    let runs = Arc::new(AtomicUsize::new(0));
    let toolbox = Toolbox::new()
        .boxed(counting(runs.clone(), true))
        .layer(layer());
    let model = ScriptedModel::new([
        Turn::new().tool_call("lookup", r#"{"a": 1}"#),
        Turn::new().tool_call("lookup", r#"{ "a": 1 }"#),
        Turn::new().text("done"),
    ]);
    let events: Vec<AgentEvent> = Agent::new(model, toolbox)
        .run(vec![Message::user("q")])
        .collect()
        .await;
    let results: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { result, .. } => Some(result.text()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["1+0 (run 1)", "1+0 (run 1)"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_hit_is_recorded_on_the_calls_span() {
    use support::capture::Capture;
    use toolstack_layers::ServiceBuilderExt;
    let runs = Arc::new(AtomicUsize::new(0));
    let stack = tower::ServiceBuilder::new().stream_trace().layer(layer());
    let service = Toolbox::new().layered(counting(runs, true), stack);
    items(&service, "{}").await;
    let capture = Capture::default();
    let _guard = capture.install();
    items(&service, "{}").await;
    let span = capture.tool_span();
    assert_eq!(
        span.fields.get("toolstack.cache").map(String::as_str),
        Some("hit")
    );
}
