//! The sessions with a run going on in this process: a second run of one
//! of them is refused here, even though the store shows the session held
//! by this very process.

use std::sync::{Arc, Mutex};

/// The sessions with a run in this process, by the process's id in the
/// store and the session's id: a second run of one of them is refused
/// even though the store shows the session held by this very process.
static SESSIONS: Mutex<Vec<(Arc<str>, Arc<str>)>> = Mutex::new(Vec::new());

/// A session's place in [`SESSIONS`], while its run goes on.
pub(super) struct SessionGuard {
    process: Arc<str>,
    session: Arc<str>,
}

impl SessionGuard {
    /// Enters `session` for `process`; `None` when a run of it is going
    /// on in this process.
    pub(super) fn enter(process: &Arc<str>, session: &Arc<str>) -> Option<Self> {
        let mut running = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        if running
            .iter()
            .any(|(p, s)| **p == **process && **s == **session)
        {
            return None;
        }
        running.push((Arc::clone(process), Arc::clone(session)));
        Some(SessionGuard {
            process: Arc::clone(process),
            session: Arc::clone(session),
        })
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let mut running = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|(p, s)| !(Arc::ptr_eq(p, &self.process) && Arc::ptr_eq(s, &self.session)));
    }
}
