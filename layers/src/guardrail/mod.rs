//! Checks what goes into a tool or a model and what comes out, as it
//! streams: allow, reject with a reason, redact, or raise.
//!
//! A [`Guardrail`] is a name and a check — any async function
//! ([`Guardrail::from_fn`]) or `Service` ([`Guardrail::from_service`]) from
//! a [`Subject`] to a [`Verdict`]: a pattern, a PII detector, a call to a
//! classifier model. [`GuardrailLayer`] runs them on either side of a call,
//! over a tool (`Service<ToolRequest>`) or a model
//! (`Service<ChatRequest>`):
//!
//! | | a tool | a model |
//! |---|---|---|
//! | [`input`](GuardrailLayer::input) checks | the call's arguments | each user and tool message it is sent |
//! | [`output`](GuardrailLayer::output) checks | each item (text, JSON) | each text delta |
//!
//! What a check can say:
//!
//! * [`Verdict::Allow`]: go on.
//! * [`Verdict::Reject`]: stop there, with a reason. On a tool's arguments
//!   the tool is not called: the model reads a
//!   [`Denied`](toolstack::ErrorKind::Denied) error with the reason, and can
//!   try something else. On a model's input the model is not called: its
//!   answer is the reason. On output the stream is cut before the
//!   offending item, which is replaced with the reason.
//! * [`Verdict::Redact`]: put this text instead and go on.
//! * [`Verdict::Raise`]: the call ends with an
//!   [`ErrorKind::Guardrail`](toolstack::ErrorKind::Guardrail) error, and an
//!   agent's run ends with
//!   [`StopReason::Guardrail`](toolstack::agent::StopReason::Guardrail).
//!
//! **Streaming stays safe.** An output item waits for its checks; none
//! passes unchecked, and after a rejection or a raise nothing more is read
//! from the tool or the model. A check of streamed output sees the end of
//! what already passed (the [`lookback`](GuardrailLayer::lookback), 256
//! bytes by default) before the new text, so a match split across two
//! deltas is found; a redaction replaces the new text only. Progress, a
//! model's tool-call fragments and images pass unchecked (a tool call's
//! arguments are checked by the tool's own input guardrails).
//!
//! **A check is bounded.** One that panics, takes longer than
//! [`check_timeout`](GuardrailLayer::check_timeout) (10 s by default) or
//! returns an error has failed; by default the guardrail then refuses
//! ([`OnCheckError::Refuse`]: a guardrail that cannot decide lets nothing
//! through), or lets the content pass with a warning
//! ([`OnCheckError::Allow`]). A reason is cut at 1,000 bytes.
//!
//! **Recorded.** Each input check runs in a span `apply_guardrail {name}`
//! (`gen_ai.operation.name = apply_guardrail`, `gen_ai.guardrail.name`,
//! `gen_ai.guardrail.target` — `tool_call`, `tool_result`, `llm_input`,
//! `llm_output` —, `gen_ai.guardrail.decision` — `allowed`, `rejected`,
//! `redacted`, `raised`, `failed` —, `gen_ai.guardrail.reason`, and
//! `error.type` for a raise or a failure); a stream's checks by one
//! guardrail share one such span for the call. A trigger is a `guardrail
//! triggered` event in that span, and goes to the
//! [`GuardrailEvents`] in the
//! request's extensions: under an [`Agent`](toolstack::agent::Agent), as
//! `AgentEvent::GuardrailTriggered`. The GenAI semantic conventions have no
//! released guardrail span yet; these names follow the `apply_guardrail`
//! proposal.
//!
//! ```
//! use futures_util::StreamExt;
//! use toolstack::{tool, ErrorKind, ToolError, ToolRequest, ToolResult, Toolbox};
//! use toolstack_layers::guardrail::{Guardrail, GuardrailLayer, Verdict};
//! use tower::ServiceExt;
//!
//! #[derive(serde::Deserialize, toolstack::schemars::JsonSchema)]
//! #[schemars(crate = "toolstack::schemars")]
//! struct Query { sql: String }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ToolError> {
//! let query = tool::from_fn("query", |q: Query| async move {
//!     Ok::<_, ToolError>(format!("ran {}; alice@example.com is the owner", q.sql))
//! });
//! let guard = GuardrailLayer::new()
//!     // Nothing that drops a table reaches the tool.
//!     .input(Guardrail::from_fn("no_drop", |subject| async move {
//!         if subject.text.to_lowercase().contains("drop table") {
//!             Verdict::reject("this tool only reads; ask for a SELECT")
//!         } else {
//!             Verdict::Allow
//!         }
//!     }))
//!     // No e-mail address reaches the model.
//!     .output(Guardrail::from_fn("no_email", |subject| async move {
//!         let text = subject.new_text();
//!         if text.contains('@') {
//!             let hidden = text
//!                 .split(' ')
//!                 .map(|word| if word.contains('@') { "[e-mail]" } else { word })
//!                 .collect::<Vec<_>>()
//!                 .join(" ");
//!             Verdict::redact(hidden, "an e-mail address")
//!         } else {
//!             Verdict::Allow
//!         }
//!     }));
//! let tools = Toolbox::new().layered(query, guard);
//!
//! let err = tools.clone().oneshot(ToolRequest::new("query", r#"{"sql": "DROP TABLE users"}"#)).await.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Denied);
//! assert!(err.message().contains("ask for a SELECT"));
//!
//! let stream = tools.oneshot(ToolRequest::new("query", r#"{"sql": "SELECT 1"}"#)).await?;
//! let text = ToolResult::collect(stream).await.into_text();
//! assert_eq!(text, "ran SELECT 1; [e-mail] is the owner");
//! # Ok(()) }
//! ```
//!
//! ## Where it goes
//!
//! Over a tool, inside the trace (the guardrail's spans are then children
//! of `execute_tool`) and above the timeouts, whose bounds should not
//! count a classifier's time; in a toolbox with
//! [`Toolbox::layered`](toolstack::Toolbox::layered), or around the whole
//! toolbox to guard every tool. Over a model, around the model service the
//! agent is given.

mod check;
mod future;
mod layer;
mod service;

pub use check::{Guardrail, OnCheckError, Subject, Verdict};
pub use future::{GuardedStream, ResponseFuture};
pub use layer::{GuardrailLayer, DEFAULT_CHECK_TIMEOUT, DEFAULT_LOOKBACK};
pub use service::{Guarded, GuardedRequest};
pub use toolstack::guardrail::{Action, GuardrailEvents, GuardrailTriggered, Target};
