//! Writing a durable run's events to its [`RunEvents`] log, so a front
//! end in another process streams them.
//!
//! Each writer is a *part* of the run, and numbers its events; the log
//! keeps an event written twice once. What is written where, so that a
//! replay — Restate running a handler again from its journal, after a
//! crash or a suspension — never shows an event twice:
//!
//! | part | events | written |
//! |---|---|---|
//! | `run` | the loop's own: `ToolCall`, `TurnDiscarded`, `Compacted`, `GuardrailTriggered`, `Output`, `Error`, `Done` | by the run's handler on every execution, attempt 1: a replay writes the same events under the same numbers |
//! | `call {id} {k}` (the `k`th call of that id) | a call's end as the run sees it: `ToolResult`, `ToolsLoaded`, a denial's `ApprovalDecided` | the same way |
//! | `turn {place}` | a model turn's deltas | inside the turn's step, only when it runs: a step run again after a crash is a new attempt, which first writes `TurnDiscarded` (the half-written answer is void) |
//! | `tool {key} {step}` | a tool's items and progress, a policy's decisions | inside the call's step, the same way |
//! | `approval {key}` | the person asked (`ApprovalRequested`), once there was room; their decision (`ApprovalDecided`) | by the call's workflow on every execution, attempt 1 |
//!
//! A write that fails is logged (a warning) and the run goes on: the log
//! shows the run, it does not hold it.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::agent::event::AgentEvent;
use crate::agent::run_events::{EventKey, EventRecord, RunEvents};
use crate::ToolError;

/// One part's events, numbered as written.
pub(in crate::agent) struct Writer {
    log: Arc<dyn RunEvents>,
    run: String,
    part: String,
    attempt: u32,
    next: u64,
}

impl Writer {
    /// A part written the same on every execution (its attempt is 1): a
    /// replay's events are the ones written before.
    pub(in crate::agent) fn replayed(log: &Arc<dyn RunEvents>, run: &str, part: String) -> Writer {
        Writer {
            log: Arc::clone(log),
            run: run.to_owned(),
            part,
            attempt: 1,
            next: 0,
        }
    }

    /// A part written only while it runs: a new attempt each time. A
    /// second attempt first says that the first one's events are void.
    pub(in crate::agent) async fn live(
        log: &Arc<dyn RunEvents>,
        run: &str,
        part: String,
    ) -> Writer {
        let attempt = match log.begin(run, &part).await {
            Ok(attempt) => attempt,
            Err(err) => {
                tracing::warn!(run_id = run, part = %part, error = %err, "a run's events: an attempt could not be counted");
                1
            }
        };
        let mut writer = Writer {
            log: Arc::clone(log),
            run: run.to_owned(),
            part,
            attempt,
            next: 0,
        };
        if attempt > 1 {
            let void = AgentEvent::TurnDiscarded {
                error: ToolError::new(
                    crate::ErrorKind::Interrupted,
                    "the process running this step stopped; it runs again",
                ),
            };
            writer.write(&void).await;
        }
        writer
    }

    /// Writes `event` as this part's next.
    pub(in crate::agent) async fn write(&mut self, event: &AgentEvent) {
        let record = EventRecord::from(event);
        let key = EventKey::new(&self.part, self.attempt, self.next);
        self.next += 1;
        if let Err(err) = self.log.write(&self.run, key, &record).await {
            tracing::warn!(run_id = %self.run, part = %self.part, error = %err, "a run's event was not written");
        }
    }

    /// Writes every event `events` receives, until its senders are gone.
    pub(in crate::agent) async fn drain(mut self, mut events: mpsc::Receiver<AgentEvent>) {
        while let Some(event) = events.recv().await {
            self.write(&event).await;
        }
    }
}

/// The part of the run's handler that writes `event`, given how many
/// calls of each id the run has made so far (`calls`, counted here from
/// its `ToolCall` events).
pub(in crate::agent) fn part_of(
    event: &AgentEvent,
    calls: &mut std::collections::HashMap<String, u32>,
) -> String {
    let call = |id: &str, calls: &std::collections::HashMap<String, u32>| {
        format!("call {id} {}", calls.get(id).copied().unwrap_or(0))
    };
    match event {
        AgentEvent::ToolCall(made) => {
            *calls.entry(made.id.clone()).or_insert(0) += 1;
            "run".to_owned()
        }
        AgentEvent::ToolResult { call_id, .. }
        | AgentEvent::ToolOutput { call_id, .. }
        | AgentEvent::Progress { call_id, .. }
        | AgentEvent::ToolsLoaded { call_id, .. }
        | AgentEvent::ApprovalRequested { call_id, .. }
        | AgentEvent::ApprovalDecided { call_id, .. } => call(call_id, calls),
        AgentEvent::AwaitingApproval { call_ids } => {
            let first = call_ids.first().map(String::as_str).unwrap_or_default();
            format!("{} waiting", call(first, calls))
        }
        _ => "run".to_owned(),
    }
}
