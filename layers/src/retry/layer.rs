use tower_layer::Layer;

use super::policy::RetryPolicy;
use super::service::Retry;

/// Applies [`Retry`] with a policy, over a tool or a model.
///
/// Whether a call may be repeated once it may have reached the service is
/// [`Inferred`]: from the annotations of the tool the request was
/// dispatched to ([`ToolRequest::info`](toolstack::ToolRequest::info)) for
/// a tool call, and always for a model call. To say it yourself, use
/// [`Retry::with_idempotency`].
///
/// [`Inferred`]: super::Inferred
#[derive(Debug, Clone, Default)]
pub struct RetryLayer {
    policy: RetryPolicy,
}

impl RetryLayer {
    /// A layer retrying by `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        RetryLayer { policy }
    }
}

impl<S: Clone> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, self.policy.clone())
    }
}
