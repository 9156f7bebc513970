use tower_layer::Layer;

use super::{Inferred, Retry, RetryPolicy};

/// Applies [`Retry`] with a policy, over a tool or a model.
///
/// Whether a call may be repeated once it may have reached the service is
/// [`Inferred`]: from the tool's annotations for a tool call (so the tool
/// below must carry its description — this crate's layers forward it), and
/// always for a model call. The bound is checked where the service is used
/// as a `Service<ToolRequest>`; for a tool service without a description,
/// use [`Retry::with_idempotency`].
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

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S, Inferred>;

    fn layer(&self, inner: S) -> Retry<S, Inferred> {
        Retry::with_idempotency(inner, self.policy.clone(), Inferred)
    }
}
