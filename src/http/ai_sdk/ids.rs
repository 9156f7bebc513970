//! Ids of messages and of runs' streams.

pub(super) use crate::id::new_token;

/// `{prefix}-` and an unpredictable token (ids of messages).
pub(super) fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", new_token())
}
