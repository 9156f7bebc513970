//! The HTTP routes (`toolstack::http`) served on 127.0.0.1 with
//! `axum::serve` and called with a real HTTP client (reqwest): listing,
//! SSE calls, every refusal and its status, the example's bearer auth and
//! per-caller visibility (`toolstack_demo::http`, the app
//! `examples/http_server.rs` serves, tested as it runs), cancellation on
//! disconnect, nesting, keep-alive comments.
#![cfg(feature = "http")]

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::Request;
use axum::Router;
use futures_core::Stream;
use futures_util::{stream, StreamExt};
use reqwest::header::{HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use toolstack::http::{router, status_for, HttpTools, CALL_ID_HEADER, DEFAULT_KEEP_ALIVE};
use toolstack::{
    tool, BoxTool, ErrorKind, Progress, TimeoutPhase, ToolContext, ToolError, ToolInfo, ToolOutput,
    ToolRequest, Toolbox,
};
use toolstack_demo::http::{self as http_server, Caller};
use toolstack_layers::concurrency::ConcurrencyLimitLayer;
use toolstack_layers::rate_limit::{Quota, RateLimitLayer};
use tower::ServiceExt;

/// Bounds every wait on the network so that a broken test fails instead of
/// hanging; nothing here waits for it to pass.
const PATIENCE: Duration = Duration::from_secs(10);

async fn patiently<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

// ---------------------------------------------------------------- tools

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

fn add() -> BoxTool {
    BoxTool::new(
        tool::from_fn(
            "add",
            |Add { a, b }| async move { Ok::<_, ToolError>(a + b) },
        )
        .with_description("Add two integers"),
    )
}

/// Progress, a two-line text item, then — once `gate` opens — a JSON item.
fn steps(gate: Arc<Notify>) -> Toolbox {
    Toolbox::new().tool(tool::from_stream("steps", move |NoArgs {}| {
        let gate = gate.clone();
        stream::iter([
            ToolOutput::progress(Progress::new(1.0).total(2.0).message("halfway")),
            ToolOutput::text("step 1\nline two"),
        ])
        .map(Ok)
        .chain(stream::once(async move {
            gate.notified().await;
            Ok::<_, ToolError>(ToolOutput::json(json!({"step": 2})))
        }))
    }))
}

/// Sends on `dropped` when the call's stream is dropped.
struct DropSignal(mpsc::UnboundedSender<()>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// The test toolbox (no resolver): `add`, `partial` (an item, then an
/// error), `hang` (an item, then nothing, reporting its drop), `echo` (its
/// arguments back), `whoami` (call id and caller from the context).
fn toolbox(dropped: mpsc::UnboundedSender<()>) -> Toolbox {
    let partial = tool::from_stream("partial", |NoArgs {}| {
        stream::iter([
            Ok(ToolOutput::text("partial")),
            Err(ToolError::failed("disk full")),
        ])
    });
    let hang = tool::from_stream("hang", move |NoArgs {}| {
        let guard = DropSignal(dropped.clone());
        stream::once(async { Ok::<_, ToolError>("started") })
            .chain(stream::pending())
            .inspect(move |_| {
                let _ = &guard;
            })
    });
    let echo = tool::from_fn(
        "echo",
        |args: Value| async move { Ok::<_, ToolError>(args) },
    );
    let whoami = tool::from_fn_with_context("whoami", |NoArgs {}, ctx: ToolContext| async move {
        Ok::<_, ToolError>(json!({
            "call_id": ctx.call_id(),
            "caller": ctx.extensions().get::<Caller>().map(|c| c.name),
        }))
    });
    Toolbox::new()
        .tool(add())
        .tool(partial)
        .tool(hang)
        .tool(echo)
        .tool(whoami)
}

fn plain_toolbox() -> Toolbox {
    toolbox(mpsc::unbounded_channel().0)
}

/// `raw_echo`: a raw tool, answering with its argument text as it arrived.
fn raw_echo() -> Toolbox {
    Toolbox::new().tool(tool::raw(
        ToolInfo::new("raw_echo"),
        |request: ToolRequest| stream::iter([Ok(ToolOutput::text(request.arguments()))]),
    ))
}

// --------------------------------------------------------------- server

struct Server {
    base: String,
    http: reqwest::Client,
    /// Prefix of the tool routes (`/api` in the example's app).
    tools: &'static str,
}

impl Server {
    async fn start(app: Router, tools: &'static str) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        Server { base, http, tools }
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("{}{}{path}", self.base, self.tools))
    }

    fn call(&self, tool: &str, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{}/tools/{tool}", self.base, self.tools))
            .body(body)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> reqwest::Response {
        patiently("the response head", request.send())
            .await
            .unwrap()
    }

    /// A good call after a refusal: the server still answers.
    async fn assert_still_serves(&self, token: Option<&str>) {
        let mut request = self.call("add", r#"{"a":40,"b":2}"#);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = self.send(request).await;
        assert_eq!(response.status(), StatusCode::OK);
        let events = Events::new(response).all().await;
        assert_eq!(events.last().unwrap().data["structuredContent"], 42);
    }
}

/// The JSON body of an error response, after checking its status.
async fn error_body(response: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(response.headers()["content-type"], "application/json");
    let bytes = patiently("the error body", response.bytes()).await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

// ------------------------------------------------------------------ SSE

#[derive(Debug, PartialEq)]
struct Event {
    name: String,
    data: Value,
}

fn event(name: &str, data: Value) -> Event {
    Event {
        name: name.to_owned(),
        data,
    }
}

/// Reads SSE events off a response body as they arrive, holding each to
/// the exact format: `event: {name}\ndata: {one line of JSON}\n\n`.
struct Events {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["cache-control"], "no-cache");
        Events {
            body: Box::pin(response.bytes_stream()),
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                let block = std::str::from_utf8(&block[..end]).unwrap();
                let (name, data) = block
                    .strip_prefix("event: ")
                    .and_then(|rest| rest.split_once("\ndata: "))
                    .unwrap_or_else(|| panic!("not an `event:` + `data:` block: {block:?}"));
                assert!(!data.contains('\n'), "data spans lines: {data:?}");
                return Some(event(name, serde_json::from_str(data).unwrap()));
            }
            match patiently("an event", self.body.next()).await {
                Some(chunk) => self.buf.extend_from_slice(&chunk.unwrap()),
                None => {
                    assert!(self.buf.is_empty(), "trailing bytes: {:?}", self.buf);
                    return None;
                }
            }
        }
    }

    async fn all(mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn lists_every_tool_when_no_resolver_hides_any() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let body = error_body(server.send(server.get("/tools")).await, StatusCode::OK).await;
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add", "partial", "hang", "echo", "whoami"]);
    let add = &body["tools"][0];
    assert_eq!(add["description"], "Add two integers");
    assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]));
}

