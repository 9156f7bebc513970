use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tower_layer::Layer;

use super::permits::Permits;
use super::service::Source;
use super::ConcurrencyLimit;

/// Applies a [`ConcurrencyLimit`] to a tool or a model.
///
/// **Not tower's `ConcurrencyLimitLayer`**, though it has its name: tower's
/// (`tower::limit::ConcurrencyLimitLayer`) releases its permit when the
/// response future resolves — for a tool, at its first item — so it
/// limits how many calls work toward their first item, not how many
/// streams run. This one holds the
/// permit until the stream ends, fails or is dropped. Over tools, use this
/// one; see the [module docs](super).
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayer {
    limit: Limit,
    max_wait: Option<Duration>,
}

#[derive(Debug, Clone)]
enum Limit {
    PerService(usize),
    Shared(Source),
}

impl ConcurrencyLimitLayer {
    /// At most `max` calls in flight per wrapped service (its clones
    /// included); each service the layer wraps has its own count.
    pub fn new(max: usize) -> Self {
        ConcurrencyLimitLayer {
            limit: Limit::PerService(max),
            max_wait: None,
        }
    }

    /// At most `max` calls in flight across *every* service this layer (or a
    /// clone of it) wraps.
    pub fn shared(max: usize) -> Self {
        ConcurrencyLimitLayer {
            limit: Limit::Shared(Source::Own(Arc::new(Permits::new(max)))),
            max_wait: None,
        }
    }

    /// Draws permits from `semaphore`, which the caller may share with other
    /// limits or close to refuse further calls.
    pub fn with_semaphore(semaphore: Arc<Semaphore>) -> Self {
        ConcurrencyLimitLayer {
            limit: Limit::Shared(Source::Semaphore(semaphore)),
            max_wait: None,
        }
    }

    /// Lets a call wait at most `max` for a permit; past it the call fails
    /// as overloaded and never reaches the service (see
    /// [`ConcurrencyLimit::max_wait`]).
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = Some(max);
        self
    }
}

impl<S> Layer<S> for ConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> ConcurrencyLimit<S> {
        let limit = match &self.limit {
            Limit::PerService(max) => ConcurrencyLimit::new(inner, *max),
            Limit::Shared(source) => ConcurrencyLimit::from_source(inner, source.clone()),
        };
        match self.max_wait {
            Some(max) => limit.max_wait(max),
            None => limit,
        }
    }
}
