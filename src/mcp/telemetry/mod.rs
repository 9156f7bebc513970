//! The OpenTelemetry MCP conventions (`open-telemetry/semantic-conventions-genai`,
//! `model/mcp/`): a span for each operation the server serves or the client
//! sends, and, with the `opentelemetry` feature, its duration on
//! `mcp.server.operation.duration` or `mcp.client.operation.duration`.
//!
//! An [`Operation`] is made when the request arrives (server) or is about to
//! be sent (client) and ends exactly once: with its answer, or, dropped
//! before one, as `cancelled`.
//!
//! * `transport`: what an operation went over ([`Transport`]) and the
//!   request's `Mcp-Session-Id`;
//! * `target`: what it is on ([`Target`]: a tool, a prompt, a resource);
//! * `operation`: the [`Operation`] itself, its span, how it ended
//!   ([`OperationEnd`]) and its duration on the histograms ([`Meters`]).

mod operation;
mod target;
mod transport;

pub use operation::OPERATION_DURATION_BUCKETS;
pub(crate) use operation::{Meters, Operation, OperationEnd, Request, Side};
pub(crate) use target::Target;
pub(crate) use transport::{session_id, Transport};
