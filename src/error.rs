//! [`ToolError`]: what went wrong with a tool call, in a form both code and a
//! model can act on.
//!
//! Every failure of a call — arguments that do not decode, an unknown tool, a
//! timeout, a rate limit, a panic, a tool that reports failure — is a
//! `ToolError` with an [`ErrorKind`], a message and an optional source.
//! Errors coming out of tower's own layers (`BoxError`) are classified by
//! downcasting, so a `LoadShed` or `Timeout` stacked onto a tool still yields
//! a meaningful kind.
//!
//! ```
//! use toolstack::{ErrorKind, ToolError};
//!
//! let err = ToolError::invalid_arguments("missing field `city`");
//! assert_eq!(err.kind(), ErrorKind::InvalidArguments);
//! assert!(!err.is_retryable());
//! assert_eq!(
//!     err.to_model_json(),
//!     serde_json::json!({"error": "missing field `city`", "kind": "invalid_arguments"}),
//! );
//! ```

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A type-erased error, as produced by tower's stock middleware.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Which bound a timeout exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// The call did not open in time: its response future, which for a
    /// tool resolves when it has begun answering (its first item, or a
    /// failure before it) — what tower's stock `Timeout` bounds.
    Open,
    /// The total deadline, counted from `call`, passed.
    Deadline,
    /// The first output item did not arrive in time.
    FirstItem,
    /// The gap between two output items was too long.
    Idle,
}

