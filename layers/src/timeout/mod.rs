//! Time bounds for a tool or model call that understand streams.
//!
//! [`TimeoutLayer`] sets up to three independent bounds (for a model, the
//! items are its deltas):
//!
//! * **deadline** — the whole call, from `call` to the end of the stream
//!   (phase [`TimeoutPhase::Deadline`]);
//! * **first item** — from `call` to the first item, opening included
//!   (phase [`TimeoutPhase::FirstItem`]);
//! * **idle** — the gap between one item and the next, counted from the
//!   moment the tool has nothing ready (phase [`TimeoutPhase::Idle`]). The
//!   wait for the first item is the first-item bound's business, not this
//!   one's.
//!
//! On expiry while the call opens (for a tool of `toolstack::tool`: until
//! its first item), the future fails with a timeout error.
//! On expiry later, the stream yields exactly one terminal
//! [`ToolError`](toolstack::ToolError) of kind timeout naming the phase and
//! then ends; the inner stream is dropped at once, which cancels the tool
//! (or the model's answer). A call that finishes in time is untouched. The
//! message names what timed out: "the tool produced no output within 5s",
//! "the model produced no further output for 10s".
//!
//! Timers are lazy: nothing is armed while the tool has items ready, so a
//! fast stream pays for no timer at all, and the idle bound is re-armed only
//! when the tool goes quiet, not on every item. The deadline is still
//! checked against the clock every few dozen items, so a stream that never
//! pauses cannot outlive it by more than that.
//!
//! ```
//! use std::time::Duration;
//! use toolstack::{tool, ErrorKind, TimeoutPhase, ToolError, ToolRequest};
//! use toolstack_layers::timeout::TimeoutLayer;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Args {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! tokio::time::pause();
//! let slow = tool::from_fn("slow", |_: Args| async {
//!     tokio::time::sleep(Duration::from_secs(60)).await;
//!     Ok::<_, ToolError>("done")
//! });
//! let mut tool = ServiceBuilder::new()
//!     .layer(TimeoutLayer::new().first_item(Duration::from_secs(5)))
//!     .service(slow);
//!
//! // A typed tool's call opens with its first item: the bound fails it.
//! let call = tool.ready().await.unwrap().call(ToolRequest::new("slow", "{}"));
//! let err = call.await.map(|_| ()).unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Timeout { phase: TimeoutPhase::FirstItem });
//! # }
//! ```
//!
//! # Differences from tower's `Timeout`
//!
//! | | `tower::timeout::Timeout` | [`Timeout`] |
//! |---|---|---|
//! | what is bounded | the response future only — here, the stream *opening* | the opening, the first item, each gap between items, and the whole stream |
//! | bounds | one duration | up to three, independent: deadline, first item, idle |
//! | on expiry | the future fails with `BoxError` (`Elapsed`) | one typed `Timeout { phase }` error, then the end; the inner stream is dropped |
//! | the message | "request timed out" | names the tool or the model and the bound |
//!
//! tower's `Timeout` still stacks onto a tool; its `Elapsed` becomes a
//! `Timeout { phase: Open }` error at the toolbox.

mod future;
mod layer;
mod service;

pub use self::future::{ResponseFuture, ResponseStream};
pub use self::layer::TimeoutLayer;
pub use self::service::Timeout;
pub use toolstack::TimeoutPhase;
