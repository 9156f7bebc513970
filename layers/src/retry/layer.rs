use toolstack::Describe;
use tower_layer::Layer;

use super::{Retry, RetryPolicy};

/// Applies [`Retry`] with a policy. The wrapped tool must carry its
/// description ([`Describe`]), which says whether it is idempotent; for a
/// service without one, use [`Retry::with_idempotency`].
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

impl<S: Describe> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, self.policy.clone())
    }
}
