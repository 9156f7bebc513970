//! Agent runs as Restate workflows (feature `restate`): each model turn
//! and each tool call a journaled step of a `restate-server`, so a run
//! survives the crash of the process running it.
//!
//! [`RestateRuns`] is a Restate service: bind it to an [`Endpoint`] (or
//! [`RestateRuns::serve`] it on a [`listen`]er), register the endpoint
//! with the server's admin API, and start a run through the server's
//! ingress:
//! `POST /AgentRuns/{run id}/run` with `{"messages": [...]}`
//! ([`RunInput`]); the answer is a [`RunOutput`].
//!
//! # What a crash does
//!
//! The run is the workflow's `run` handler, keyed by the run id. The
//! agent's loop is the one every run has — compaction, typed answers,
//! tool search, spend limits' extensions are unchanged —, but its two
//! ways out are durable: asking the model is a `ctx.run` step, and each
//! tool call a call to a workflow of its own, `AgentToolCalls`, keyed by
//! the call's approval id `{run}:{call}` (`{run}:{call}#{k}` for the
//! `k`th call of an id a model gave before). When the process running a run
//! dies, Restate runs the handler again on a live process and *replays*
//! it: a step whose outcome is in the journal is not executed, its
//! outcome is read back. So a model turn that completed is never asked
//! again, and a tool call that completed never runs again. A call in
//! flight at the crash had no outcome: an idempotent tool runs again; a
//! tool not marked idempotent ([`ToolAnnotations`](crate::ToolAnnotations))
//! is answered to the model "the call may have run; …" — the wording and
//! contract of the run journal's resume — and is not run again.
//!
//! The calls of one step are all made at once and run concurrently, each
//! on whichever service process Restate picks; their results join the
//! conversation in call order. The user's toolbox and layers run inside
//! the call's step, unchanged.
//!
//! # Approvals
//!
//! When an approval layer set to `caller_decides()` asks the person about
//! a call, the call's workflow takes a seat among the runs waiting (at
//! most [`max_waiting_runs`](RestateRuns::max_waiting_runs), counted by
//! the object `AgentWaiting` across every process — with none left, the
//! call is denied before anyone is asked, and the model reads why), then
//! waits on a durable promise for
//! [`approval_timeout`](RestateRuns::approval_timeout). While it waits,
//! its invocation and the run's suspend (after
//! [`suspend_after`](RestateRuns::suspend_after)): no process holds them,
//! and any process carries on when the answer comes. The answer is
//! `POST /AgentToolCalls/{approval id}/decide` with an [`Answer`]; the
//! first decision binds, and every answer is told the binding one.
//! `POST /AgentToolCalls/{approval id}/asked` tells what the
//! person is asked, while they are.
//!
//! # A workflow, not a virtual object
//!
//! Both are keyed by the run id and give one `run` per key. A workflow's
//! `run` executes at most once per key (a second submission is answered
//! `PreviouslyAccepted` with the first's invocation), which is what a
//! run is; its shared handlers can read and answer while `run` goes on;
//! and only workflows have durable promises, which approvals wait on. A
//! virtual object would queue a second call behind the first and block
//! its other exclusive handlers while a run waits.
//!
//! # Not yet
//!
//! Events of a run are not streamed out of the handler (the stream's
//! events are those of the current execution, replayed steps included,
//! and a tool call's own items stay in its workflow); the compaction
//! summarizer's model call is not a step yet; the caller's extensions
//! do not reach the tools.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use http::Extensions;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::{Message, ModelService};

use super::event::AgentEvent;
use super::journal::RunJournal;
use super::run::Run;
use super::run_events::RunEvents;
use super::settings::Agent;
use super::steps::restate::{drive, Queue};
use super::steps::Steps;

use self::events::{part_of, Writer};
use self::tool_calls::ToolCalls;
use self::waiting::Waiting;

pub use self::tool_calls::Answer;

pub(super) mod events;
mod tool_calls;
mod waiting;

/// An agent's runs as a Restate workflow service named `AgentRuns`:
/// one workflow per run id, its `run` handler the whole run.
///
/// ```no_run
/// # async fn serve(agent: toolstack::agent::Agent<toolstack::model::ScriptedModel>) -> std::io::Result<()> {
/// use toolstack::agent::restate::{listen, RestateRuns};
///
/// let listener = listen("127.0.0.1:9080".parse().unwrap())?;
/// RestateRuns::new(agent).serve(listener).await;
/// // then: register http://127.0.0.1:9080 with restate-server's admin API
/// # Ok(()) }
/// ```
pub struct RestateRuns<M> {
    agent: Agent<M>,
    approval_timeout: Duration,
    max_waiting_runs: usize,
    suspend_after: Option<Duration>,
    events: Option<Arc<dyn RunEvents>>,
}

