use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use toolstack::{ErrorKind, ToolError};
pub use tower::retry::budget::{Budget as RetryBudget, TpsBudget};

type Predicate = Arc<dyn Fn(&ToolError) -> bool + Send + Sync>;

/// When and how often to try a tool call again.
///
/// The defaults: 3 attempts in all, retryable kinds only
/// ([`ToolError::is_retryable`]: timeout, rate limited, overloaded,
/// unavailable), exponential backoff from 100 ms doubling up to 5 s with
/// jitter, a retry-after honoured up to 10 s (an error asking for longer
/// is handed back, not waited on), no budget, and non-idempotent tools not
/// retried once the call reached them.
#[derive(Clone)]
pub struct RetryPolicy {
    pub(super) max_attempts: u32,
    pub(super) base_delay: Duration,
    pub(super) max_delay: Duration,
    pub(super) jitter: bool,
    pub(super) honour_retry_after: bool,
    pub(super) max_retry_after: Duration,
    pub(super) retry_non_idempotent: bool,
    pub(super) retry_if: Option<Predicate>,
    pub(super) budget: Option<Arc<dyn RetryBudget + Send + Sync>>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            jitter: true,
            honour_retry_after: true,
            max_retry_after: Duration::from_secs(10),
            retry_non_idempotent: false,
            retry_if: None,
            budget: None,
        }
    }
}

impl RetryPolicy {
    /// The default policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `attempts` attempts in all (the first call included). An
    /// attempt refused for capacity — a permit or a quota not granted
    /// within its bounded wait — is one of them.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Exponential backoff: `base` before the first retry, doubling each
    /// time, never more than `max`.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_delay = base;
        self.max_delay = max.max(base);
        self
    }

    /// Whether delays are jittered (by default, "equal jitter": each
    /// delay is drawn between half and all of its exponential value, so
    /// callers that failed together do not retry together).
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// Whether a rate limit's retry-after is waited out (by default, yes:
    /// the delay is at least the retry-after).
    pub fn honour_retry_after(mut self, on: bool) -> Self {
        self.honour_retry_after = on;
        self
    }

    /// The longest retry-after this policy waits for (default 10 s). An
    /// error whose retry-after is longer — a 429 saying "come back in two
    /// minutes" — is not retried but handed back as it is (typed, with its
    /// retry-after), so the caller decides instead of sitting silent.
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// Retries tools that do not declare themselves idempotent even after
    /// the call reached them (off by default).
    pub fn retry_non_idempotent(mut self, on: bool) -> Self {
        self.retry_non_idempotent = on;
        self
    }

    /// Decides which errors are retried, instead of
    /// [`ToolError::is_retryable`].
    pub fn retry_if(
        mut self,
        predicate: impl Fn(&ToolError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.retry_if = Some(Arc::new(predicate));
        self
    }

    /// Draws every retry from `budget` (e.g. a [`TpsBudget`] shared by many
    /// services), so that retries stay a bounded fraction of the calls; each
    /// call deposits into it.
    pub fn budget(mut self, budget: Arc<dyn RetryBudget + Send + Sync>) -> Self {
        self.budget = Some(budget);
        self
    }

    pub(super) fn is_retryable(&self, err: &ToolError) -> bool {
        match &self.retry_if {
            Some(predicate) => predicate(err),
            None => err.is_retryable(),
        }
    }

    /// The delay before retry number `retry` (1-based) after `err`.
    pub(super) fn delay(&self, retry: u32, err: &ToolError) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(
                1u32.checked_shl(retry.saturating_sub(1))
                    .unwrap_or(u32::MAX),
            )
            .min(self.max_delay);
        let mut delay = if self.jitter {
            let half = exp / 2;
            half + half.mul_f64(random_unit())
        } else {
            exp
        };
        if self.honour_retry_after {
            if let Some(after) = err.retry_after() {
                delay = delay.max(after);
            }
        }
        delay
    }
}

/// Whether an error shows the call was refused before the tool ran, so that
/// trying again cannot repeat any of its effects.
pub(super) fn refused_before_running(err: &ToolError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::RateLimited { .. } | ErrorKind::Overloaded
    )
}

/// A uniform number in [0, 1), from the standard library's randomly keyed
/// hasher: enough for jitter, without a random-number crate.
fn random_unit() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x9e37_79b9_7f4a_7c15);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("jitter", &self.jitter)
            .field("honour_retry_after", &self.honour_retry_after)
            .field("max_retry_after", &self.max_retry_after)
            .field("retry_non_idempotent", &self.retry_non_idempotent)
            .field("retry_if", &self.retry_if.as_ref().map(|_| "custom"))
            .field("budget", &self.budget.as_ref().map(|_| "set"))
            .finish()
    }
}
