//! The counters in process: a bounded map from counter to what was spent,
//! each entry gone when its window (or a run's time to live) is over.

use std::collections::HashMap;
use std::sync::Mutex;

use super::rules::{CounterKey, Scope, Spent};

/// Which counter: scope, run or caller hash, and window start (0 for a
/// run's).
type Key = (Scope, u64, u64);

#[derive(Debug)]
struct Entry {
    spent: Spent,
    /// What the calls in flight counted here may still spend.
    reserved: Spent,
    /// Seconds since the epoch at which the entry is forgotten.
    expires_at: u64,
}

/// What this process has spent, per counter; shared by every clone of a
/// layer and of its services.
#[derive(Debug, Default)]
pub(super) struct MemoryCounters {
    map: Mutex<HashMap<Key, Entry>>,
}

/// A run's time to live, and how many counters are kept.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) run_ttl: u64,
    pub(super) max_entries: usize,
}

/// The entry of `key`, made (room made for it first) or renewed: an
/// expired one starts again from nothing.
fn entry<'a>(
    map: &'a mut HashMap<Key, Entry>,
    key: &CounterKey,
    now: u64,
    bounds: Bounds,
) -> &'a mut Entry {
    let expires_at = key
        .period
        .map_or(now.saturating_add(bounds.run_ttl), |period| period.end);
    let key = key_of(key);
    let max_entries = bounds.max_entries.max(1);
    if !map.contains_key(&key) && map.len() >= max_entries {
        map.retain(|_, entry| entry.expires_at > now);
        if map.len() >= max_entries {
            let soonest = map
                .iter()
                .min_by_key(|(_, entry)| entry.expires_at)
                .map(|(key, _)| *key);
            if let Some(soonest) = soonest {
                map.remove(&soonest);
            }
        }
    }
    let entry = map.entry(key).or_insert(Entry {
        spent: Spent::default(),
        reserved: Spent::default(),
        expires_at,
    });
    if entry.expires_at <= now {
        entry.spent = Spent::default();
        entry.reserved = Spent::default();
    }
    entry.expires_at = expires_at;
    entry
}

fn key_of(key: &CounterKey) -> Key {
    (key.scope, key.id, key.period.map_or(0, |p| p.start))
}

impl MemoryCounters {
    /// Reserves, in one hold of the lock, what `decide` makes of what
    /// each of `keys` holds at `now` — (spent, reserved by calls in
    /// flight) — so that two calls never both take the same headroom.
    pub(super) fn reserve<E>(
        &self,
        keys: &[CounterKey],
        now: u64,
        bounds: Bounds,
        decide: impl FnOnce(&[(Spent, Spent)]) -> Result<Spent, E>,
    ) -> Result<Spent, E> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let held: Vec<(Spent, Spent)> = keys
            .iter()
            .map(|key| {
                map.get(&key_of(key))
                    .filter(|entry| entry.expires_at > now)
                    .map_or_else(Default::default, |entry| (entry.spent, entry.reserved))
            })
            .collect();
        let reserved = decide(&held)?;
        if reserved != Spent::default() {
            for key in keys {
                entry(&mut map, key, now, bounds).reserved.add(reserved);
            }
        }
        Ok(reserved)
    }

    /// Gives back `reserved` and adds `spent` to each of `keys`: a
    /// window's entry lives until its window ends, a run's `run_ttl`
    /// seconds after its last spend. At `max_entries`, the expired entries
    /// go first, then the one that would expire soonest.
    pub(super) fn settle(
        &self,
        keys: &[CounterKey],
        reserved: Spent,
        spent: Spent,
        now: u64,
        bounds: Bounds,
    ) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            let entry = entry(&mut map, key, now, bounds);
            entry.reserved.sub(reserved);
            entry.spent.add(spent);
        }
    }

    /// How many counters are kept.
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
