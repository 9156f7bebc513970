//! Unpredictable ids: run ids, approval ids, the handles of kept outputs.
//!
//! ```
//! let token = toolstack::id::new_token();
//! assert_eq!(token.len(), 32);
//! assert_ne!(token, toolstack::id::new_token());
//! ```

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// 128 unpredictable bits, as 32 hex digits: two SipHash values of a
/// process-wide counter under std's randomly keyed hashers — without the
/// process's keys, not to be guessed from other tokens.
pub fn new_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let a = std::collections::hash_map::RandomState::new().hash_one(n);
    let b = std::collections::hash_map::RandomState::new().hash_one(!n);
    format!("{a:016x}{b:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_distinct_hex() {
        let (a, b) = (super::new_token(), super::new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
