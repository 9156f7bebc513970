//! Serving a [`Toolbox`](crate::Toolbox) to clients outside the process,
//! each transport behind its own feature.
//!
//! * `http` (feature `http`) — an axum router: list the tools, call one with
//!   its output streamed as server-sent events.

#[cfg(feature = "http")]
pub mod http;
