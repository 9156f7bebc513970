//! The toolbox: dispatch, listing, visibility, readiness, layering, and
//! tower's stock middleware with its errors classified.

use std::time::Duration;

use futures_util::stream;
use http::Extensions;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::{
    tool, BoxTool, ErrorKind, TimeoutPhase, ToolError, ToolInfo, ToolOutput, ToolRequest,
    ToolResult, ToolStream, Toolbox,
};
use tower::{BoxError, ServiceBuilder, ServiceExt};

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn add() -> BoxTool {
    BoxTool::new(tool::from_fn("add", |Add { a, b }| async move {
        Ok::<_, ToolError>(a + b)
    }))
}

fn echo(name: &'static str) -> BoxTool {
    BoxTool::new(tool::from_fn(
        name,
        move |_: serde_json::Value| async move { Ok::<_, ToolError>(name) },
    ))
}

async fn run(tb: &Toolbox, req: ToolRequest) -> ToolResult {
    match tb.clone().oneshot(req).await {
        Ok(s) => ToolResult::collect(s).await,
        Err(e) => ToolResult::from_error(e),
    }
}

#[tokio::test]
async fn lists_tools_in_the_order_added() {
    let tb = Toolbox::new().tool(echo("b")).tool(add()).tool(echo("a"));
    let names: Vec<_> = tb.infos().map(|i| i.name()).collect();
    assert_eq!(names, ["b", "add", "a"]);
    assert_eq!(tb.len(), 3);
}

#[tokio::test]
#[should_panic(expected = "a tool named `add` is already in the toolbox")]
async fn duplicate_names_are_refused() {
    let _ = Toolbox::new().tool(add()).tool(add());
}

#[tokio::test]
async fn try_insert_reports_a_duplicate() {
    let mut tb = Toolbox::new().tool(add());
    let err = tb.try_insert(BoxTool::new(add())).unwrap_err();
    assert_eq!(err.name(), "add");
}

#[tokio::test]
async fn unknown_tool_lists_closest_first() {
    let tb = Toolbox::new()
        .tool(echo("search_web"))
        .tool(echo("get_weather"))
        .tool(echo("get_time"));
    let r = run(&tb, ToolRequest::new("get_wether", "{}")).await;
    assert_eq!(
        r.error.unwrap().message(),
        "unknown tool `get_wether`; did you mean `get_weather`? available tools: get_weather, get_time, search_web"
    );
    let r = run(&tb, ToolRequest::new("zzzzzzzzzzzzzz", "{}")).await;
    assert!(r
        .error
        .unwrap()
        .message()
        .starts_with("unknown tool `zzzzzzzzzzzzzz`; available tools:"));
    let r = run(&Toolbox::new(), ToolRequest::new("x", "{}")).await;
    assert_eq!(
        r.error.unwrap().message(),
        "unknown tool `x`; no tools are available"
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Guest,
    Admin,
}

#[tokio::test]
async fn resolver_hides_tools_from_listing_and_calls() {
    let tb = Toolbox::new()
        .tool(echo("read"))
        .tool(echo("delete"))
        .resolver(|info: &ToolInfo, ext: &Extensions| {
            info.name() != "delete" || ext.get::<Role>() == Some(&Role::Admin)
        });
    let mut guest = Extensions::new();
    guest.insert(Role::Guest);
    let mut admin = Extensions::new();
    admin.insert(Role::Admin);

    let listed: Vec<_> = tb.infos_for(&guest).map(|i| i.name()).collect();
    assert_eq!(listed, ["read"]);
    let listed: Vec<_> = tb.infos_for(&admin).map(|i| i.name()).collect();
    assert_eq!(listed, ["read", "delete"]);

    let r = run(
        &tb,
        ToolRequest::new("delete", "{}").with_extension(Role::Guest),
    )
    .await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        !err.message().contains("delete;"),
        "hidden tools are not listed: {err}"
    );
    assert_eq!(
        err.message(),
        "unknown tool `delete`; available tools: read"
    );

    let r = run(
        &tb,
        ToolRequest::new("delete", "{}").with_extension(Role::Admin),
    )
    .await;
    assert_eq!(r.text(), "delete");
}

