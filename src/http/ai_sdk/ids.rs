//! Ids of messages and approvals, and the lock every part takes.

use std::sync::{Mutex, MutexGuard};

pub(super) use crate::id::new_token;

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `{prefix}-` and an unpredictable token (ids of messages).
pub(super) fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", new_token())
}
