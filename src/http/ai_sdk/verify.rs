//! Signed approvals checked against the calls waiting in the store.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agent::store::{CallState, RunStore};
use crate::agent::ResumeError;
use crate::approval::{input_digest, ApprovalKeys, SignatureError};

use super::approvals::split_approval_id;
use super::refusal::resume_refused;
use super::request::ApprovalAnswer;
use super::ChatEndpoint;

impl<M> ChatEndpoint<M> {
    /// Checks each answer's signature against the call waiting in the
    /// store under its approval id: the key, the approval id, the call
    /// id, the tool and the arguments stored — and that the arguments the
    /// answer shows are those. The first that fails refuses them all.
    pub(super) async fn verify(
        &self,
        keys: &ApprovalKeys,
        run_id: &str,
        chat: Option<&str>,
        answers: &[ApprovalAnswer],
    ) -> Result<(), Response> {
        let stored = self
            .store
            .load(run_id)
            .await
            .map_err(|err| resume_refused(&ResumeError::Store(err)))?;
        let Some(stored) = stored else {
            // Nothing waits: the answers resume nothing (a new run starts).
            return Ok(());
        };
        for answer in answers {
            let Some((answer_run, call_id)) = split_approval_id(&answer.approval_id, chat) else {
                continue;
            };
            if answer_run != run_id {
                continue;
            }
            let waiting = stored
                .checkpoint
                .step
                .iter()
                .find_map(|record| match &record.state {
                    CallState::WaitingApproval { request } if record.call.id == call_id => {
                        Some(request)
                    }
                    _ => None,
                });
            let Some(request) = waiting else {
                continue;
            };
            let checked = match answer.signature.as_deref() {
                None => Err(SignatureError::Missing),
                Some(signature) => keys
                    .verify(
                        signature,
                        &answer.approval_id,
                        answer.tool_call_id.as_deref().unwrap_or(call_id),
                        &request.tool,
                        &request.arguments,
                    )
                    .map(|_| ()),
            };
            let shown = answer
                .input
                .as_ref()
                .map(|input| input_digest(&input.to_string()));
            let why = match checked {
                Err(err) => Some(err.to_string()),
                Ok(()) if shown.is_some_and(|shown| shown != input_digest(&request.arguments)) => {
                    Some("the answer shows other arguments than the call that waits".to_owned())
                }
                Ok(()) => None,
            };
            if let Some(why) = why {
                tracing::warn!(
                    approval_id = %answer.approval_id,
                    gen_ai.tool.name = %request.tool,
                    gen_ai.tool.call.id = %call_id,
                    "an approval answer was refused: {why}"
                );
                let body = json!({
                    "error": format!("approval {} refused: {why}", answer.approval_id),
                    "kind": "denied",
                });
                return Err((StatusCode::FORBIDDEN, axum::Json(body)).into_response());
            }
        }
        Ok(())
    }
}
