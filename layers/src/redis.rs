//! What the Redis stores (the rate limit's, the spend limit's, the
//! cache's, the budget's) share: where Redis is and how long to wait for
//! it ([`RedisSettings`]), whether it is worth asking now ([`Health`]),
//! and a command asked within both ([`ask`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::{RedisError, RedisResult};
use tokio::time::Instant;

use crate::shared_store::SharedStoreError;

/// How a store reaches Redis: the connection, the prefix of its keys, how
/// long a command waits for an answer, and how long Redis is left alone
/// after it could not be reached. The public builders (the cache's
/// `RedisCacheStore`, the budget's `RedisOutputStore`, the rate limit's
/// `RedisLimiter`, the spend limit's `RedisSpend`) set them, and their
/// docs state these defaults.
#[derive(Clone)]
pub(crate) struct RedisSettings {
    /// Reconnects on its own; cloned per command.
    pub(crate) manager: ConnectionManager,
    /// The prefix of every key: stores, in any process, that use the same
    /// Redis and prefix share what they keep.
    pub(crate) prefix: Arc<str>,
    /// How long a command waits for Redis's answer.
    pub(crate) timeout: Duration,
    /// How long Redis is left alone after it could not be reached.
    pub(crate) recheck_after: Duration,
}

impl RedisSettings {
    /// The Redis that `manager` connects to, keys under `prefix`, a 250 ms
    /// timeout and a 1 s pause.
    pub(crate) fn new(manager: ConnectionManager, prefix: &str) -> Self {
        RedisSettings {
            manager,
            prefix: Arc::from(prefix),
            timeout: Duration::from_millis(250),
            recheck_after: Duration::from_secs(1),
        }
    }
}

/// Whether Redis is worth asking: after it could not be reached, calls
/// fall back without asking for a pause; then the first call to come
/// claims the one retry (the others keep falling back until it answers).
#[derive(Debug)]
pub(crate) struct Health {
    start: Instant,
    /// Until when (microseconds since `start`, plus one) Redis is left
    /// alone; 0 while it answers.
    down_until: AtomicU64,
}

impl Health {
    pub(crate) fn new() -> Self {
        Health {
            start: Instant::now(),
            down_until: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        micros_ceil(self.start.elapsed()).saturating_add(1)
    }

    pub(crate) fn should_ask(&self, pause: Duration) -> bool {
        let until = self.down_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = self.now();
        now >= until
            && self
                .down_until
                .compare_exchange(
                    until,
                    now.saturating_add(micros_ceil(pause)),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    pub(crate) fn reachable(&self) {
        // A read first: calls on many threads would otherwise all write
        // the one shared line.
        if self.down_until.load(Ordering::Relaxed) != 0 {
            self.down_until.store(0, Ordering::Release);
        }
    }

    pub(crate) fn unreachable(&self, pause: Duration) {
        let until = self.now().saturating_add(micros_ceil(pause));
        self.down_until.store(until, Ordering::Release);
    }

    /// A command failed with `err`: Redis is left alone for `pause` if
    /// `err` says it could not be reached. One that refused the command (a
    /// wrong type under the key, out of memory) is asked again.
    pub(crate) fn failed(&self, err: &RedisError, pause: Duration) {
        if err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error() {
            self.unreachable(pause);
        }
    }
}

/// Runs the command `send` makes on a clone of the settings' connection,
/// within their timeout, minding `health`: while Redis is left alone
/// after it could not be reached, nothing is sent
/// ([`SharedStoreError::RecentlyUnreachable`]); an answer puts it back, a
/// timeout or a connection error leaves it alone for the pause. What the
/// rate limit's and the spend limit's stores ask goes through here.
pub(crate) fn ask<T: Send + 'static>(
    settings: &RedisSettings,
    health: &Arc<Health>,
    send: impl FnOnce(ConnectionManager) -> BoxFuture<'static, RedisResult<T>>,
) -> BoxFuture<'static, Result<T, SharedStoreError>> {
    let (timeout, pause) = (settings.timeout, settings.recheck_after);
    if !health.should_ask(pause) {
        return Box::pin(std::future::ready(Err(
            SharedStoreError::RecentlyUnreachable,
        )));
    }
    let health = Arc::clone(health);
    let answer = send(settings.manager.clone());
    Box::pin(async move {
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(value)) => {
                health.reachable();
                Ok(value)
            }
            Ok(Err(err)) => {
                health.failed(&err, pause);
                Err(SharedStoreError::Failed(err.into()))
            }
            Err(_) => {
                health.unreachable(pause);
                Err(SharedStoreError::TimedOut(timeout))
            }
        }
    })
}

/// `d` in microseconds, rounded up, saturating.
pub(crate) fn micros_ceil(d: Duration) -> u64 {
    let micros = d.as_nanos().div_ceil(1_000);
    u64::try_from(micros).unwrap_or(u64::MAX)
}
