//! [`ClientInput`]: a tool asks the MCP client for input mid-call
//! (elicitation, sampling, roots), over whichever mechanism the call's
//! protocol revision has.
//!
//! * Up to 2025-11-25 the server sends the client a request on the
//!   session (`elicitation/create`, …) and the tool awaits its answer.
//! * From 2026-07-28 a server may not send requests: the call answers with
//!   an *input-required* result listing what it needs, the client retries
//!   the call with the answers, and the server resumes the same tool
//!   stream (kept, waiting, under an unguessable `requestState`).
//! * Inside an MCP task the request goes to the task
//!   (`input_required` in `tasks/get`, answered with `tasks/update`).
//!
//! The tool's code is the same in all three: it awaits
//! [`ClientInput::elicit`] (or [`confirm`](ClientInput::confirm),
//! [`create_message`](ClientInput::create_message),
//! [`list_roots`](ClientInput::list_roots)).
//!
//! * `client_input`: [`ClientInput`], the tool's side: what it asks, and
//!   how it waits for the answer;
//! * `state`: `InputState`, the call's side, shared with the server that
//!   drives the call: the mechanism, the requests waiting for a round, the
//!   answers that came;
//! * `kind`: what a request asks for (elicitation, sampling, roots), the
//!   capability it needs and the answer's shape.
#![allow(deprecated)] // sampling and roots: SEP-2577 deprecates them in rmcp

mod client_input;
mod kind;
mod state;

pub use client_input::ClientInput;
pub(super) use state::{Backend, InputState};
