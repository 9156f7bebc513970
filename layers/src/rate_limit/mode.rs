//! What a call over the limit does — wait, perhaps only so long, or be
//! refused at once — and the error that refuses it, alike for the buckets
//! in process and for those shared by processes.

use std::time::Duration;

use toolstack::{ErrorKind, ToolError};

use super::limiter::{CallKey, Limiter};
use crate::Request;

/// What a call over the limit does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Sleep until the bucket allows the call, then make it; a call that
    /// would sleep longer than `max` (when set) is refused at once.
    Wait { max: Option<Duration> },
    /// Fail at once with [`ErrorKind::RateLimited`](toolstack::ErrorKind).
    Reject,
}

impl Mode {
    /// The error that refuses a call over the limit, when this mode does
    /// not let it wait `retry_after`: always in reject mode, and when the
    /// wait is longer than `wait_at_most`. `None`: the call waits.
    pub(super) fn refusal<R: Request>(
        self,
        limiter: &dyn Limiter,
        request: &R,
        retry_after: Duration,
    ) -> Option<ToolError> {
        // A call that may not wait, or would wait longer than it may, is
        // refused now with its retry-after; the tool never starts.
        let message = match self {
            Mode::Reject => format!(
                "rate limit for {} reached; retry after {} ms",
                limiter.bucket_name(CallKey::of(request)),
                millis_ceil(retry_after)
            ),
            Mode::Wait { max: Some(max) } if retry_after > max => format!(
                "would wait {} ms for the quota of {}, more than the {} ms a call may wait; the {} never started",
                millis_ceil(retry_after),
                limiter.bucket_name(CallKey::of(request)),
                millis_ceil(max),
                R::KIND,
            ),
            Mode::Wait { .. } => return None,
        };
        tracing::debug!(
            operation = R::KIND.operation(),
            target = request.name(),
            retry_after_ms = millis_ceil(retry_after),
            "rate limited; refusing the call"
        );
        Some(crate::call_context::refused_here(ToolError::new(
            ErrorKind::RateLimited {
                retry_after: Some(retry_after),
            },
            message,
        )))
    }
}

/// Whole milliseconds, rounded up: a caller told "retry after 999 ms" when
/// 999.5 ms are needed would be refused again.
pub(super) fn millis_ceil(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}
