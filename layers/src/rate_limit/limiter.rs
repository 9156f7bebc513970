//! The shared quota state: which bucket a call draws from, and the buckets
//! themselves (governor's limiters).

use std::any::type_name;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use governor::state::keyed::HashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use http::Extensions;

use super::clock::TokioClock;
use crate::shared_store::StableHash;
use crate::{CallKind, Request};

pub(super) type Direct = RateLimiter<NotKeyed, InMemoryState, TokioClock>;
type Keyed<K> = RateLimiter<K, HashMapStateStore<K>, TokioClock>;

/// What a limiter reads of a call, whatever its request type.
#[derive(Clone, Copy)]
pub(super) struct CallKey<'a> {
    kind: CallKind,
    target: &'a str,
    extensions: &'a Extensions,
}

impl<'a> CallKey<'a> {
    pub(super) fn name(&self) -> &'a str {
        self.target
    }

    #[inline]
    pub(super) fn of<R: Request>(request: &'a R) -> Self {
        CallKey {
            kind: R::KIND,
            target: request.name(),
            extensions: request.extensions(),
        }
    }
}

/// Which bucket of a shared store a call draws from, as the limiter keys
/// it; the store turns it into its own key (prefixed, bounded).
// Read only by a store, and the one store is Redis's.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(super) enum BucketKey<'a> {
    /// The one bucket of a global limit.
    All,
    /// A per-tool (or per-model) limit's bucket for `target`.
    Target { kind: CallKind, target: &'a str },
    /// A per-caller limit's bucket for this caller.
    Caller(&'a dyn StableHash),
    /// A per-caller limit's bucket for requests that carry no caller.
    Anonymous,
}

/// How a [`RateLimitLayer`](super::RateLimitLayer) splits its quota between
/// calls.
pub(super) trait Limiter: fmt::Debug + Send + Sync {
    /// Takes one cell from the call's bucket, or returns the earliest
    /// instant at which one could be taken. A refusal takes nothing.
    fn check(&self, call: CallKey<'_>) -> Result<(), Instant>;

    /// Names the call's bucket in a refusal message, e.g. "tool `search`".
    fn bucket_name(&self, call: CallKey<'_>) -> String;

    /// Forgets buckets that are full again (indistinguishable from new).
    fn retain_recent(&self);

    /// The call's bucket as a store shared by processes keys it.
    fn bucket_key<'a>(&'a self, call: CallKey<'a>) -> BucketKey<'a>;

    /// The bucket every call to `call`'s target takes from, for a service
    /// to keep and check directly (no lock, no hash) — `Some` only for a
    /// per-tool limit, where a service in a toolbox calls one tool.
    fn pin(&self, _call: CallKey<'_>) -> Option<Arc<Direct>> {
        None
    }
}

/// One bucket for every request.
pub(super) struct Global {
    bucket: Direct,
    quota: Quota,
}

impl Global {
    pub(super) fn new(quota: Quota) -> Self {
        Global {
            bucket: RateLimiter::direct_with_clock(quota, TokioClock),
            quota,
        }
    }
}

impl Limiter for Global {
    fn check(&self, _: CallKey<'_>) -> Result<(), Instant> {
        self.bucket.check().map_err(|not| not.earliest_possible())
    }

    fn bucket_name(&self, call: CallKey<'_>) -> String {
        format!("all {} calls", call.kind)
    }

    fn retain_recent(&self) {}

    fn bucket_key<'a>(&'a self, _: CallKey<'a>) -> BucketKey<'a> {
        BucketKey::All
    }
}

impl fmt::Debug for Global {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Global")
            .field("quota", &self.quota)
            .finish()
    }
}

/// One bucket per target: the tool's name, or the model named in a model
/// request (requests that name none share one bucket).
///
/// governor's keyed store wants an owned key, and turning the request's
/// `&str` name into an owned string would allocate on every call; a 64-bit
/// hash of the name, seeded at random per layer, is an owned key that
/// costs nothing and that a caller cannot steer into another tool's bucket.
pub(super) struct PerTool {
    buckets: Keyed<u64>,
    // The buckets of the tools a service has pinned (see `Limiter::pin`):
    // the names a toolbox's tools have, so a bounded set, kept for as long
    // as the layer lives. A pinned tool's calls all take from its bucket
    // here, whichever service they come through.
    pinned: Mutex<HashMap<Box<str>, Arc<Direct>>>,
    seed: RandomState,
    quota: Quota,
}

impl PerTool {
    pub(super) fn new(quota: Quota) -> Self {
        PerTool {
            buckets: RateLimiter::hashmap_with_clock(quota, TokioClock),
            pinned: Mutex::new(HashMap::new()),
            seed: RandomState::new(),
            quota,
        }
    }

    fn pinned(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Arc<Direct>>> {
        self.pinned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// At most this many tools get a pinned bucket per layer; past it, tools
/// share the keyed buckets (a layer wrapping that many services is not a
/// per-tool stack in a toolbox).
const MAX_PINNED: usize = 4096;

impl Limiter for PerTool {
    fn check(&self, call: CallKey<'_>) -> Result<(), Instant> {
        let pinned = self.pinned().get(call.target).cloned();
        if let Some(bucket) = pinned {
            return bucket.check().map_err(|not| not.earliest_possible());
        }
        let key = self.seed.hash_one(call.target);
        self.buckets
            .check_key(&key)
            .map_err(|not| not.earliest_possible())
    }

    fn pin(&self, call: CallKey<'_>) -> Option<Arc<Direct>> {
        let mut pinned = self.pinned();
        if let Some(bucket) = pinned.get(call.target) {
            return Some(Arc::clone(bucket));
        }
        if pinned.len() >= MAX_PINNED {
            return None;
        }
        // A tool seen before on the keyed path starts afresh here, once: at
        // most one extra burst, for a layer used both around one tool and
        // around a toolbox that has it.
        let bucket = Arc::new(RateLimiter::direct_with_clock(self.quota, TokioClock));
        pinned.insert(call.target.into(), Arc::clone(&bucket));
        Some(bucket)
    }

    fn bucket_name(&self, call: CallKey<'_>) -> String {
        match call.target {
            "" => format!("{} calls that name no {}", call.kind, call.kind),
            target => format!("{} `{target}`", call.kind),
        }
    }

    fn retain_recent(&self) {
        self.buckets.retain_recent();
    }

    fn bucket_key<'a>(&'a self, call: CallKey<'a>) -> BucketKey<'a> {
        BucketKey::Target {
            kind: call.kind,
            target: call.target,
        }
    }
}

impl fmt::Debug for PerTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerTool")
            .field("quota", &self.quota)
            .field("tools", &self.buckets.len())
            .finish()
    }
}

/// One bucket per caller key `K` found in the request's extensions, and one
/// shared by all requests without it.
pub(super) struct PerCaller<K: Hash + Eq + Clone> {
    buckets: Keyed<K>,
    anonymous: Direct,
    quota: Quota,
}

impl<K: Hash + Eq + Clone> PerCaller<K> {
    pub(super) fn new(quota: Quota) -> Self {
        PerCaller {
            buckets: RateLimiter::hashmap_with_clock(quota, TokioClock),
            anonymous: RateLimiter::direct_with_clock(quota, TokioClock),
            quota,
        }
    }
}

impl<K> Limiter for PerCaller<K>
where
    K: Clone + Hash + Eq + Send + Sync + 'static,
{
    fn check(&self, call: CallKey<'_>) -> Result<(), Instant> {
        let outcome = match call.extensions.get::<K>() {
            Some(key) => self.buckets.check_key(key),
            None => self.anonymous.check(),
        };
        outcome.map_err(|not| not.earliest_possible())
    }

    fn bucket_name(&self, call: CallKey<'_>) -> String {
        match call.extensions.get::<K>() {
            Some(_) => "this caller".to_owned(),
            None => "anonymous callers".to_owned(),
        }
    }

    fn retain_recent(&self) {
        self.buckets.retain_recent();
    }

    fn bucket_key<'a>(&'a self, call: CallKey<'a>) -> BucketKey<'a> {
        match call.extensions.get::<K>() {
            Some(key) => BucketKey::Caller(key),
            None => BucketKey::Anonymous,
        }
    }
}

impl<K: Hash + Eq + Clone> fmt::Debug for PerCaller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCaller")
            .field("key", &type_name::<K>())
            .field("quota", &self.quota)
            .field("callers", &self.buckets.len())
            .finish()
    }
}