/// What a run starts from: the conversation so far.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInput {
    /// The conversation, its last message the user's.
    pub messages: Vec<Message>,
}

/// How a run ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutput {
    /// The conversation, the run's messages included — its latest
    /// [`MAX_OUTPUT_BYTES`] (as JSON): the earliest messages past that
    /// are left out, and counted in `omitted`.
    pub messages: Vec<Message>,
    /// How many of the conversation's first messages are left out of
    /// `messages` to keep the answer within [`MAX_OUTPUT_BYTES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
    /// Why the run stopped ([`StopReason::as_str`](super::StopReason::as_str)).
    pub stop: String,
    /// The text of the last answer, if it had one.
    pub text: Option<String>,
}

/// The most a run's answer carries of its conversation, as JSON: 16 MiB,
/// half restate-server's default message limit (32 MiB), which an answer
/// must fit — a larger one fails the run, and Restate retries it without
/// end.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024 * 1024;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The most of its conversation a run's last event carries in the events
/// log, as JSON: half a record's bound there.
const MAX_EVENT_MESSAGES: usize = super::run_events::MAX_EVENT_BYTES / 2;

/// The latest of `messages` that fit `max` bytes of JSON, and how many
/// earlier ones are left out.
fn latest(mut messages: Vec<Message>, max: usize) -> (Vec<Message>, usize) {
    let sizes: Vec<usize> = messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |json| json.len() + 1))
        .collect();
    let (mut total, mut keep) = (0usize, 0usize);
    for size in sizes.iter().rev() {
        if total + size > max {
            break;
        }
        total += size;
        keep += 1;
    }
    let omitted = messages.len() - keep;
    (messages.split_off(omitted), omitted)
}

impl<M> RestateRuns<M>
where
    M: ModelService + Sync,
{
    /// The service running `agent`'s runs.
    pub fn new(agent: Agent<M>) -> Self {
        RestateRuns {
            agent,
            approval_timeout: Duration::from_secs(10 * 60),
            max_waiting_runs: 10_000,
            suspend_after: None,
            events: None,
        }
    }

    /// Writes each run's events to `log`, where a front end in any
    /// process streams them (a Redis log for a deployment of many
    /// processes): the model's deltas as they come, each tool's items,
    /// the approvals asked and decided, the loop's own events — each
    /// once, though Restate replays a run after a crash or a suspension.
    /// Without a log, a run's events stay in its handler.
    pub fn events(mut self, log: impl RunEvents) -> Self {
        self.events = Some(Arc::new(log));
        self
    }

    /// How long a call waits for a person's answer before it is denied
    /// (the model reads that nobody answered in time): 10 minutes unless
    /// set. The wait is a durable timer: it survives restarts.
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// How many runs may wait for a person at once, across every process
    /// of the deployment: 10,000 unless set. A call asked about when the
    /// count is full is denied before anyone is asked.
    pub fn max_waiting_runs(mut self, max: usize) -> Self {
        self.max_waiting_runs = max;
        self
    }

    /// How long a run (or a tool call) may wait on Restate — for a
    /// person, or for its calls — before its invocation is suspended,
    /// freeing the process; Restate's own default (a minute) unless set.
    /// A run suspended is replayed from its journal when it goes on.
    pub fn suspend_after(mut self, inactivity: Duration) -> Self {
        self.suspend_after = Some(inactivity);
        self
    }

    /// An endpoint serving these runs, their tool calls and the count of
    /// runs waiting (and nothing else): what [`serve`](Self::serve)
    /// serves, or mount it in your own HTTP/2 server with
    /// [`Endpoint::handle`].
    pub fn endpoint(self) -> Endpoint {
        let options = || {
            let options = ServiceOptions::new();
            match self.suspend_after {
                Some(inactivity) => options.inactivity_timeout(inactivity),
                None => options,
            }
        };
        let calls = ToolCalls {
            toolbox: self.agent.toolbox.clone(),
            events: self.events.clone(),
            approval_timeout: self.approval_timeout,
            max_waiting_runs: u64::try_from(self.max_waiting_runs).unwrap_or(u64::MAX),
        };
        let runs = options();
        let calls = calls.into_service_definition().options(options());
        Endpoint::builder()
            .bind(self.into_service_definition().options(runs))
            .bind(calls)
            .bind(Waiting)
            .build()
    }

    /// Serves the runs on `listener` (HTTP/2, as restate-server calls
    /// its services) until the returned future is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) {
        HttpServer::new(self.endpoint())
            .serve_with_cancel(listener, std::future::pending::<()>())
            .await
    }
}