#[tokio::test]
async fn toolbox_waits_for_the_tool_to_be_ready_before_calling_it() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, ToolStream>();
    handle.allow(0);
    let tb = Toolbox::new()
        .service(ToolInfo::new("gated"), mock)
        .tool(add());

    // The mock panics if called while unready; the toolbox must wait.
    let call = tokio::spawn(run_owned(tb.clone(), ToolRequest::new("gated", "{}")));
    tokio::task::yield_now().await;
    assert!(!call.is_finished());

    // A busy tool does not hold up the others.
    let r = run(&tb, ToolRequest::new("add", r#"{"a":1,"b":2}"#)).await;
    assert_eq!(r.structured_content, Some(serde_json::json!(3)));

    handle.allow(1);
    let (req, respond) = handle.next_request().await.unwrap();
    assert_eq!(req.name(), "gated");
    respond.send_response(ToolStream::new(stream::iter([Ok(ToolOutput::text(
        "opened",
    ))])));
    let r = call.await.unwrap();
    assert_eq!(r.text(), "opened");
}

async fn run_owned(tb: Toolbox, req: ToolRequest) -> ToolResult {
    run(&tb, req).await
}

#[tokio::test]
async fn readiness_errors_are_classified() {
    let (mock, mut handle) = tower_test::mock::pair::<ToolRequest, ToolStream>();
    handle.send_error(ToolError::new(ErrorKind::Unavailable, "backend down"));
    let tb = Toolbox::new().service(ToolInfo::new("down"), mock);
    let r = run(&tb, ToolRequest::new("down", "{}")).await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(err.message(), "backend down");
}

fn slow_opening(info: &str) -> BoxTool {
    BoxTool::with_info(
        ToolInfo::new(info.to_owned()),
        tower::service_fn(|_req: ToolRequest| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>(ToolStream::new(stream::empty()))
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn tower_timeout_becomes_an_open_timeout() {
    let tb = Toolbox::new().layered(
        slow_opening("slow"),
        ServiceBuilder::new().timeout(Duration::from_secs(2)),
    );
    let r = run(&tb, ToolRequest::new("slow", "{}")).await;
    let err = r.error.unwrap();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Open
        }
    );
    assert!(err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn tower_load_shed_over_concurrency_limit_becomes_overloaded() {
    let tb = Toolbox::new().layered(
        slow_opening("busy"),
        ServiceBuilder::new().load_shed().concurrency_limit(1),
    );
    let first = tokio::spawn(run_owned(tb.clone(), ToolRequest::new("busy", "{}")));
    tokio::task::yield_now().await;
    let r = run(&tb, ToolRequest::new("busy", "{}")).await;
    assert_eq!(r.error.unwrap().kind(), ErrorKind::Overloaded);
    first.abort();
}

#[tokio::test]
async fn closed_buffer_becomes_unavailable() {
    let (buffered, worker) = tower::buffer::Buffer::pair(add(), 4);
    drop(worker);
    let tb = Toolbox::new().service(ToolInfo::new("add"), buffered);
    let r = run(&tb, ToolRequest::new("add", r#"{"a":1,"b":1}"#)).await;
    assert_eq!(r.error.unwrap().kind(), ErrorKind::Unavailable);
}

#[tokio::test]
async fn buffered_tool_errors_keep_their_kind() {
    let (buffered, worker) = tower::buffer::Buffer::pair(add(), 4);
    tokio::spawn(worker);
    let tb = Toolbox::new().service(ToolInfo::new("add"), buffered);
    let r = run(&tb, ToolRequest::new("add", r#"{"a":1}"#)).await;
    assert_eq!(r.error.unwrap().kind(), ErrorKind::InvalidArguments);
    let r = run(&tb, ToolRequest::new("add", r#"{"a":1,"b":1}"#)).await;
    assert_eq!(r.structured_content, Some(serde_json::json!(2)));
}

#[test]
fn box_error_classification() {
    let e: BoxError = Box::new(ToolError::new(ErrorKind::Denied, "no"));
    assert_eq!(ToolError::from(e).kind(), ErrorKind::Denied);
    let e: BoxError = Box::new(tower::timeout::error::Elapsed::new());
    assert_eq!(
        ToolError::from(e).kind(),
        ErrorKind::Timeout {
            phase: TimeoutPhase::Open
        }
    );
    let e: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
    assert_eq!(ToolError::from(e).kind(), ErrorKind::Overloaded);
    let e: BoxError = "something odd".into();
    let err = ToolError::from(e);
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert_eq!(err.message(), "something odd");
    assert!(std::error::Error::source(&err).is_some());
}

#[tokio::test]
async fn the_whole_toolbox_can_be_layered_and_nested() {
    let inner = Toolbox::new().tool(add()).tool(echo("ping"));
    // Layer the toolbox as a whole: here, a request rewrite that routes an alias.
    let layered = ServiceBuilder::new()
        .map_request(|mut req: ToolRequest| {
            if req.name() == "plus" {
                req.set_name("add");
            }
            req
        })
        .service(inner.clone());
    let outer = Toolbox::new().service(ToolInfo::new("plus"), layered);
    let r = run(&outer, ToolRequest::new("plus", r#"{"a":20,"b":22}"#)).await;
    assert_eq!(r.structured_content, Some(serde_json::json!(42)));
}
