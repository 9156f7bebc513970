//! An endpoint's refusals as typed errors: the status and its body (read
//! bounded), and `Retry-After` in seconds or as an HTTP date.

use std::time::{Duration, SystemTime};

use futures_core::Stream;
use futures_util::StreamExt;
use http::HeaderMap;
use serde_json::Value;

use crate::{ErrorKind, ToolError};

pub(super) fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ToolError {
    let detail = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(500).collect());
    let message = format!("the model endpoint answered {status}: {detail}");
    let kind = match status {
        429 => ErrorKind::RateLimited { retry_after },
        401 | 403 => ErrorKind::Denied,
        500..=599 => ErrorKind::Unavailable,
        _ => ErrorKind::Failed,
    };
    let err = ToolError::new(kind, message);
    match retry_after {
        Some(after) => err.with_retry_after(after),
        None => err,
    }
}

/// How much of an error response's body is read: enough for any error
/// message, and a bound on what a hostile endpoint can make us hold.
pub(super) const ERROR_BODY_BYTES: usize = 64 * 1024;

/// The start of an error response's body, as text (lossily decoded; a
/// broken body gives what arrived).
pub(super) async fn error_body<S, B, E>(body: S) -> String
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
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
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