impl TimeoutPhase {
    /// A short lowercase name for logs and model-facing messages.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutPhase::Open => "open",
            TimeoutPhase::Deadline => "deadline",
            TimeoutPhase::FirstItem => "first_item",
            TimeoutPhase::Idle => "idle",
        }
    }
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of a [`ToolError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The arguments were malformed, of the wrong shape, or too large.
    InvalidArguments,
    /// No tool of that name is visible to the caller.
    NotFound,
    /// A time bound was exceeded.
    Timeout {
        /// Which bound.
        phase: TimeoutPhase,
    },
    /// A rate limit refused the call.
    RateLimited {
        /// When the caller may try again, if known.
        retry_after: Option<Duration>,
    },
    /// The tool is at capacity and shed the call.
    Overloaded,
    /// The tool (or the worker behind it) is gone.
    Unavailable,
    /// The call was cancelled before it finished.
    Cancelled,
    /// The tool panicked.
    Panicked,
    /// A policy or an approver refused the call.
    Denied,
    /// The tool ran and reported failure.
    Failed,
    /// The call had started when its process stopped: it may have run,
    /// and was not run again (its tool is not idempotent).
    Interrupted,
    /// A guardrail raised: what it found ends the call, and an agent's run
    /// ([`StopReason::Guardrail`](crate::agent::StopReason::Guardrail)).
    Guardrail,
    /// A spend limit (tokens or cost, per run, caller or window) was
    /// reached, and the model was not called. Not retryable: the limit
    /// stays reached until its window rolls over or an operator raises it.
    SpendLimited,
}

impl ErrorKind {
    /// A short snake_case name, as used in the model-facing JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Timeout { .. } => "timeout",
            ErrorKind::RateLimited { .. } => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Panicked => "panicked",
            ErrorKind::Denied => "denied",
            ErrorKind::Failed => "failed",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Guardrail => "guardrail",
            ErrorKind::SpendLimited => "spend_limited",
        }
    }

    /// Whether a call failing this way may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout { .. }
                | ErrorKind::RateLimited { .. }
                | ErrorKind::Overloaded
                | ErrorKind::Unavailable
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of a tool call: a kind, a message and an optional source.
///
/// Cheap to move (one pointer) and `Clone` (the source is shared), so it can
/// travel inside a stream item, be cached, or be handed to several
/// observers.
#[derive(Clone)]
pub struct ToolError {
    inner: Box<Inner>,
}

#[derive(Clone)]
struct Inner {
    kind: ErrorKind,
    message: Cow<'static, str>,
    retryable: Option<bool>,
    retry_after: Option<Duration>,
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

impl ToolError {
    /// An error of the given kind with a message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        ToolError {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                retryable: None,
                retry_after: None,
                source: None,
            }),
        }
    }

    /// The arguments were malformed or of the wrong shape.
    pub fn invalid_arguments(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidArguments, message)
    }

    /// The tool ran and failed; the message is shown to the model.
    pub fn failed(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// The tool is not known (or not visible to this caller).
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// A time bound was exceeded.
    pub fn timeout(phase: TimeoutPhase, message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Timeout { phase }, message)
    }

    /// A rate limit refused the call.
    pub fn rate_limited(retry_after: Option<Duration>) -> Self {
        let message = match retry_after {
            Some(d) => format!("rate limited; retry after {} ms", ceil_millis(d)),
            None => "rate limited".to_owned(),
        };
        Self::new(ErrorKind::RateLimited { retry_after }, message)
    }

    /// The call was cancelled.
    pub fn cancelled(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Cancelled, message)
    }

    /// The tool, or what it depends on (a database, an API), is not
    /// reachable now; retryable.
    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// The tool is at capacity and sheds the call; retryable.
    pub fn overloaded(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Overloaded, message)
    }

    /// A policy or an approver refused the call (the message says why, for
    /// the model to choose another way).
    pub fn denied(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::Denied, message)
    }

    /// A future or stream of toolstack's was polled again after it had
    /// completed — a bug in the code that polls it, never in the tool.
    ///
    /// Every future in toolstack and toolstack-layers answers such a poll
    /// with this error (kind [`ErrorKind::Failed`], not retryable) rather
    /// than a panic; every stream is fused instead (`None` after its end,
    /// and after an error item).
    pub fn polled_after_completion(what: &'static str) -> Self {
        Self::new(
            ErrorKind::Failed,
            format!("{what} was polled after it completed (a bug in the code polling it)"),
        )
        .with_retryable(false)
    }

    /// The same error (kind, retry-after, source) with another message: a
    /// layer that learns more about a failure says it, keeping what the
    /// error is.
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        self.inner.message = message.into();
        self
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.inner.source = Some(Arc::from(source.into()));
        self
    }

    /// Overrides whether this error is retryable (by default the kind
    /// decides): a tool can mark a transient `Failed` error as worth retrying.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.inner.retryable = Some(retryable);
        self
    }

    /// Says when trying again may succeed, whatever the kind: an endpoint
    /// answering 503 with `Retry-After: 2` is unavailable *and* says when.
    /// For a rate limit, this wins over the kind's own value.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.inner.retry_after = Some(after);
        self
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The human- and model-readable message.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// How long to wait before trying again, if known: the value given to
    /// [`with_retry_after`](Self::with_retry_after), else a rate limit's own.
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after.or(match self.inner.kind {
            ErrorKind::RateLimited { retry_after } => retry_after,
            _ => None,
        })
    }

    /// Whether trying the call again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.inner
            .retryable
            .unwrap_or_else(|| self.inner.kind.is_retryable())
    }

    /// The model-facing form: `{"error": message, "kind": kind}`, plus
    /// `retry_after_ms` when the error says when to come back (a rate
    /// limit's, or any [`with_retry_after`](Self::with_retry_after); rounded
    /// up to the next whole
    /// millisecond: a caller that waits that long has waited long enough)
    /// and `phase` for a timeout.
    pub fn to_model_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::with_capacity(3);
        map.insert(
            "error".into(),
            serde_json::Value::String(self.message().to_owned()),
        );
        map.insert(
            "kind".into(),
            serde_json::Value::String(self.inner.kind.as_str().to_owned()),
        );
        if let ErrorKind::Timeout { phase } = self.inner.kind {
            map.insert("phase".into(), phase.as_str().into());
        }
        // Any error may say when to come back (an overloaded or unavailable
        // endpoint's `Retry-After`), not only a rate limit.
        if let Some(after) = self.retry_after() {
            map.insert("retry_after_ms".into(), ceil_millis(after).into());
        }
        serde_json::Value::Object(map)
    }

    /// The [model-facing form](ToolError::to_model_json) as JSON text: what
    /// a model reads as the tool message of a failed call.
    pub fn to_model_text(&self) -> String {
        let value = self.to_model_json();
        serde_json::to_string(&value).unwrap_or_else(|_| value.to_string())
    }

    /// Reads back the [model-facing form](ToolError::to_model_json), as a
    /// remote server (MCP, HTTP) sent it: the kind, message, timeout phase
    /// and retry-after survive the trip. `None` when `value` is not in that
    /// form; an unknown kind reads as [`ErrorKind::Failed`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use toolstack::{ErrorKind, ToolError};
    ///
    /// let sent = ToolError::rate_limited(Some(Duration::from_millis(1500)));
    /// let back = ToolError::from_model_json(&sent.to_model_json()).unwrap();
    /// assert_eq!(back.kind(), sent.kind());
    /// assert_eq!(back.message(), sent.message());
    /// assert!(ToolError::from_model_json(&serde_json::json!({"oops": 1})).is_none());
    /// ```
    pub fn from_model_json(value: &serde_json::Value) -> Option<ToolError> {
        let message = value.get("error")?.as_str()?.to_owned();
        let kind = match value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("failed")
        {
            "invalid_arguments" => ErrorKind::InvalidArguments,
            "not_found" => ErrorKind::NotFound,
            "timeout" => ErrorKind::Timeout {
                phase: match value.get("phase").and_then(|p| p.as_str()) {
                    Some("deadline") => TimeoutPhase::Deadline,
                    Some("first_item") => TimeoutPhase::FirstItem,
                    Some("idle") => TimeoutPhase::Idle,
                    _ => TimeoutPhase::Open,
                },
            },
            "rate_limited" => ErrorKind::RateLimited {
                retry_after: value
                    .get("retry_after_ms")
                    .and_then(|ms| ms.as_u64())
                    .map(Duration::from_millis),
            },
            "overloaded" => ErrorKind::Overloaded,
            "unavailable" => ErrorKind::Unavailable,
            "cancelled" => ErrorKind::Cancelled,
            "panicked" => ErrorKind::Panicked,
            "denied" => ErrorKind::Denied,
            "interrupted" => ErrorKind::Interrupted,
            "guardrail" => ErrorKind::Guardrail,
            "spend_limited" => ErrorKind::SpendLimited,
            _ => ErrorKind::Failed,
        };
        let error = ToolError::new(kind, message);
        let after = value
            .get("retry_after_ms")
            .and_then(|ms| ms.as_u64())
            .map(Duration::from_millis);
        Some(match (after, kind) {
            (Some(after), kind) if !matches!(kind, ErrorKind::RateLimited { .. }) => {
                error.with_retry_after(after)
            }
            _ => error,
        })
    }

    /// Classifies a `BoxError` from any tower service.
    ///
    /// A boxed `ToolError` is unwrapped; tower's `Elapsed` becomes a timeout
    /// (phase [`TimeoutPhase::Open`]), `Overloaded` becomes overloaded,
    /// a closed `Buffer` becomes unavailable, and a `Buffer`'s `ServiceError`
    /// is looked through to the error it wraps. Anything else is `Failed`
    /// with the error kept as source.
    pub fn from_box_error(err: BoxError) -> Self {
        let err = match err.downcast::<ToolError>() {
            Ok(tool) => return *tool,
            Err(err) => err,
        };
        if err.is::<tower::timeout::error::Elapsed>() {
            return ToolError::timeout(
                TimeoutPhase::Open,
                "the tool did not begin answering in time",
            )
            .with_source(err);
        }
        if err.is::<tower::load_shed::error::Overloaded>() {
            return ToolError::new(ErrorKind::Overloaded, "the tool is overloaded; try later")
                .with_source(err);
        }
        if err.is::<tower::buffer::error::Closed>() {
            return ToolError::new(ErrorKind::Unavailable, "the tool's worker has shut down")
                .with_source(err);
        }
        if err.is::<tower::buffer::error::ServiceError>() {
            // A Buffer shares the inner error between waiters; look through it.
            let mut cause = err.source();
            while let Some(c) = cause {
                if let Some(tool) = c.downcast_ref::<ToolError>() {
                    return tool.clone();
                }
                cause = c.source();
            }
            return ToolError::new(ErrorKind::Unavailable, err.to_string()).with_source(err);
        }
        ToolError::failed(err.to_string()).with_source(err)
    }
}

/// `d` in whole milliseconds, rounded up.
fn ceil_millis(d: Duration) -> u64 {
    let millis = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(millis).unwrap_or(u64::MAX)
}

impl From<BoxError> for ToolError {
    fn from(err: BoxError) -> Self {
        ToolError::from_box_error(err)
    }
}

/// Two errors are equal when kind and message are; sources are not compared.
impl PartialEq for ToolError {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.message() == other.message()
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ToolError");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.kind, self.inner.message)
    }
}

impl StdError for ToolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

impl From<std::convert::Infallible> for ToolError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl From<String> for ToolError {
    /// A plain message from a tool is a [`ErrorKind::Failed`] error.
    fn from(message: String) -> Self {
        ToolError::failed(message)
    }
}

impl From<&'static str> for ToolError {
    /// A plain message from a tool is a [`ErrorKind::Failed`] error.
    fn from(message: &'static str) -> Self {
        ToolError::failed(message)
    }
}

impl From<std::io::Error> for ToolError {
    fn from(err: std::io::Error) -> Self {
        ToolError::failed(err.to_string()).with_source(err)
    }
}
