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
    /// Seconds since the epoch at which the entry is forgotten.
    expires_at: u64,
}

/// What this process has spent, per counter; shared by every clone of a
/// layer and of its services.
#[derive(Debug, Default)]
pub(super) struct MemoryCounters {
    map: Mutex<HashMap<Key, Entry>>,
}

fn key_of(key: &CounterKey) -> Key {
    (key.scope, key.id, key.period.map_or(0, |p| p.start))
}

impl MemoryCounters {
    /// What each of `keys` holds at `now`.
    pub(super) fn read(&self, keys: &[CounterKey], now: u64) -> Vec<Spent> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .map(|key| {
                map.get(&key_of(key))
                    .filter(|entry| entry.expires_at > now)
                    .map_or_else(Spent::default, |entry| entry.spent)
            })
            .collect()
    }

    /// Adds `spent` to each of `keys`: a window's entry lives until its
    /// window ends, a run's `run_ttl` seconds after its last spend. At
    /// `max_entries`, the expired entries go first, then the one that
    /// would expire soonest.
    pub(super) fn add(
        &self,
        keys: &[CounterKey],
        spent: Spent,
        now: u64,
        run_ttl: u64,
        max_entries: usize,
    ) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for key in keys {
            let expires_at = key
                .period
                .map_or(now.saturating_add(run_ttl), |period| period.end);
            let key = key_of(key);
            if !map.contains_key(&key) && map.len() >= max_entries.max(1) {
                map.retain(|_, entry| entry.expires_at > now);
                if map.len() >= max_entries.max(1) {
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
                expires_at,
            });
            if entry.expires_at <= now {
                entry.spent = Spent::default();
            }
            entry.spent.add(spent);
            entry.expires_at = expires_at;
        }
    }

    /// How many counters are kept.
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
