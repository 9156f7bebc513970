//! Type-erased tools: [`BoxTool`] and its response stream [`ToolStream`];
//! and [`FuseAfterError`], which ends a stream at its first error.
//!
//! A toolbox holds tools of many types, so it erases them. Erasure here
//! costs **one allocation per call**: the call's response future and its
//! response stream live in one boxed state machine, which is first driven
//! as the call's future (opening) and then handed out, unchanged, as the
//! response stream.
//!
//! Each call gets a handle of its own to the tool and asks that handle's
//! `poll_ready` before calling it, so a tool that applies back-pressure — a
//! `ConcurrencyLimit`, a `Buffer` — is never called while unready, and one
//! busy tool does not make the others wait. The handle is a spare kept
//! from an earlier call on the same thread, or a clone. Ready at once (the
//! common case), the tool is called as the call is made and the handle is
//! kept as a spare; not ready, the handle goes into the call's state
//! machine, which drives its readiness with the caller's waker (tower's
//! `Oneshot`), keeping its place in any queue. A tool's readiness is asked
//! once with a waker that does nothing, so a tool must (as tower asks) wake
//! the waker of its latest poll.
//!
//! | file | what it holds |
//! |---|---|
//! | `tool.rs` | [`BoxTool`]: the erased tool, its description, the name a call goes in under |
//! | `erased_tool.rs` | the tool behind a `BoxTool`, with its spare handles (one slot per thread) |
//! | `erased_call.rs` | one erased call: readied, called, opened, then read — the one allocation |
//! | `future.rs` | [`ResponseFuture`]: the call while it opens |
//! | `stream.rs` | [`ToolStream`] and [`ToolItem`]: the call once open |
//! | `fuse.rs` | [`FuseAfterError`]: a stream ended at its first error |
//!
//! ```
//! use futures_util::StreamExt;
//! use tower::ServiceExt;
//! use toolstack::{tool, BoxTool, ToolRequest};
//!
//! # tokio_test_block_on(async {
//! let echo = tool::from_fn("echo", |args: serde_json::Value| async move {
//!     Ok::<_, toolstack::ToolError>(args)
//! });
//! let boxed = BoxTool::new(echo);
//! let mut stream = boxed.oneshot(ToolRequest::new("echo", r#"{"x":1}"#)).await.unwrap();
//! let item = stream.next().await.unwrap().unwrap();
//! assert_eq!(item.as_json().map(toolstack::Json::value), Some(serde_json::json!({"x": 1})));
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     futures_util::FutureExt::now_or_never(f).unwrap()
//! # }
//! ```

mod erased_call;
mod erased_tool;
mod fuse;
mod future;
mod stream;
mod tool;

pub use fuse::FuseAfterError;
pub use future::ResponseFuture;
pub use stream::{ToolItem, ToolStream};
pub use tool::BoxTool;
