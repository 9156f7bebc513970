//! The toolbox: dispatch, listing, visibility, readiness, layering, and
//! tower's stock middleware with its errors classified; then the algebra —
//! merge, nest, prefix, rename, filter, layer — and the resolvers that
//! travel with nested tools.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream;
use http::Extensions;
use schemars::JsonSchema;
use serde::Deserialize;
use toolstack::toolbox::ToolboxErrorKind;
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

fn named(name: String) -> BoxTool {
    BoxTool::new(tool::from_fn(name, |_: serde_json::Value| async move {
        Ok::<_, ToolError>("ok")
    }))
}

#[tokio::test]
async fn an_over_long_tool_name_is_refused_without_a_fuzzy_search_quoting_only_a_prefix() {
    let mut tb = Toolbox::new();
    for i in 0..200 {
        tb = tb.boxed(named(format!("tool_number_{i:03}")));
    }
    // A mebibyte of name: the closest-name search would cost its length
    // times each tool name's, seconds over 200 tools.
    let wanted = "t".repeat(1 << 20);
    let err = run(&tb, ToolRequest::new(wanted, "{}"))
        .await
        .error
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let quoted = format!("`{}…`", "t".repeat(toolstack::toolbox::QUOTED_NAME_CHARS));
    assert!(
        err.message().starts_with(&format!(
            "unknown tool {quoted}: the name is longer than the 128 characters of a tool name; available tools: tool_number_000, tool_number_001,"
        )),
        "{}",
        &err.message()[..200]
    );
    assert!(!err.message().contains("did you mean"));
    assert!(err.message().len() < 200 * 20, "{}", err.message().len());

    // Just over the limit: refused as such, even when a tool is close.
    let wanted = format!("{}x", "a".repeat(toolstack::toolbox::MAX_NAME_CHARS));
    let tb = Toolbox::new().boxed(named("a".repeat(toolstack::toolbox::MAX_NAME_CHARS)));
    let err = run(&tb, ToolRequest::new(wanted, "{}"))
        .await
        .error
        .unwrap();
    assert!(
        err.message().contains("longer than the 128 characters"),
        "{err}"
    );
    assert!(!err.message().contains("did you mean"), "{err}");
}

#[tokio::test]
async fn a_name_under_the_limit_is_still_matched_but_quoted_short() {
    let long = format!("{}_tool", "very_long".repeat(10));
    let tb = Toolbox::new().boxed(named(long.clone()));
    let wanted = format!("{}_tol", "very_long".repeat(10));
    let err = run(&tb, ToolRequest::new(wanted.clone(), "{}"))
        .await
        .error
        .unwrap();
    let quoted: String = wanted
        .chars()
        .take(toolstack::toolbox::QUOTED_NAME_CHARS)
        .collect();
    assert_eq!(
        err.message(),
        format!("unknown tool `{quoted}…`; did you mean `{long}`? available tools: {long}")
    );
}

#[tokio::test]
async fn a_tool_whose_name_is_past_the_limit_is_callable_but_never_suggested() {
    // Built with `tool`, a name is not checked; the search still skips it.
    let long = "b".repeat(300);
    let tb = Toolbox::new().boxed(named(long.clone())).tool(echo("bb"));
    let r = run(&tb, ToolRequest::new(long.clone(), "{}")).await;
    assert_eq!(r.text(), "ok");
    let err = run(&tb, ToolRequest::new("b".repeat(120), "{}"))
        .await
        .error
        .unwrap();
    assert!(!err.message().contains("did you mean"), "{err}");
    assert!(
        err.message()
            .ends_with(&format!("available tools: bb, {long}")),
        "{err}"
    );
}

