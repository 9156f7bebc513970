//! toolstack over HTTP, with axum (feature `http`): a toolbox's routes
//! (here), and an [`Agent`](crate::agent::Agent) as the Vercel AI SDK's
//! chat endpoint ([`ai_sdk`]).
//!
//! Serving a [`Toolbox`] over HTTP with axum: list the tools, call one with
//! its output streamed as server-sent events (SSE).
//!
//! [`HttpTools`] (or the shorthand [`router`]) turns a toolbox into an
//! ordinary [`axum::Router`] — `Clone + Send + Sync`, a tower service — to
//! serve on its own or to [`nest`](axum::Router::nest) under a prefix in an
//! existing app, behind whatever auth layer that app already has.
//!
//! The routes are relative to where the router is mounted, as axum nests
//! (here nested at `/tools`, as [`router`] serves them):
//!
//! | route | answer |
//! |---|---|
//! | `GET /tools` | `200`, `{"tools": [ToolInfo…]}` — only the tools the [resolver](Toolbox::resolver) lets this caller see |
//! | `POST /tools/{name}` | `200`, `text/event-stream`: the tool's items as they come, then one `result` or `error` event |
//!
//! # The caller
//!
//! The HTTP request's extensions are moved into the [`ToolRequest`]: what
//! an auth layer in front of the router put there (a user id, a role) is
//! what the toolbox's resolver, a per-caller rate limit and the tool itself
//! see. The call id is taken from the [`CALL_ID_HEADER`] header, or made
//! up; either way the response carries it in the same header.
//!
//! # The call
//!
//! The body is the tool's arguments as JSON text, passed on untouched. The
//! [argument rules](crate::arguments) apply, as everywhere in toolstack: an
//! empty (or all-whitespace) body means `{}`, and the body must be a JSON
//! object. It must also be at most [`body_limit`](HttpTools::body_limit)
//! bytes (the content type is not checked, so `curl -d` works); the tool's
//! own decoding then names any field of the wrong shape.
//!
//! A call that fails **before** its stream opens — the tool is unknown or
//! hidden from this caller, the arguments are refused, a rate limit or a
//! load shedder turns it away — is an ordinary HTTP error with a JSON body,
//! the [model-facing form](ToolError::to_model_json) of the error
//! (`{"error": message, "kind": kind, …}`), and a status from
//! [`status_for`]:
//!
//! | error | status |
//! |---|---|
//! | body over the limit | `413` |
//! | body not UTF-8, not JSON, not an object; `invalid_arguments` | `400` |
//! | `not_found` (unknown or hidden tool) | `404` |
//! | `denied`, `guardrail` (a guardrail raised on the input) | `403` |
//! | `rate_limited` | `429`, with `Retry-After` (seconds, rounded up) when known |
//! | `spend_limited` | `429`, without `Retry-After` (the limit stays reached until its window rolls over) |
//! | `overloaded`, `unavailable` | `503` |
//! | `timeout` | `504` |
//! | `failed`, `panicked`, `cancelled`, `interrupted` | `500` |
//!
//! A malformed HTTP request that is no tool's business (a call id header
//! that is not visible ASCII, a tool name that does not decode) is a `400`
//! of kind `invalid_request`.
//!
//! Once the stream is open the status is `200` and every item is one SSE
//! event, its data the item's JSON on one line:
//!
//! ```text
//! event: progress
//! data: {"type":"progress","progress":1.0,"total":2.0}
//!
//! event: output
//! data: {"type":"json","value":1}
//!
//! event: result
//! data: {"content":[{"type":"text","text":"1"}],"structuredContent":1,"isError":false}
//! ```
//!
//! Progress items are `progress` events, every other item an `output`
//! event. The stream ends with exactly one `result` event — the items
//! collected as a [`ToolResult`] in MCP's shape (`content`,
//! `structuredContent`, `isError`) — or, if the tool fails after it
//! started, exactly one `error` event whose data is the error's
//! model-facing JSON. A client that disconnects drops the response stream,
//! and with it the tool's stream: the tool is cancelled.
//!
//! While the tool is silent the stream carries a keep-alive comment, the
//! three bytes `:\n\n` (an empty SSE comment, which `EventSource` and other
//! SSE clients skip), each time [`DEFAULT_KEEP_ALIVE`] (15 s) passes with
//! nothing sent, so that a proxy's idle timeout does not cut a slow tool
//! off. [`keep_alive`](HttpTools::keep_alive) sets the interval and
//! [`no_keep_alive`](HttpTools::no_keep_alive) turns the comments off. The
//! timer is tokio's: the runtime serving the router needs its time driver
//! (`#[tokio::main]` enables it).
//!
//! A panicking tool takes its connection down with it, as any panicking
//! handler does; `toolstack-layers`' `CatchPanicLayer` turns the panic
//! into an `error` event instead.
//!
//! # Example
//!
//! ```
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use tower::ServiceExt;
//! use toolstack::http::HttpTools;
//! use toolstack::{tool, ToolError, Toolbox};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Add { a: i64, b: i64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let toolbox = Toolbox::new()
//!     .tool(tool::from_fn("add", |Add { a, b }| async move { Ok::<_, ToolError>(a + b) }));
//!
//! // Nested under `/api` next to the app's own routes.
//! let app = axum::Router::new()
//!     .route("/health", axum::routing::get(|| async { "ok" }))
//!     .nest("/api/tools", HttpTools::new(toolbox).body_limit(64 * 1024).into_router());
//!
//! let call = Request::post("/api/tools/add").body(Body::from(r#"{"a":1,"b":2}"#)).unwrap();
//! let response = app.oneshot(call).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! assert_eq!(response.headers()["content-type"], "text/event-stream");
//!
//! let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
//! assert_eq!(
//!     std::str::from_utf8(&body).unwrap(),
//!     "event: output\ndata: {\"type\":\"json\",\"value\":3}\n\n\
//!      event: result\ndata: {\"content\":[{\"type\":\"text\",\"text\":\"3\"}],\"structuredContent\":3,\"isError\":false}\n\n",
//! );
//!
//! // To serve it: axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await?
//! # }
//! ```

// The items the docs above link to.
#[cfg(doc)]
use crate::{ToolError, ToolRequest, ToolResult, Toolbox};

pub mod ai_sdk;
mod tools;

pub use tools::*;