#[tokio::test]
async fn callers_see_and_call_only_the_tools_the_resolver_allows() {
    let server = Server::start(http_server::app(http_server::toolbox()), "/api").await;
    let names = |body: Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let alice = server.get("/tools").bearer_auth("alice-token");
    let alice = names(error_body(server.send(alice).await, StatusCode::OK).await);
    assert_eq!(alice, ["add", "count", "stats", "purge_cache"]);
    let bob = server.get("/tools").bearer_auth("bob-token");
    let bob = names(error_body(server.send(bob).await, StatusCode::OK).await);
    assert_eq!(bob, ["add", "count", "stats"]);

    // Hidden means not callable either, and not hinted at.
    let purge = server.call("purge_cache", "").bearer_auth("bob-token");
    let body = error_body(server.send(purge).await, StatusCode::NOT_FOUND).await;
    assert_eq!(
        body,
        json!({
            "error": "unknown tool `purge_cache`; available tools: add, count, stats",
            "kind": "not_found",
        })
    );

    // The caller the bearer check found reached the tool.
    let purge = server.call("purge_cache", "").bearer_auth("alice-token");
    let response = server.send(purge).await;
    assert_eq!(response.status(), StatusCode::OK);
    let events = Events::new(response).all().await;
    assert_eq!(
        events,
        [
            event(
                "output",
                json!({"type": "text", "text": "cache purged by alice"})
            ),
            event(
                "result",
                json!({"content": [{"type": "text", "text": "cache purged by alice"}], "isError": false})
            ),
        ]
    );
}

