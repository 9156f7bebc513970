//! An endpoint's refusals as typed errors: the status and its body (read
//! bounded), the error's type (`rate_limit_error`, `overloaded_error`…),
//! and `Retry-After` in milliseconds, seconds or as an HTTP date.

use std::time::{Duration, SystemTime};

use futures_core::Stream;
use futures_util::StreamExt;
use http::HeaderMap;
use serde_json::Value;

use crate::{ErrorKind, ToolError};

/// The error of a refused request: the kind from the status (refined by
/// the body's error type, when it names one), the message from the body
/// (its `error.message`, else its start), the wait the headers asked for.
pub(crate) fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ToolError {
    let json = serde_json::from_str::<Value>(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let detail = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(|m| m.chars().take(500).collect())
        .unwrap_or_else(|| body.chars().take(500).collect::<String>());
    let error_type = error.and_then(error_type);
    let kind = match (status, error_type.and_then(kind_of_type)) {
        (429, _) | (_, Some(ErrorKind::RateLimited { .. })) => {
            ErrorKind::RateLimited { retry_after }
        }
        (_, Some(kind)) => kind,
        (401 | 403, None) => ErrorKind::Denied,
        (500..=599, None) => ErrorKind::Unavailable,
        _ => ErrorKind::Failed,
    };
    let message = match error_type {
        Some(t) => format!("the model endpoint answered {status} ({t}): {detail}"),
        None => format!("the model endpoint answered {status}: {detail}"),
    };
    let mut err = ToolError::new(kind, message);
    if too_long(status, error, &detail) {
        err = err.with_source(crate::model::ContextExceeded);
    }
    with_wait(err, retry_after)
}

/// Whether a refusal is for the request's length: OpenAI's error code
/// `context_length_exceeded`, Anthropic's "prompt is too long" (a 400
/// `invalid_request_error`).
fn too_long(status: u16, error: Option<&Value>, detail: &str) -> bool {
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_str);
    code == Some("context_length_exceeded")
        || (status == 400 && detail.starts_with("prompt is too long"))
}

/// The error an endpoint reports in its stream, after a success status (an
/// Anthropic `error` event, an OpenAI error chunk): typed by its error type
/// as a status error is, else failed.
pub(crate) fn stream_error(error: &Value) -> ToolError {
    let error_type = error_type(error);
    let kind = error_type
        .and_then(kind_of_type)
        .unwrap_or(ErrorKind::Failed);
    let detail = match error.get("message").and_then(Value::as_str) {
        Some(message) => message.chars().take(500).collect(),
        None => error.to_string().chars().take(500).collect::<String>(),
    };
    let message = match error_type {
        Some(t) => format!("the model reported an error mid-stream ({t}): {detail}"),
        None => format!("the model reported an error mid-stream: {detail}"),
    };
    ToolError::new(kind, message)
}

/// An error object's `type` (Anthropic's, and OpenAI's), bounded as a
/// name is.
fn error_type(error: &Value) -> Option<&str> {
    error
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && t.len() <= 64)
}

/// What an error type says about retrying, where the status alone does not
/// (an overload is retryable whatever status carries it; an invalid request
/// is not, even as a 5xx of a proxy). Types not listed leave it to the
/// status.
fn kind_of_type(error_type: &str) -> Option<ErrorKind> {
    Some(match error_type {
        "rate_limit_error" | "rate_limit_exceeded" => ErrorKind::RateLimited { retry_after: None },
        "overloaded_error" | "api_error" | "server_error" => ErrorKind::Unavailable,
        "authentication_error" | "permission_error" => ErrorKind::Denied,
        "invalid_request_error" | "not_found_error" | "request_too_large" => ErrorKind::Failed,
        _ => return None,
    })
}

fn with_wait(err: ToolError, retry_after: Option<Duration>) -> ToolError {
    match retry_after {
        Some(after) => err.with_retry_after(after),
        None => err,
    }
}

/// How much of an error response's body is read: enough for any error
/// message, and a bound on what a hostile endpoint can make us hold.
pub(crate) const ERROR_BODY_BYTES: usize = 64 * 1024;

/// The start of an error response's body, as text (lossily decoded; a
/// broken body gives what arrived).
pub(crate) async fn error_body<S, B, E>(body: S) -> String
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    while let Some(Ok(piece)) = body.next().await {
        let room = ERROR_BODY_BYTES - bytes.len();
        let piece = piece.as_ref();
        bytes.extend_from_slice(&piece[..piece.len().min(room)]);
        if bytes.len() == ERROR_BODY_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// When the endpoint says to try again: `retry-after-ms` (OpenAI's, more
/// precise) first, else `Retry-After` as seconds (fractions accepted) or an
/// HTTP-date. A date is counted from the response's own `Date` when it
/// sent one (so a skewed local clock does not matter), else from now; a
/// date in the past means now. Unreadable values are ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    // `try_from_secs_f64` refuses a negative, infinite or NaN value, where
    // `from_secs_f64` would panic.
    let seconds = |secs: f64| Duration::try_from_secs_f64(secs).ok();
    if let Some(after) = header("retry-after-ms")
        .and_then(|v| v.parse::<f64>().ok())
        .and_then(|ms| seconds(ms / 1000.0))
    {
        return Some(after);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Some(after) = value.parse::<f64>().ok().and_then(seconds) {
        return Some(after);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let now = header("date")
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or_else(SystemTime::now);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ContextExceeded;

    #[test]
    fn a_refusal_for_length_is_marked_as_one_by_either_provider() {
        let openai = r#"{"error": {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#;
        let anthropic = r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        for body in [openai, anthropic] {
            let err = status_error(400, None, body);
            assert!(ContextExceeded::is(&err), "{err}");
            assert_eq!(err.kind(), ErrorKind::Failed);
        }
        let other = r#"{"error": {"message": "bad tool schema", "type": "invalid_request_error"}}"#;
        assert!(!ContextExceeded::is(&status_error(400, None, other)));
        assert!(!ContextExceeded::is(&status_error(429, None, "slow down")));
    }
}