/// A listener for [`RestateRuns::serve`] on `addr`, its connections
/// with `TCP_NODELAY`: without it each invocation's first step waits
/// ~40 ms for Nagle's algorithm.
pub fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // Accepted connections inherit it (Linux, macOS).
    socket.set_nodelay(true)?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

// The handler, in a module of its own: the macro adds clients whose
// methods it does not document.
#[allow(missing_docs, unreachable_pub)]
mod workflow {
    use super::*;

    // Restate reserves names that begin with "restate".
    #[restate_sdk::workflow(name = "AgentRuns")]
    impl<M> RestateRuns<M>
    where
        M: ModelService + Sync,
    {
        /// The whole run, keyed by its id: the agent's loop, its model turns
        /// and tool calls journaled steps.
        #[handler]
        async fn run(
            &self,
            ctx: WorkflowContext<'_>,
            input: Json<RunInput>,
        ) -> Result<Json<RunOutput>, HandlerError> {
            let RunInput { messages } = input.into_inner();
            let run_id: Arc<str> = Arc::from(ctx.key());
            let journal = RunJournal::fresh(run_id, messages, self.agent.durability.clone());
            let (queue, requests) = Queue::new(ctx.key(), self.events.clone());
            let stream = Run::start_on(
                self.agent.clone(),
                journal,
                Extensions::new(),
                None,
                Steps::Restate(queue),
            );
            let (events, run) = (self.events.clone(), ctx.key().to_owned());
            let done = drive(&ctx, requests, async move {
                let mut stream = stream;
                // The loop's events, to the log: the same on every
                // execution, so a replay's are kept once.
                let mut writers: HashMap<String, Writer> = HashMap::new();
                let mut calls = HashMap::new();
                while let Some(event) = stream.next().await {
                    if let Some(log) = &events {
                        let part = part_of(&event, &mut calls);
                        // The end's conversation, as much as a record of
                        // the log holds (a front end reads its counts).
                        let trimmed = match &event {
                            AgentEvent::Done(done) => {
                                let mut done = done.clone();
                                done.messages = latest(done.messages, MAX_EVENT_MESSAGES).0;
                                Some(AgentEvent::Done(done))
                            }
                            _ => None,
                        };
                        let event = trimmed.as_ref().unwrap_or(&event);
                        let writer = writers
                            .entry(part)
                            .or_insert_with_key(|part| Writer::replayed(log, &run, part.clone()));
                        writer.write(event).await;
                        if matches!(event, AgentEvent::Done(_)) {
                            if let Err(err) = log.end(&run).await {
                                tracing::warn!(run_id = %run, error = %err, "a run's events were not marked ended");
                            }
                        }
                    }
                    if let AgentEvent::Done(done) = event {
                        return Some(done);
                    }
                }
                None
            })
            .await;
            let Some(done) = done else {
                return Err(TerminalError::new("the run ended without its final event").into());
            };
            let text = match done.messages.last() {
                Some(Message::Assistant { content, .. }) => content.clone(),
                _ => None,
            };
            let (messages, omitted) = latest(done.messages, MAX_OUTPUT_BYTES);
            Ok(Json(RunOutput {
                stop: done.stop.as_str().to_owned(),
                messages,
                omitted,
                text,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_keeps_the_latest_messages_that_fit() {
        let big = "x".repeat(MAX_OUTPUT_BYTES / 3);
        let messages: Vec<Message> = (0..5).map(|_| Message::user(big.clone())).collect();
        let (kept, omitted) = latest(messages, MAX_OUTPUT_BYTES);
        assert_eq!((kept.len(), omitted), (2, 3));
        let small = vec![Message::user("hi"), Message::user("there")];
        assert_eq!(latest(small.clone(), MAX_OUTPUT_BYTES), (small, 0));
    }
}