#[tokio::test]
async fn an_empty_tool_name_is_an_unknown_tool_listing_the_tools() {
    let tb = Toolbox::new().tool(add()).tool(echo("search"));
    let err = run(&tb, ToolRequest::new("", "{}")).await.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.message(),
        "the tool call names no tool; available tools: add, search"
    );
    let err = run(&Toolbox::new(), ToolRequest::new("", "{}"))
        .await
        .error
        .unwrap();
    assert_eq!(
        err.message(),
        "the tool call names no tool; no tools are available"
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
    assert_eq!(r.structured_content(), Some(serde_json::json!(3)));

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
    assert_eq!(r.structured_content(), Some(serde_json::json!(2)));
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
async fn the_whole_toolbox_can_be_layered_as_one_service() {
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
    assert_eq!(r.structured_content(), Some(serde_json::json!(42)));
}

// ---- The algebra: merge, nest, prefix, rename, filter, layer. ----

/// A tool that answers with what it was called as: the request's name, and
/// the name and description in `request.info()`.
fn introspect(name: &'static str) -> BoxTool {
    BoxTool::with_info(
        ToolInfo::new(name).with_description(format!("the {name} tool")),
        tower::service_fn(|req: ToolRequest| async move {
            let info = req
                .info()
                .map(|i| format!("{} ({})", i.name(), i.description().unwrap_or("")))
                .unwrap_or_else(|| "none".to_owned());
            let text = format!("called as {} with info {info}", req.name());
            Ok::<_, ToolError>(ToolStream::new(stream::iter([Ok(ToolOutput::text(text))])))
        }),
    )
}

fn names(tb: &Toolbox) -> Vec<&str> {
    tb.infos().map(|i| i.name()).collect()
}

fn names_for<'a>(tb: &'a Toolbox, ext: &'a Extensions) -> Vec<&'a str> {
    tb.infos_for(ext).map(|i| i.name()).collect()
}

fn as_role(role: Role) -> Extensions {
    let mut ext = Extensions::new();
    ext.insert(role);
    ext
}

#[tokio::test]
async fn merge_lists_and_calls_the_tools_of_both_toolboxes() {
    let local = Toolbox::new().tool(add()).tool(echo("ping"));
    let remote = Toolbox::new().tool(echo("search")).tool(echo("fetch"));
    let tb = local.merge(remote);
    assert_eq!(names(&tb), ["add", "ping", "search", "fetch"]);
    let r = run(&tb, ToolRequest::new("add", r#"{"a":1,"b":2}"#)).await;
    assert_eq!(r.structured_content(), Some(serde_json::json!(3)));
    assert_eq!(
        run(&tb, ToolRequest::new("fetch", "{}")).await.text(),
        "fetch"
    );
}

#[tokio::test]
#[should_panic(expected = "cannot merge the toolboxes: both have a tool named `search`")]
async fn merge_refuses_a_name_in_both_toolboxes() {
    let _ = Toolbox::new()
        .tool(echo("search"))
        .merge(Toolbox::new().tool(echo("fetch")).tool(echo("search")));
}

#[tokio::test]
async fn try_merge_reports_the_clash_and_adds_nothing() {
    let mut tb = Toolbox::new().tool(echo("search"));
    let err = tb
        .try_merge(Toolbox::new().tool(echo("fetch")).tool(echo("search")))
        .unwrap_err();
    assert_eq!(err.name(), "search");
    assert_eq!(names(&tb), ["search"]);
}

#[tokio::test]
async fn nest_lists_the_tools_under_the_prefix_and_calls_them_by_it() {
    let tb = Toolbox::new()
        .tool(add())
        .nest("github", Toolbox::new().tool(echo("search")))
        .nest(
            "jira",
            Toolbox::new().tool(echo("search")).tool(echo("file")),
        );
    assert_eq!(
        names(&tb),
        ["add", "github.search", "jira.search", "jira.file"]
    );
    let r = run(&tb, ToolRequest::new("jira.file", "{}")).await;
    assert_eq!(r.text(), "file");
    let err = run(&tb, ToolRequest::new("search", "{}"))
        .await
        .error
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.message(),
        "unknown tool `search`; did you mean `jira.search`? available tools: jira.search, github.search, add, jira.file"
    );
}

#[tokio::test]
async fn a_nested_tool_gets_its_own_name_and_description() {
    let tb = Toolbox::new().nest("gh", Toolbox::new().boxed(introspect("search")));
    let listed = tb.infos().next().unwrap();
    assert_eq!(listed.name(), "gh.search");
    assert_eq!(listed.description(), Some("the search tool"));
    let r = run(&tb, ToolRequest::new("gh.search", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
}

#[tokio::test]
async fn a_nested_tool_taken_out_with_get_for_still_gets_its_own_name() {
    // The MCP server looks a tool up and calls it itself, without dispatch.
    let tb = Toolbox::new().nest("gh", Toolbox::new().boxed(introspect("search")));
    let tool = tb.get_for("gh.search", &Extensions::new()).unwrap();
    let stream = tool
        .call_shared(ToolRequest::new("gh.search", "{}"))
        .await
        .unwrap();
    let r = ToolResult::collect(stream).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
}

#[tokio::test]
#[should_panic(
    expected = "cannot nest under `jira`: a tool named `jira.search` is already in the toolbox"
)]
async fn nest_refuses_a_prefixed_name_already_in_the_toolbox() {
    let _ = Toolbox::new()
        .nest("jira", Toolbox::new().tool(echo("search")))
        .nest(
            "jira",
            Toolbox::new().tool(echo("file")).tool(echo("search")),
        );
}

#[tokio::test]
#[should_panic(expected = "a tool name prefix cannot be empty")]
async fn nest_refuses_an_empty_prefix() {
    let _ = Toolbox::new().nest("", Toolbox::new().tool(echo("search")));
}

#[tokio::test]
async fn try_nest_refuses_invalid_prefixes_and_leaves_the_toolbox_as_it_was() {
    let mut tb = Toolbox::new().tool(echo("a"));
    let inner = Toolbox::new().tool(echo("search"));
    for (prefix, message) in [
        ("", "a tool name prefix cannot be empty"),
        (
            "git hub",
            "`git hub` is not a tool name prefix: tool names are made of ASCII letters, digits, `_`, `-` and `.`",
        ),
        (
            "github.",
            "`github.` is not a tool name prefix: it cannot start or end with the `.` that joins it to the names",
        ),
        (
            ".github",
            "`.github` is not a tool name prefix: it cannot start or end with the `.` that joins it to the names",
        ),
        (
            "görüş",
            "`görüş` is not a tool name prefix: tool names are made of ASCII letters, digits, `_`, `-` and `.`",
        ),
    ] {
        let err = tb.try_nest(prefix, inner.clone()).unwrap_err();
        assert_eq!(err.kind(), ToolboxErrorKind::InvalidName, "{prefix:?}");
        assert_eq!(err.name(), prefix);
        assert_eq!(err.to_string(), message);
    }
    let long = "p".repeat(122);
    let err = tb.try_nest(&long, inner.clone()).unwrap_err();
    assert_eq!(err.kind(), ToolboxErrorKind::InvalidName);
    assert_eq!(err.name(), format!("{long}.search"));
    assert!(err
        .to_string()
        .ends_with("would be longer than the 128 characters of a tool name"));

    let err = tb
        .try_nest("x", Toolbox::new().tool(echo("b")))
        .and_then(|()| tb.try_nest("x", Toolbox::new().tool(echo("b"))))
        .unwrap_err();
    assert_eq!(err.kind(), ToolboxErrorKind::Duplicate);
    assert_eq!(err.name(), "x.b");
    assert_eq!(names(&tb), ["a", "x.b"]);

    // Dotted, dashed and underscored prefixes are names too.
    tb.try_nest("a.b-c_d", inner).unwrap();
    assert_eq!(names(&tb), ["a", "x.b", "a.b-c_d.search"]);
}

#[tokio::test]
async fn prefix_renames_every_tool_in_its_place() {
    let tb = Toolbox::new()
        .boxed(introspect("search"))
        .tool(add())
        .prefix("gh");
    assert_eq!(names(&tb), ["gh.search", "gh.add"]);
    let r = run(&tb, ToolRequest::new("gh.add", r#"{"a":2,"b":2}"#)).await;
    assert_eq!(r.structured_content(), Some(serde_json::json!(4)));
    let r = run(&tb, ToolRequest::new("gh.search", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
}

#[tokio::test]
async fn rename_lists_the_tool_under_the_new_name_and_calls_it_with_its_own() {
    let tb = Toolbox::new()
        .tool(echo("a"))
        .boxed(introspect("search"))
        .tool(echo("z"))
        .rename("search", "find");
    assert_eq!(names(&tb), ["a", "find", "z"]);
    let r = run(&tb, ToolRequest::new("find", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
    let err = run(&tb, ToolRequest::new("search", "{}"))
        .await
        .error
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    // Renamed again, and nested: still one hop back to the tool's own name.
    let tb = Toolbox::new().nest("x", tb.rename("find", "lookup"));
    assert_eq!(names(&tb), ["x.a", "x.lookup", "x.z"]);
    let r = run(&tb, ToolRequest::new("x.lookup", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
}

#[tokio::test]
#[should_panic(expected = "cannot rename `serch`: there is no tool of that name")]
async fn rename_of_a_missing_tool_panics_naming_it() {
    let _ = Toolbox::new().tool(echo("search")).rename("serch", "find");
}

#[tokio::test]
#[should_panic(
    expected = "cannot rename `search` to `fetch`: a tool named `fetch` is already in the toolbox"
)]
async fn rename_onto_a_taken_name_panics_naming_both() {
    let _ = Toolbox::new()
        .tool(echo("search"))
        .tool(echo("fetch"))
        .rename("search", "fetch");
}

#[tokio::test]
async fn try_rename_reports_each_error_and_leaves_the_toolbox_as_it_was() {
    let mut tb = Toolbox::new().tool(echo("search")).tool(echo("fetch"));
    let err = tb.try_rename("nope", "x").unwrap_err();
    assert_eq!(err.kind(), ToolboxErrorKind::UnknownTool);
    assert_eq!(err.name(), "nope");
    let err = tb.try_rename("search", "fetch").unwrap_err();
    assert_eq!(err.kind(), ToolboxErrorKind::Duplicate);
    assert_eq!(err.name(), "fetch");
    for bad in ["", "find it", "find/it", &"f".repeat(129)] {
        let err = tb.try_rename("search", bad).unwrap_err();
        assert_eq!(err.kind(), ToolboxErrorKind::InvalidName, "{bad:?}");
        assert_eq!(err.name(), bad);
    }
    assert_eq!(
        tb.try_rename("search", "find it").unwrap_err().to_string(),
        "`find it` is not a tool name: tool names are 1 to 128 ASCII letters, digits, `_`, `-` and `.`"
    );
    assert_eq!(names(&tb), ["search", "fetch"]);
    assert_eq!(
        run(&tb, ToolRequest::new("search", "{}")).await.text(),
        "search"
    );
    tb.try_rename("search", "search").unwrap();
    assert_eq!(names(&tb), ["search", "fetch"]);
}

#[tokio::test]
async fn filter_keeps_only_the_tools_that_pass() {
    let tb = Toolbox::new()
        .tool(echo("read"))
        .tool(echo("delete"))
        .tool(echo("list"))
        .filter(|info| info.name() != "delete");
    assert_eq!(names(&tb), ["read", "list"]);
    assert!(tb.get("delete").is_none());
    assert_eq!(
        run(&tb, ToolRequest::new("list", "{}")).await.text(),
        "list"
    );
    let err = run(&tb, ToolRequest::new("delete", "{}"))
        .await
        .error
        .unwrap();
    assert_eq!(
        err.message(),
        "unknown tool `delete`; available tools: read, list"
    );
}

#[tokio::test]
async fn layer_wraps_every_tool_in_the_toolbox_but_not_one_added_after() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let tb = Toolbox::new()
        .tool(add())
        .nest("gh", Toolbox::new().boxed(introspect("search")))
        .layer(tower::util::MapRequestLayer::new(
            move |req: ToolRequest| {
                let info = req.info().map_or("none", |i| i.name()).to_owned();
                log.lock().unwrap().push(format!("{} {info}", req.name()));
                req
            },
        ))
        .tool(echo("after"));

    let r = run(&tb, ToolRequest::new("add", r#"{"a":1,"b":1}"#)).await;
    assert_eq!(r.structured_content(), Some(serde_json::json!(2)));
    let r = run(&tb, ToolRequest::new("gh.search", "{}")).await;
    // The layer sees the call as this toolbox lists it; the tool, as its own.
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
    assert_eq!(
        run(&tb, ToolRequest::new("after", "{}")).await.text(),
        "after"
    );
    assert_eq!(*seen.lock().unwrap(), ["add add", "gh.search gh.search"]);
}

#[tokio::test]
async fn layer_counts_every_call_of_every_tool_and_leaves_the_original_alone() {
    let calls = Arc::new(AtomicUsize::new(0));
    let count = calls.clone();
    let plain = Toolbox::new().tool(echo("a")).tool(echo("b"));
    let layered = plain.clone().layer(tower::util::MapRequestLayer::new(
        move |req: ToolRequest| {
            count.fetch_add(1, Ordering::SeqCst);
            req
        },
    ));
    for name in ["a", "b", "a"] {
        run(&layered, ToolRequest::new(name, "{}")).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    run(&plain, ToolRequest::new("a", "{}")).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the clone was layered, not the original"
    );
}

#[tokio::test]
async fn layer_tool_wraps_the_one_tool_named_and_refuses_an_unknown_name() {
    let calls = Arc::new(AtomicUsize::new(0));
    let count = calls.clone();
    let counting = tower::util::MapRequestLayer::new(move |req: ToolRequest| {
        count.fetch_add(1, Ordering::SeqCst);
        req
    });
    let tb = Toolbox::new()
        .tool(echo("a"))
        .nest("remote", Toolbox::new().tool(echo("b")))
        .layer_tool("remote.b", counting.clone());
    assert_eq!(run(&tb, ToolRequest::new("a", "{}")).await.text(), "a");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "`a` is not wrapped");
    assert_eq!(
        run(&tb, ToolRequest::new("remote.b", "{}")).await.text(),
        "b"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Listed as before, in its place.
    assert_eq!(names(&tb), ["a", "remote.b"]);

    let mut tb = tb;
    let err = tb.try_layer_tool("c", counting).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot layer `c`: there is no tool of that name"
    );
}

// ---- Resolvers travel with the tools. ----

/// Hides `delete` (by the name this resolver's own toolbox lists) from
/// all but admins.
fn admins_delete(info: &ToolInfo, ext: &Extensions) -> bool {
    info.name() != "delete" || ext.get::<Role>() == Some(&Role::Admin)
}

#[tokio::test]
async fn a_nested_toolbox_keeps_its_resolver_which_sees_the_inner_names() {
    let inner = Toolbox::new()
        .tool(echo("read"))
        .tool(echo("delete"))
        .resolver(admins_delete);
    let tb = Toolbox::new().tool(echo("delete")).nest("db", inner);
    let (guest, admin) = (as_role(Role::Guest), as_role(Role::Admin));

    // The inner resolver knows the tool as `delete`, not `db.delete`; the
    // outer `delete` is none of its business.
    assert_eq!(names_for(&tb, &guest), ["delete", "db.read"]);
    assert_eq!(names_for(&tb, &admin), ["delete", "db.read", "db.delete"]);
    assert!(tb.get_for("db.delete", &guest).is_none());

    let r = run(
        &tb,
        ToolRequest::new("db.delete", "{}").with_extension(Role::Guest),
    )
    .await;
    let err = r.error.unwrap();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.message(),
        "unknown tool `db.delete`; did you mean `delete`? available tools: delete, db.read"
    );
    let r = run(
        &tb,
        ToolRequest::new("db.delete", "{}").with_extension(Role::Admin),
    )
    .await;
    assert_eq!(r.text(), "delete");
}

#[tokio::test]
async fn the_outer_resolver_covers_nested_tools_by_their_prefixed_names() {
    let tb = Toolbox::new()
        .tool(echo("read"))
        .nest(
            "danger",
            Toolbox::new().tool(echo("drop")).tool(echo("read")),
        )
        .resolver(|info: &ToolInfo, ext: &Extensions| {
            !info.name().starts_with("danger.") || ext.get::<Role>() == Some(&Role::Admin)
        });
    let (guest, admin) = (as_role(Role::Guest), as_role(Role::Admin));
    assert_eq!(names_for(&tb, &guest), ["read"]);
    assert_eq!(
        names_for(&tb, &admin),
        ["read", "danger.drop", "danger.read"]
    );
    let r = run(
        &tb,
        ToolRequest::new("danger.drop", "{}").with_extension(Role::Guest),
    )
    .await;
    assert_eq!(r.error.unwrap().kind(), ErrorKind::NotFound);
    let r = run(
        &tb,
        ToolRequest::new("danger.drop", "{}").with_extension(Role::Admin),
    )
    .await;
    assert_eq!(r.text(), "drop");
}

#[tokio::test]
async fn inner_and_outer_resolvers_must_both_allow_a_call() {
    let inner = Toolbox::new().tool(echo("delete")).resolver(admins_delete);
    // The outer one lets nobody at `db.*` without a role at all.
    let tb = Toolbox::new()
        .nest("db", inner)
        .resolver(|_: &ToolInfo, ext: &Extensions| ext.get::<Role>().is_some());
    assert!(names_for(&tb, &Extensions::new()).is_empty());
    assert!(names_for(&tb, &as_role(Role::Guest)).is_empty());
    assert_eq!(names_for(&tb, &as_role(Role::Admin)), ["db.delete"]);
    let r = run(&tb, ToolRequest::new("db.delete", "{}")).await;
    assert_eq!(r.error.unwrap().kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn merge_keeps_each_resolver_to_its_toolboxs_tools_and_the_receivers_to_all() {
    let admins_only = |_: &ToolInfo, ext: &Extensions| ext.get::<Role>() == Some(&Role::Admin);
    let local = Toolbox::new().tool(echo("local")).resolver(admins_only);
    let remote = Toolbox::new()
        .tool(echo("delete"))
        .tool(echo("read"))
        .resolver(admins_delete);
    let guest = as_role(Role::Guest);

    // Merged into a new toolbox, each resolver covers its own tools.
    let tb = Toolbox::new().merge(local.clone()).merge(remote.clone());
    assert_eq!(names_for(&tb, &guest), ["read"]);
    assert_eq!(
        names_for(&tb, &as_role(Role::Admin)),
        ["local", "delete", "read"]
    );
    let r = run(
        &tb,
        ToolRequest::new("read", "{}").with_extension(Role::Guest),
    )
    .await;
    assert_eq!(r.text(), "read");

    // Merged into `local`, local's resolver is the toolbox's: it covers all.
    let tb = local.merge(remote);
    assert!(names_for(&tb, &guest).is_empty());
}

#[tokio::test]
async fn prefix_keeps_the_old_resolver_on_the_unprefixed_names() {
    let tb = Toolbox::new()
        .tool(echo("read"))
        .tool(echo("delete"))
        .resolver(admins_delete)
        .prefix("db");
    assert_eq!(names_for(&tb, &as_role(Role::Guest)), ["db.read"]);
    assert_eq!(
        names_for(&tb, &as_role(Role::Admin)),
        ["db.read", "db.delete"]
    );
}

#[tokio::test]
async fn a_toolbox_nested_two_levels_deep_is_called_through_the_outer_name() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let recorder = |level: &'static str| {
        let seen = seen.clone();
        move |info: &ToolInfo, _: &Extensions| {
            seen.lock()
                .unwrap()
                .push(format!("{level}: {}", info.name()));
            true
        }
    };
    let innermost = Toolbox::new()
        .boxed(introspect("search"))
        .resolver(recorder("innermost"));
    let middle = Toolbox::new()
        .tool(echo("ping"))
        .nest("issues", innermost)
        .resolver(recorder("middle"));
    let outer = Toolbox::new()
        .nest("jira", middle)
        .resolver(recorder("outer"));

    assert_eq!(names(&outer), ["jira.ping", "jira.issues.search"]);
    let r = run(&outer, ToolRequest::new("jira.issues.search", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
    // Each resolver saw the name its own toolbox lists the tool by.
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "innermost: search",
            "middle: issues.search",
            "outer: jira.issues.search",
        ]
    );
}

#[tokio::test]
async fn nested_and_renamed_tools_are_found_past_the_short_scan() {
    let many = (0..20).fold(Toolbox::new(), |tb, i| {
        let name: &'static str = Box::leak(format!("t{i}").into_boxed_str());
        tb.tool(echo(name))
    });
    let tb = Toolbox::new()
        .tool(echo("local"))
        .nest("many", many)
        .rename("many.t19", "last");
    assert_eq!(tb.len(), 21);
    assert_eq!(
        run(&tb, ToolRequest::new("many.t7", "{}")).await.text(),
        "t7"
    );
    assert_eq!(run(&tb, ToolRequest::new("last", "{}")).await.text(), "t19");
    assert!(tb.get("many.t19").is_none());
    let tb = tb.filter(|info| info.name() != "many.t3");
    assert_eq!(tb.len(), 20);
    assert!(tb.get("many.t3").is_none());
    assert_eq!(run(&tb, ToolRequest::new("last", "{}")).await.text(), "t19");
}

#[tokio::test]
async fn nest_with_an_underscore_gives_names_openai_accepts() {
    let tb = Toolbox::new().nest_with("github", '_', Toolbox::new().boxed(introspect("search")));
    assert_eq!(names(&tb), ["github_search"]);
    let r = run(&tb, ToolRequest::new("github_search", "{}")).await;
    assert_eq!(
        r.text(),
        "called as search with info search (the search tool)"
    );
    let err = Toolbox::new()
        .try_nest_with("github", '/', Toolbox::new().boxed(introspect("search")))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`/` cannot join a prefix to a tool name: use `.`, `_` or `-`"
    );
    let err = Toolbox::new().try_prefix_with("github_", '_').unwrap_err();
    assert!(
        err.to_string().contains("cannot start or end with the `_`"),
        "{err}"
    );
}
