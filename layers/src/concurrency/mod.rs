//! A concurrency limit whose permit lives as long as the response stream.
//!
//! tower's `ConcurrencyLimit` releases its permit when the response future
//! resolves; for a tool that is when it has begun answering (its first
//! item), while the work goes on until the stream ends — and a model is
//! still writing its answer.
//! [`ConcurrencyLimit`] reserves a permit in `poll_ready`, moves it into the
//! future and then into the stream, and releases it only when the stream
//! ends, yields its (terminal) error, or is dropped.
//!
//! Clones of a service share its semaphore (a clone starts without a
//! reserved permit); services made by one [`ConcurrencyLimitLayer::new`] each
//! get their own semaphore, while [`ConcurrencyLimitLayer::shared`] makes
//! every service it wraps draw from one.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::{tool, ToolError, ToolRequest};
//! use toolstack_layers::concurrency::ConcurrencyLimitLayer;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Args {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut tool = ServiceBuilder::new()
//!     .layer(ConcurrencyLimitLayer::new(2))
//!     .service(tool::from_fn("ping", |_: Args| async { Ok::<_, ToolError>("pong") }));
//!
//! let stream = tool.ready().await.unwrap().call(ToolRequest::new("ping", "{}")).await.unwrap();
//! // The permit is held here, until the stream is drained or dropped.
//! let items: Vec<_> = stream.collect().await;
//! assert_eq!(items.len(), 1);
//! # }
//! ```
//!
//! # Differences from tower's `ConcurrencyLimit`
//!
//! Both reserve the permit in `poll_ready` and reset it on `Clone`. The
//! permits of a limit made by [`ConcurrencyLimitLayer::new`] or
//! [`ConcurrencyLimitLayer::shared`] are an atomic count — one
//! compare-and-swap to take one, one add to give it back, where tokio's
//! semaphore (tower's) takes its waiter-list lock on every release — and a
//! semaphore only queues the calls that find none free, in FIFO order. tower's
//! releases it when the response future resolves — for a tool, at its first
//! item — so a limit of 4 bounds the tools working toward their first item,
//! and any number of streams go on after it; this one holds
//! it until the stream ends, fails or is dropped, and answers `poll_ready`
//! errors as [`ToolError`](toolstack::ToolError)s rather than `BoxError`.

mod future;
mod layer;
mod permits;
mod service;

pub use self::future::{ResponseFuture, ResponseStream};
pub use self::layer::ConcurrencyLimitLayer;
pub use self::service::ConcurrencyLimit;
