//! The protocol revisions the server tells apart: the one home of the
//! comparisons (revision names are dates, so they compare as text).

use rmcp::model::ProtocolVersion;

/// Whether `version` is revision 2026-07-28 or later: stateless requests,
/// no requests from the server, input through input-required results, and
/// tasks as an extension (a `task` in `tools/call` is ignored).
pub(super) fn is_stateless(version: &str) -> bool {
    version >= ProtocolVersion::V_2026_07_28.as_str()
}

/// Whether a session of `version` speaks the 2025-11-25 task scheme: the
/// one revision that has it in its core.
pub(super) fn speaks_legacy_tasks(version: &str) -> bool {
    version >= ProtocolVersion::V_2025_11_25.as_str() && !is_stateless(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_compare_by_date() {
        assert!(is_stateless("2026-07-28"));
        assert!(is_stateless("2027-01-01"));
        assert!(!is_stateless("2025-11-25"));
        assert!(speaks_legacy_tasks("2025-11-25"));
        assert!(!speaks_legacy_tasks("2025-06-18"));
        assert!(!speaks_legacy_tasks("2026-07-28"));
    }
}
