//! The HTTP example's app: a toolbox served with
//! [`HttpTools`], nested under `/api` in an app that has a route of its own
//! (`/health`), behind a bearer-token check. `examples/http_server.rs`
//! serves it; `tests/http.rs` calls it over real HTTP.
//!
//! Tokens (send `Authorization: Bearer <token>`):
//!
//! | token | caller | sees |
//! |---|---|---|
//! | `alice-token` | alice, admin | every tool |
//! | `bob-token` | bob | every tool but the destructive `purge_cache` |
//!
//! A missing or unknown token is a `401` with `WWW-Authenticate: Bearer`.
//! The [`Caller`] found for a token goes into the request's extensions; the
//! toolbox's resolver ([`visible`]) reads it there to decide which tools the
//! caller may see and call, and so could a per-caller rate limit or the
//! tool itself.
//!
//! ```
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use tower::ServiceExt;
//! use toolstack_demo::http::{app, toolbox};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let list = Request::get("/api/tools").body(Body::empty()).unwrap();
//! let response = app(toolbox()).oneshot(list).await.unwrap();
//! assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
//!
//! let list = Request::get("/api/tools")
//!     .header("authorization", "Bearer bob-token")
//!     .body(Body::empty())
//!     .unwrap();
//! let response = app(toolbox()).oneshot(list).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # }
//! ```

use std::time::Duration;

use axum::http::Extensions;
use axum::middleware;
use axum::routing::get;
use axum::Router;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolstack::http::HttpTools;

use crate::auth::{require_bearer, Tokens};
use toolstack::{tool, Progress, ToolAnnotations, ToolContext, ToolError, ToolInfo, Toolbox};

/// Who is calling, as the bearer check found it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    /// The caller's name.
    pub name: &'static str,
    /// Whether the caller may see destructive tools.
    pub admin: bool,
}

/// The known tokens and their callers.
const TOKENS: Tokens<Caller> = &[
    (
        "alice-token",
        Caller {
            name: "alice",
            admin: true,
        },
    ),
    (
        "bob-token",
        Caller {
            name: "bob",
            admin: false,
        },
    ),
];

/// A caller sees a destructive tool only if an admin.
pub fn visible(info: &ToolInfo, extensions: &Extensions) -> bool {
    let destructive = info.annotations().destructive_hint == Some(true);
    extensions
        .get::<Caller>()
        .is_some_and(|caller| caller.admin || !destructive)
}

/// The app: `/health` open to all, the tools under `/api/tools` behind the
/// token check.
pub fn app(toolbox: Toolbox) -> Router {
    let tools = HttpTools::new(toolbox)
        .into_router()
        .layer(middleware::from_fn_with_state(
            TOKENS,
            require_bearer::<Caller>,
        ));
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .nest("/api/tools", tools)
}

/// Add two integers.
#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

/// Count from 1 up to a number, one number at a time.
#[derive(Deserialize, JsonSchema)]
struct Count {
    /// Where to stop (at most 100).
    to: u32,
    /// Milliseconds between numbers (default 300).
    delay_ms: Option<u64>,
}

/// Summary statistics of a list of numbers.
#[derive(Deserialize, JsonSchema)]
struct StatsArgs {
    /// The numbers (at least one).
    numbers: Vec<f64>,
}

/// The statistics.
#[derive(Serialize, JsonSchema)]
struct Stats {
    count: usize,
    min: f64,
    max: f64,
    mean: f64,
}

/// Purge the cache.
#[derive(Deserialize, JsonSchema)]
struct Purge {}

/// The example's tools: `add`, `count` (streams with progress), `stats`
/// (structured output), `purge_cache` (destructive: admins only).
pub fn toolbox() -> Toolbox {
    let add = tool::from_fn("add", |Add { a, b }| async move {
        a.checked_add(b)
            .ok_or_else(|| ToolError::invalid_arguments("the sum does not fit in 64 bits"))
    })
    .with_description("Add two integers")
    .with_annotations(ToolAnnotations::new().read_only());

    let count =
        tool::from_stream_with_context("count", |Count { to, delay_ms }, ctx: ToolContext| {
            let to = to.min(100);
            let delay = Duration::from_millis(delay_ms.unwrap_or(300));
            futures_util::stream::iter(1..=to).then(move |n| {
                let progress = ctx.progress().clone();
                async move {
                    tokio::time::sleep(delay).await;
                    progress.report(Progress::new(n.into()).total(to.into()));
                    Ok::<_, ToolError>(n)
                }
            })
        })
        .with_description("Count from 1 up to a number, streaming each number with progress")
        .with_annotations(ToolAnnotations::new().read_only());

    let stats = tool::from_fn("stats", |StatsArgs { numbers }| async move {
        if numbers.is_empty() {
            return Err(ToolError::invalid_arguments("`numbers` must not be empty"));
        }
        let count = numbers.len();
        let min = numbers.iter().copied().fold(f64::INFINITY, f64::min);
        let max = numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = numbers.iter().sum::<f64>() / count as f64;
        Ok(Stats {
            count,
            min,
            max,
            mean,
        })
    })
    .with_description("Summary statistics of a list of numbers")
    .with_output_schema_for::<Stats>()
    .with_annotations(ToolAnnotations::new().read_only());

    let purge =
        tool::from_fn_with_context("purge_cache", |Purge {}, ctx: ToolContext| async move {
            let who = ctx
                .extensions()
                .get::<Caller>()
                .map_or("nobody", |c| c.name);
            Ok::<_, ToolError>(format!("cache purged by {who}"))
        })
        .with_description("Purge the cache (admins only)")
        .with_annotations(ToolAnnotations::new().destructive(true));

    Toolbox::new()
        .tool(add)
        .tool(count)
        .tool(stats)
        .tool(purge)
        .resolver(visible)
}
