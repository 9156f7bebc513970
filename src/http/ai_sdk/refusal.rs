//! The endpoint's refusals as responses: a status, a kind, and why —
//! and, while the run store is down, when to ask again (`Retry-After`).

use axum::http::header::RETRY_AFTER;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agent::store::StoreError;
use crate::agent::{ResumeError, SessionError};

/// The seconds a client is told to wait (`Retry-After`) before it sends
/// again a request refused because the run store did not answer. A Redis
/// restarted from its append-only file, or a Sentinel/Cluster failover,
/// is back within a few seconds; by the time a request is refused the
/// store has usually been gone a while already (the agent rides out a
/// short outage first). Five seconds lets most outages end before the
/// retry without keeping a person waiting long after the store is back,
/// and spreads a crowd of refused clients less tightly than 1–2 s would.
pub(super) const STORE_RETRY_AFTER_SECS: u64 = 5;

/// A run that cannot be resumed here: `409` when another process holds
/// it (`kind: "held"`: worth sending again, elsewhere or later) or it has
/// ended (`kind: "ended"`: final — the answer was applied once already),
/// `503` with `Retry-After` when the store is down (`kind: "unavailable"`:
/// send the same answer again then).
pub(super) fn resume_refused(err: &ResumeError) -> Response {
    let kind = match err {
        ResumeError::Held { .. } => "held",
        ResumeError::Finished { .. } => "ended",
        _ if err.status() == StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        _ => "failed",
    };
    refused(err.status(), kind, err.to_string())
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

/// An error response: `{"error", "kind"}`; a `503` for a store that did
/// not answer (`kind: "unavailable"`) carries `Retry-After`.
pub(super) fn refused(status: StatusCode, kind: &str, why: String) -> Response {
    let mut response = (status, axum::Json(json!({"error": why, "kind": kind}))).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE && kind == "unavailable" {
        response
            .headers_mut()
            .insert(RETRY_AFTER, STORE_RETRY_AFTER_SECS.into());
    }
    response
}

/// `503` with `Retry-After`: the store (or the chunk log kept in it) did
/// not answer.
pub(super) fn store_unavailable(err: &StoreError) -> Response {
    refused(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        err.to_string(),
    )
}

/// A `400` with the model-facing error shape of `http`.
pub(super) fn bad_request(why: String) -> Response {
    let body = json!({"error": why, "kind": "invalid_request"});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}
