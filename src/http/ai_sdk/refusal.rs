//! The endpoint's refusals as responses: a status, a kind, and why.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agent::{ResumeError, SessionError};

/// A run that cannot be resumed here: `409` when another process holds
/// it (`kind: "held"`: worth sending again, elsewhere or later) or it has
/// ended (`kind: "ended"`: final — the answer was applied once already),
/// `503` when the store is down.
pub(super) fn resume_refused(err: &ResumeError) -> Response {
    let kind = match err {
        ResumeError::Held { .. } => "held",
        ResumeError::Finished { .. } => "ended",
        _ if err.status() == StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "failed",
    };
    let body = json!({"error": err.to_string(), "kind": kind});
    (err.status(), axum::Json(body)).into_response()
}

/// A session's run refused: its status, with a `kind` to act on.
pub(super) fn session_refused(err: &SessionError) -> Response {
    let kind = match err {
        SessionError::Busy { .. } => "busy",
        SessionError::Waiting { .. } | SessionError::Interrupted { .. } => "waiting",
        SessionError::TooLong { .. } => "too_long",
        SessionError::NotFound { .. } => "not_found",
        SessionError::InvalidId { .. } => "invalid_request",
        _ if err.status() == StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "failed",
    };
    refused(err.status(), kind, err.to_string())
}

/// An error response: `{"error", "kind"}`.
pub(super) fn refused(status: StatusCode, kind: &str, why: String) -> Response {
    (status, axum::Json(json!({"error": why, "kind": kind}))).into_response()
}

/// A `400` with the model-facing error shape of `http`.
pub(super) fn bad_request(why: String) -> Response {
    let body = json!({"error": why, "kind": "invalid_request"});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}
