//! The calls kept between the rounds of a 2026-07-28 `tools/call` while
//! their tool waits for the client's input, bounded and expired.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::ServerCall;

/// Calls waiting for their client's next round, under their
/// `requestState`: a random 128-bit token, so a client can resume only a
/// call it was given (a forged or altered state finds nothing).
pub(crate) struct ParkedCalls {
    calls: Mutex<HashMap<String, (ServerCall, Instant)>>,
    pub(crate) ttl: Duration,
    pub(crate) max: usize,
}

impl ParkedCalls {
    pub(crate) fn new() -> Self {
        ParkedCalls {
            calls: Mutex::new(HashMap::new()),
            ttl: Duration::from_secs(600),
            max: 1024,
        }
    }

    /// Keeps `call` until its client retries; its `requestState`, or
    /// `None` when too many calls wait already.
    pub(crate) fn park(&self, call: ServerCall) -> Option<String> {
        let now = Instant::now();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let expired = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            let expired = take_expired(&mut calls, now);
            if calls.len() >= self.max {
                return None;
            }
            calls.insert(token.clone(), (call, now + self.ttl));
            expired
        };
        drop(expired);
        Some(token)
    }

    /// The call kept under `token`, if it is a call of `tool` and has not
    /// expired. A token is good for one retry.
    pub(crate) fn resume(&self, token: &str, tool: &str) -> Option<ServerCall> {
        let now = Instant::now();
        let (found, expired) = {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            let found = calls.remove(token);
            (found, take_expired(&mut calls, now))
        };
        drop(expired);
        let (call, deadline) = found?;
        if call.tool() != tool || deadline <= now {
            return None;
        }
        Some(call)
    }

    pub(crate) fn len(&self) -> usize {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Takes out the calls whose clients never came back, to be dropped (which
/// cancels their tools) once the lock is released: a tool's drop runs no
/// code under it.
pub(crate) fn take_expired(
    calls: &mut HashMap<String, (ServerCall, Instant)>,
    now: Instant,
) -> Vec<(ServerCall, Instant)> {
    let expired: Vec<String> = calls
        .iter()
        .filter(|(_, (_, deadline))| *deadline <= now)
        .map(|(token, _)| token.clone())
        .collect();
    expired.iter().filter_map(|t| calls.remove(t)).collect()
}
