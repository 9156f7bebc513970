//! The task scheme of MCP 2025-11-25, served next to the tasks extension
//! of 2026-07-28 (which rmcp implements).
//!
//! A 2025-11-25 client (the TypeScript SDK 1.x, ext-tasks' v1 protocol)
//! reads the server's `capabilities.tasks` and each tool's
//! `execution.taskSupport`, asks for a task with a `task` member in the
//! `tools/call` params, and gets `{"task": {...}}` back; then `tasks/get`
//! answers the task's fields flat (`ttl`, `pollInterval`), `tasks/result`
//! waits for the end and answers the call's own result, and `tasks/cancel`
//! answers the cancelled task. rmcp's types have none of these shapes, so
//! they are made here, at the edges:
//!
//! * [`lift`](fn@lift) renames, in the raw text of a message, a
//!   `tools/call` that asks for a task to [`TASK_CALL`](lift::TASK_CALL),
//!   so that rmcp hands it, `task` and all, to `on_custom_request` (the
//!   member is dropped by rmcp's
//!   `CallToolRequestParams`). The HTTP service and `serve_io` run it on
//!   every message they read.
//! * [`Tap`], on the session's transport, adds `capabilities.tasks` to the
//!   `initialize` answer of a 2025-11-25 session and `execution` to its
//!   tools, turns its `tasks/get` and `tasks/cancel` into custom requests,
//!   and marks every request with the session it came on
//!   ([`Session`](tap::Session)), so that a task is seen only by the
//!   session that made it.
//!
//! The tasks themselves run in the same [`Tasks`](crate::mcp::call) as the
//! extension's, under the same bounds.
//!
//! * `lift`: the renaming of a `tools/call` that asks for a task;
//! * `tap`: the session's transport, with the scheme's shapes at its edge;
//! * `shapes`: those shapes (`capabilities.tasks`, `execution`, a task
//!   flat, its status and result);
//! * `serve`: the scheme's requests — the task call, `tasks/get`,
//!   `tasks/result`, `tasks/cancel` — answered.

mod lift;
mod serve;
mod shapes;
mod tap;

pub(super) use lift::{lift, LIFT_GROWTH};
pub(super) use tap::Tap;
