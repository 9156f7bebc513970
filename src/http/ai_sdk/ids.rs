//! Ids of messages and approvals, and the lock every part takes.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `{prefix}-` and a process-unique number (ids of messages).
pub(super) fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{}",
        new_token_with(NEXT.fetch_add(1, Ordering::Relaxed))
    )
}

/// 128 unpredictable bits, hex: an approval id.
pub(super) fn new_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    new_token_with(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Two SipHash values of `n` under std's randomly keyed hashers: without
/// the process's keys, not to be guessed from other tokens.
pub(super) fn new_token_with(n: u64) -> String {
    let a = std::collections::hash_map::RandomState::new().hash_one(n);
    let b = std::collections::hash_map::RandomState::new().hash_one(!n);
    format!("{a:016x}{b:016x}")
}