#[tokio::test]
async fn streams_items_as_they_come_then_one_result_event() {
    let gate = Arc::new(Notify::new());
    let server = Server::start(router(steps(gate.clone())), "").await;
    let response = server.send(server.call("steps", "{}")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events::new(response);

    // The first two events arrive while the tool is still waiting.
    assert_eq!(
        events.next().await.unwrap(),
        event(
            "progress",
            json!({"type": "progress", "progress": 1.0, "total": 2.0, "message": "halfway"})
        )
    );
    assert_eq!(
        events.next().await.unwrap(),
        event(
            "output",
            json!({"type": "text", "text": "step 1\nline two"})
        )
    );
    gate.notify_one();
    assert_eq!(
        events.all().await,
        [
            event("output", json!({"type": "json", "value": {"step": 2}})),
            event(
                "result",
                json!({
                    "content": [
                        {"type": "text", "text": "step 1\nline two"},
                        {"type": "text", "text": "{\"step\":2}"},
                    ],
                    "structuredContent": {"step": 2},
                    "isError": false,
                })
            ),
        ]
    );
}

#[tokio::test]
async fn structured_output_arrives_as_structured_content() {
    let server = Server::start(http_server::app(http_server::toolbox()), "/api").await;
    let call = server
        .call("stats", r#"{"numbers":[3,1,2]}"#)
        .bearer_auth("bob-token");
    let events = Events::new(server.send(call).await).all().await;
    let stats = json!({"count": 3, "min": 1.0, "max": 3.0, "mean": 2.0});
    assert_eq!(
        events,
        [
            event("output", json!({"type": "json", "value": stats})),
            event(
                "result",
                json!({
                    "content": [{"type": "text", "text": stats.to_string()}],
                    "structuredContent": stats,
                    "isError": false,
                })
            ),
        ]
    );
    // The listing declares the output's schema.
    let list = server.get("/tools").bearer_auth("bob-token");
    let body = error_body(server.send(list).await, StatusCode::OK).await;
    let stats_info = &body["tools"][2];
    assert_eq!(stats_info["name"], "stats");
    assert_eq!(
        stats_info["outputSchema"]["required"],
        json!(["count", "min", "max", "mean"])
    );
}

#[tokio::test]
async fn tool_error_mid_stream_is_an_error_event_after_the_items() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server.send(server.call("partial", "")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        Events::new(response).all().await,
        [
            event("output", json!({"type": "text", "text": "partial"})),
            event("error", json!({"error": "disk full", "kind": "failed"})),
        ]
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn unknown_tool_is_404_naming_the_closest_tool() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server.send(server.call("ad", "{}")).await;
    let body = error_body(response, StatusCode::NOT_FOUND).await;
    assert_eq!(body["kind"], "not_found");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool `ad`; did you mean `add`?"),
        "{body}"
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn malformed_json_body_is_400_naming_the_problem() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server.send(server.call("add", r#"{"a":1,"#)).await;
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(
        body,
        json!({
            "error": "arguments are not valid JSON: EOF while parsing an object at line 1 column 7",
            "kind": "invalid_arguments",
        })
    );

    let response = server.send(server.call("add", vec![0xff, 0xfe])).await;
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("the request body is not UTF-8 text"),
        "{body}"
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn wrong_shape_arguments_are_400_naming_the_field() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server
        .send(server.call("add", r#"{"a":1,"b":"two"}"#))
        .await;
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["kind"], "invalid_arguments");
    assert!(body["error"].as_str().unwrap().contains("`b`"), "{body}");

    let response = server.send(server.call("add", r#"{"a":1}"#)).await;
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("missing field `b`"),
        "{body}"
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn empty_body_means_empty_arguments_and_the_body_is_passed_on_as_sent() {
    let server = Server::start(router(plain_toolbox()), "").await;
    for empty in ["", " \n "] {
        let events = Events::new(server.send(server.call("echo", empty)).await)
            .all()
            .await;
        assert_eq!(
            events[0],
            event("output", json!({"type": "json", "value": {}}))
        );
    }
    let args = r#"{"nested":{"list":[1,"two",null]},"x":1.5}"#;
    let events = Events::new(server.send(server.call("echo", args)).await)
        .all()
        .await;
    assert_eq!(
        events[1].data["structuredContent"],
        serde_json::from_str::<Value>(args).unwrap()
    );
}

#[tokio::test]
async fn body_that_is_json_but_not_an_object_is_400_before_the_tool_sees_it() {
    // A raw tool would take any text; the endpoint holds it to the
    // argument rules all the same.
    let server = Server::start(router(raw_echo()), "").await;
    for (body, found) in [
        ("[1, 2]", "an array"),
        (r#""text""#, "a string"),
        ("42", "a number"),
        (" true", "a boolean"),
        ("null", "null"),
    ] {
        let response = server.send(server.call("raw_echo", body)).await;
        assert_eq!(
            error_body(response, StatusCode::BAD_REQUEST).await,
            json!({
                "error": format!("arguments must be a JSON object, got {found}"),
                "kind": "invalid_arguments",
            }),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_raw_tool_gets_the_body_as_sent_or_braces_for_a_blank_one() {
    let server = Server::start(router(raw_echo()), "").await;
    for (body, seen) in [
        ("", "{}"),
        (" \n ", "{}"),
        (r#" { "a" : 1 } "#, r#" { "a" : 1 } "#),
    ] {
        let events = Events::new(server.send(server.call("raw_echo", body)).await)
            .all()
            .await;
        assert_eq!(
            events[0],
            event("output", json!({"type": "text", "text": seen})),
            "{body:?}"
        );
    }
}

#[tokio::test]
async fn oversized_body_is_413_whether_declared_or_streamed() {
    let app = Router::new().nest(
        "/tools",
        HttpTools::new(plain_toolbox())
            .body_limit(1024)
            .into_router(),
    );
    let server = Server::start(app, "").await;
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2048));
    let expected = json!({
        "error": "the request body is larger than the limit of 1024 bytes",
        "kind": "invalid_arguments",
    });

    // With a content-length: refused before reading.
    let response = server.send(server.call("echo", big.clone())).await;
    assert_eq!(
        error_body(response, StatusCode::PAYLOAD_TOO_LARGE).await,
        expected
    );

    // Chunked, no length: refused once the count passes the limit.
    let chunks: Vec<Result<String, std::io::Error>> = big
        .as_bytes()
        .chunks(512)
        .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    let response = server
        .send(server.call("echo", reqwest::Body::wrap_stream(stream::iter(chunks))))
        .await;
    assert_eq!(
        error_body(response, StatusCode::PAYLOAD_TOO_LARGE).await,
        expected
    );

    // Exactly at the limit is fine.
    let fits = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1024 - 10));
    assert_eq!(fits.len(), 1024);
    let response = server.send(server.call("echo", fits)).await;
    assert_eq!(response.status(), StatusCode::OK);
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn missing_or_wrong_token_is_401_with_a_bearer_challenge() {
    let server = Server::start(http_server::app(http_server::toolbox()), "/api").await;
    for request in [
        server.get("/tools"),
        server.call("add", r#"{"a":1,"b":2}"#),
        server.get("/tools").bearer_auth("mallory-token"),
        server
            .get("/tools")
            .header("authorization", "Basic YWxpY2U6"),
    ] {
        let response = server.send(request).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response.headers()[WWW_AUTHENTICATE].to_str().unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
    }
    let wrong = server
        .send(server.get("/tools").bearer_auth("mallory-token"))
        .await;
    assert_eq!(
        wrong.headers()[WWW_AUTHENTICATE],
        r#"Bearer error="invalid_token""#
    );
    // The app's own route is not behind the check.
    let health = server
        .send(server.http.get(format!("{}/health", server.base)))
        .await;
    assert_eq!(health.status(), StatusCode::OK);
    server.assert_still_serves(Some("bob-token")).await;
}

#[tokio::test]
async fn rate_limited_caller_gets_429_with_retry_after_while_others_proceed() {
    let once_an_hour = Quota::per_hour(NonZeroU32::new(1).unwrap());
    let toolbox = Toolbox::new()
        .layered(
            add(),
            RateLimitLayer::per_caller::<Caller>(once_an_hour).reject(),
        )
        .resolver(http_server::visible);
    let server = Server::start(http_server::app(toolbox), "/api").await;
    let call = || server.call("add", r#"{"a":1,"b":2}"#);

    let first = server.send(call().bearer_auth("alice-token")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = server.send(call().bearer_auth("alice-token")).await;
    let retry_after: u64 = second.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((3000..=3600).contains(&retry_after), "{retry_after}");
    let body = error_body(second, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(body["kind"], "rate_limited");
    assert!(
        body["retry_after_ms"].as_u64().unwrap() > 3_000_000,
        "{body}"
    );

    // The limit is per caller, keyed by what the bearer check put in the
    // extensions: bob has his own bucket.
    let bob = server.send(call().bearer_auth("bob-token")).await;
    assert_eq!(bob.status(), StatusCode::OK);
}

#[tokio::test]
async fn overloaded_tool_is_503_and_serves_again_once_free() {
    let gate = Arc::new(Notify::new());
    let steps = steps(gate.clone());
    let busy = steps.get("steps").unwrap().clone();
    let toolbox = Toolbox::new().layered(
        busy,
        tower::ServiceBuilder::new()
            .load_shed()
            .layer(ConcurrencyLimitLayer::new(1)),
    );
    let server = Server::start(router(toolbox), "").await;

    let first = server.send(server.call("steps", "")).await;
    let mut first = Events::new(first);
    assert_eq!(first.next().await.unwrap().name, "progress");

    let second = server.send(server.call("steps", "")).await;
    let body = error_body(second, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(body["kind"], "overloaded");

    // The permit is held for the stream's life, not just its opening.
    gate.notify_one();
    assert_eq!(first.all().await.last().unwrap().name, "result");
    let third = server.send(server.call("steps", "")).await;
    assert_eq!(third.status(), StatusCode::OK);
}

#[tokio::test]
async fn call_id_comes_from_the_header_or_is_made_up_and_is_echoed() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server
        .send(server.call("whoami", "").header(CALL_ID_HEADER, "call_abc"))
        .await;
    assert_eq!(response.headers()[CALL_ID_HEADER], "call_abc");
    let events = Events::new(response).all().await;
    assert_eq!(events[0].data["value"]["call_id"], "call_abc");

    let mut made_up = Vec::new();
    for _ in 0..2 {
        let response = server.send(server.call("whoami", "")).await;
        let header = response.headers()[CALL_ID_HEADER]
            .to_str()
            .unwrap()
            .to_owned();
        let events = Events::new(response).all().await;
        assert_eq!(events[0].data["value"]["call_id"], header.as_str());
        assert!(header.starts_with("http_"), "{header}");
        made_up.push(header);
    }
    assert_ne!(made_up[0], made_up[1]);

    // Refusals carry the id too.
    let response = server
        .send(server.call("nope", "").header(CALL_ID_HEADER, "call_404"))
        .await;
    assert_eq!(response.headers()[CALL_ID_HEADER], "call_404");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn call_id_header_that_is_not_visible_ascii_is_400() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let id = HeaderValue::from_bytes(b"caf\xe9").unwrap();
    let response = server
        .send(
            server
                .call("add", r#"{"a":1,"b":2}"#)
                .header(CALL_ID_HEADER, id),
        )
        .await;
    assert_eq!(
        error_body(response, StatusCode::BAD_REQUEST).await,
        json!({"error": "the x-tool-call-id header must be visible ASCII", "kind": "invalid_request"})
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn tool_name_that_does_not_decode_is_400() {
    let server = Server::start(router(plain_toolbox()), "").await;
    let response = server.send(server.call("caf%FF", "{}")).await;
    let body = error_body(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(body["kind"], "invalid_request");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("the tool name in the path: "),
        "{body}"
    );
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn client_disconnect_cancels_the_tool() {
    let (dropped, mut drops) = mpsc::unbounded_channel();
    let server = Server::start(router(toolbox(dropped)), "").await;
    let response = server.send(server.call("hang", "")).await;
    let mut events = Events::new(response);
    assert_eq!(
        events.next().await.unwrap(),
        event("output", json!({"type": "text", "text": "started"}))
    );
    assert!(drops.try_recv().is_err(), "the tool was dropped while read");

    drop(events); // closes the connection mid-body
    patiently("the tool to be dropped", drops.recv())
        .await
        .unwrap();
    server.assert_still_serves(None).await;
}

#[tokio::test]
async fn nests_under_any_prefix_beside_the_apps_own_routes() {
    let app = Router::new()
        .route("/", axum::routing::get(|| async { "home" }))
        .nest("/v1/agents/tools-api", router(plain_toolbox()));
    let server = Server::start(app, "/v1/agents/tools-api").await;
    let home = server
        .send(server.http.get(format!("{}/", server.base)))
        .await;
    assert_eq!(home.text().await.unwrap(), "home");
    let list = error_body(server.send(server.get("/tools")).await, StatusCode::OK).await;
    assert_eq!(list["tools"].as_array().unwrap().len(), 5);
    server.assert_still_serves(None).await;

    // Not under the root: the prefix is the only way in.
    let bare = server
        .send(server.http.post(format!("{}/tools/add", server.base)))
        .await;
    assert_eq!(bare.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn its_routes_are_relative_to_where_it_is_nested() {
    // Nested at `/tools`, as an axum user nests any router: `/tools` lists
    // and `/tools/{name}` calls — not `/tools/tools/…`.
    let app = Router::new().nest("/tools", HttpTools::new(plain_toolbox()).into_router());
    let list = Request::get("/tools").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(list).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let call = Request::post("/tools/add")
        .body(Body::from(r#"{"a": 1, "b": 2}"#))
        .unwrap();
    let response = app.clone().oneshot(call).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let doubled = Request::get("/tools/tools").body(Body::empty()).unwrap();
    assert_eq!(
        app.clone().oneshot(doubled).await.unwrap().status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "`/tools/tools` is a call's path (POST only), not the list"
    );
    // Served on its own, at the root: `/` lists.
    let bare = HttpTools::new(plain_toolbox()).into_router::<()>();
    let list = Request::get("/").body(Body::empty()).unwrap();
    assert_eq!(bare.oneshot(list).await.unwrap().status(), StatusCode::OK);
}

// ----------------------------------------------------------- keep-alive
//
// In-process (`Router::oneshot`, the body read frame by frame) on the
// paused clock: the keep-alive timer is tokio's, so time only moves when
// every task waits, straight to the next deadline.

/// Calls `hang` in-process: its first event has arrived, and from here on
/// the tool is silent.
async fn call_silent_tool(app: Router) -> BodyDataStream {
    let call = Request::post("/tools/hang").body(Body::empty()).unwrap();
    let response = app.oneshot(call).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    assert_eq!(
        next_frame(&mut body).await,
        "event: output\ndata: {\"type\":\"text\",\"text\":\"started\"}\n\n"
    );
    body
}

/// The body's next frame, within a minute of (paused) time: with nothing
/// else to wake it, a missing keep-alive would otherwise wait forever.
async fn next_frame(body: &mut BodyDataStream) -> Bytes {
    tokio::time::timeout(Duration::from_secs(60), body.next())
        .await
        .expect("a frame within a minute")
        .expect("the body has not ended")
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_silent_tools_stream_carries_a_keep_alive_comment_every_15_seconds() {
    assert_eq!(DEFAULT_KEEP_ALIVE, Duration::from_secs(15));
    let mut body = call_silent_tool(router(plain_toolbox())).await;
    let started = Instant::now();

    let just_before = DEFAULT_KEEP_ALIVE - Duration::from_millis(1);
    assert!(
        tokio::time::timeout(just_before, body.next())
            .await
            .is_err(),
        "a comment before the interval passed"
    );
    assert_eq!(next_frame(&mut body).await, ":\n\n");
    assert_eq!(started.elapsed(), DEFAULT_KEEP_ALIVE);
    // The interval counts from the last thing sent, the comment included.
    assert_eq!(next_frame(&mut body).await, ":\n\n");
    assert_eq!(started.elapsed(), 2 * DEFAULT_KEEP_ALIVE);
}

#[tokio::test(start_paused = true)]
async fn keep_alive_interval_is_configurable_and_can_be_turned_off() {
    let every_second = HttpTools::new(plain_toolbox()).keep_alive(Duration::from_secs(1));
    let mut body = call_silent_tool(Router::new().nest("/tools", every_second.into_router())).await;
    let started = Instant::now();
    assert_eq!(next_frame(&mut body).await, ":\n\n");
    assert_eq!(started.elapsed(), Duration::from_secs(1));

    let never = HttpTools::new(plain_toolbox()).no_keep_alive();
    let mut body = call_silent_tool(Router::new().nest("/tools", never.into_router())).await;
    let an_hour = Duration::from_secs(3600);
    assert!(
        tokio::time::timeout(an_hour, body.next()).await.is_err(),
        "a keep-alive comment although they are off"
    );
}

#[test]
#[should_panic(expected = "the keep-alive interval must be greater than zero")]
fn a_zero_keep_alive_interval_is_refused() {
    let _ = HttpTools::new(Toolbox::new()).keep_alive(Duration::ZERO);
}

#[test]
fn the_router_is_a_clone_send_sync_tower_service() {
    fn assert_service<S>(_: &S)
    where
        S: tower::Service<axum::extract::Request> + Clone + Send + Sync + 'static,
    {
    }
    assert_service(&router(Toolbox::new()));
    assert_service(&HttpTools::new(Toolbox::new()).into_router::<()>());
}

#[test]
fn every_error_kind_maps_to_its_status() {
    let cases = [
        (ErrorKind::InvalidArguments, 400),
        (ErrorKind::NotFound, 404),
        (ErrorKind::Denied, 403),
        (ErrorKind::RateLimited { retry_after: None }, 429),
        (ErrorKind::Overloaded, 503),
        (ErrorKind::Unavailable, 503),
        (
            ErrorKind::Timeout {
                phase: TimeoutPhase::Open,
            },
            504,
        ),
        (ErrorKind::Failed, 500),
        (ErrorKind::Panicked, 500),
        (ErrorKind::Cancelled, 500),
    ];
    for (kind, status) in cases {
        assert_eq!(status_for(kind).as_u16(), status, "{kind}");
    }
}

/// One call through the router, in process.
async fn oneshot_call(app: Router, tool: &str, body: impl Into<Body>) -> axum::response::Response {
    let request = axum::http::Request::post(format!("/tools/{tool}"))
        .body(body.into())
        .unwrap();
    app.oneshot(request).await.unwrap()
}

async fn oneshot_json(response: axum::response::Response) -> Value {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_default_body_limit_is_the_argument_limit_of_typed_tools() {
    assert_eq!(
        toolstack::http::DEFAULT_CALL_BODY_LIMIT,
        toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES
    );
    let echo = Toolbox::new().tool(tool::from_fn("echo", |v: Value| async move {
        Ok::<_, ToolError>(v["pad"].as_str().map_or(0, str::len))
    }));
    let limit = toolstack::arguments::DEFAULT_MAX_ARGUMENT_BYTES;
    // At the limit, the router reads it and the tool takes it.
    let fits = format!(r#"{{"pad":"{}"}}"#, "x".repeat(limit - 10));
    let response = oneshot_call(router(echo.clone()), "echo", fits).await;
    assert_eq!(response.status(), StatusCode::OK);
    // One byte more is refused before anything is parsed.
    let over = format!(r#"{{"pad":"{}"}}"#, "x".repeat(limit - 9));
    let response = oneshot_call(router(echo), "echo", over).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        oneshot_json(response).await,
        json!({
            "error": "the request body is larger than the limit of 1048576 bytes",
            "kind": "invalid_arguments",
        })
    );
}

#[tokio::test]
async fn retry_after_is_rounded_up_in_the_header_and_the_body() {
    for (after, header, ms) in [
        (Duration::from_micros(1_000_500), "2", 1001),
        (Duration::from_millis(1), "1", 1),
        (Duration::from_secs(3), "3", 3000),
    ] {
        let limited = Toolbox::new().service(
            ToolInfo::new("limited"),
            tower::service_fn(move |_: ToolRequest| async move {
                Err::<stream::Empty<toolstack::ToolItem>, _>(ToolError::rate_limited(Some(after)))
            }),
        );
        let response = oneshot_call(router(limited), "limited", "{}").await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[RETRY_AFTER], header, "{after:?}");
        assert_eq!(
            oneshot_json(response).await["retry_after_ms"],
            ms,
            "{after:?}"
        );
    }
}

/// `think`: works `ms` before its first item — or fails then, with `fail`.
fn thinker() -> Toolbox {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Think {
        ms: u64,
        fail: bool,
    }
    Toolbox::new().tool(tool::from_fn("think", |Think { ms, fail }| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if fail {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                "the backend is down",
            ));
        }
        Ok::<_, ToolError>("thought")
    }))
}

async fn call_thinker(ms: u64, fail: bool) -> axum::response::Response {
    let tools = HttpTools::new(thinker()).keep_alive(Duration::from_secs(1));
    let app = Router::new().nest("/tools", tools.into_router());
    let body = format!(r#"{{"ms":{ms},"fail":{fail}}}"#);
    let call = Request::post("/tools/think")
        .body(Body::from(body))
        .unwrap();
    app.oneshot(call).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_fails_before_answering_within_a_keep_alive_interval_is_an_http_error() {
    let started = Instant::now();
    let response = call_thinker(500, true).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(500),
        "the status waited"
    );
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(start_paused = true)]
async fn a_tool_still_working_after_a_keep_alive_interval_gets_200_keep_alives_then_its_events() {
    let started = Instant::now();
    let response = call_thinker(2_500, true).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "200 after one interval"
    );
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    assert_eq!(next_frame(&mut body).await, ":\n\n");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    let last = next_frame(&mut body).await;
    assert_eq!(started.elapsed(), Duration::from_millis(2_500));
    assert!(
        last == "event: error\ndata: {\"error\":\"the backend is down\",\"kind\":\"unavailable\"}\n\n",
        "{last:?}"
    );

    // Working, then answering: the answer's events follow the comments.
    let response = call_thinker(1_500, false).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    assert_eq!(
        next_frame(&mut body).await,
        "event: output\ndata: {\"type\":\"text\",\"text\":\"thought\"}\n\n"
    );
}
