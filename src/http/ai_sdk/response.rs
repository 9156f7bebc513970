//! The response: a run's agent events mapped to UI message stream chunks
//! ([`OpenResponse`], driving a [`LiveRun`]), and a run that can only wait
//! for a person suspended in the store.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::sse::Event;
use futures_core::Stream;
use futures_util::{stream, StreamExt};
use serde_json::json;

use crate::agent::store::RunStore;
use crate::agent::{AgentEvent, AgentStream, RideOut};

use super::approvals::Approvals;
use super::capacity::room;
use super::mapper::ChunkMapper;
use super::outgoing::Outgoing;

/// A run in progress, between responses when it waits: its events, what
/// the mapping has said, its approvals.
pub(super) struct LiveRun {
    pub(super) events: AgentStream,
    pub(super) map: ChunkMapper,
    pub(super) approvals: Arc<Approvals>,
}

impl LiveRun {
    pub(super) fn new(events: AgentStream, approvals: Arc<Approvals>) -> Self {
        LiveRun {
            events,
            map: ChunkMapper::default(),
            approvals,
        }
    }
}

/// The data of the last event of a response.
pub(super) const DONE: &str = "[DONE]";

/// One response's stream.
pub(super) struct OpenResponse {
    pub(super) live: Option<LiveRun>,
    pub(super) out: VecDeque<Outgoing>,
    /// The calls of an [`AgentEvent::AwaitingApproval`] not followed by
    /// another event: once the caller's approver is asked about all of
    /// them, the run is kept and the response ends.
    pub(super) stalled: Option<Vec<String>>,
    pub(super) store: Arc<dyn RunStore>,
    pub(super) max_waiting_runs: usize,
    pub(super) approval_timeout: Duration,
    /// How the store's calls ride out an outage: as the agent's runs do.
    pub(super) ride_out: RideOut,
    /// Whether the store had room for this run to wait, once asked (before
    /// the person is first asked): a run counts once.
    pub(super) room: Option<Result<(), String>>,
}

/// What an open response wakes to: the run's next event (none when it
/// ended), or every call the run waits on put to the person.
pub(super) enum NextEvent {
    Event(Option<AgentEvent>),
    AllAsked,
}

impl OpenResponse {
    pub(super) fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        stream::unfold(self, |mut open| async move {
            let payload = open.next_payload().await?;
            Some((Ok(Event::default().data(payload)), open))
        })
    }

    /// The next event's data: a chunk's JSON, or `[DONE]` last.
    pub(super) async fn next_payload(&mut self) -> Option<String> {
        Some(match self.next().await? {
            Outgoing::Chunk(chunk) => chunk.to_string(),
            Outgoing::Written(chunk) => chunk,
            Outgoing::Done => DONE.to_owned(),
        })
    }

    pub(super) async fn next(&mut self) -> Option<Outgoing> {
        loop {
            if let Some(out) = self.out.pop_front() {
                return Some(out);
            }
            let live = self.live.as_mut()?;
            let stalled = self.stalled.as_deref();
            let step = std::future::poll_fn(|cx: &mut Context<'_>| {
                if let Some(calls) = stalled {
                    if live.approvals.all_asked(calls, cx.waker()) {
                        return Poll::Ready(NextEvent::AllAsked);
                    }
                }
                live.events.poll_next_unpin(cx).map(NextEvent::Event)
            })
            .await;
            match step {
                NextEvent::AllAsked => self.park().await,
                NextEvent::Event(Some(AgentEvent::AwaitingApproval { call_ids })) => {
                    self.stalled = Some(call_ids);
                }
                NextEvent::Event(Some(AgentEvent::ApprovalRequested {
                    call_id,
                    name,
                    arguments,
                    automatic: false,
                    reason,
                })) => {
                    // Room for the run to wait is found before the person
                    // sees an Approve button; without it, the call is
                    // denied here, and shown as decided. (A call the
                    // layer's own approver decides needs no room.)
                    let to_the_person = live.approvals.was_asked(&call_id);
                    let room = match to_the_person {
                        true => self.room().await,
                        false => Ok(()),
                    };
                    let (automatic, reason) = match room {
                        Ok(()) => (false, reason),
                        Err(why) => (true, Some(why)),
                    };
                    let Some(live) = self.live.as_mut() else {
                        continue;
                    };
                    if automatic {
                        live.approvals
                            .refuse(&call_id, reason.as_deref().unwrap_or_default());
                    }
                    self.stalled = None;
                    let event = AgentEvent::ApprovalRequested {
                        call_id,
                        name,
                        arguments,
                        automatic,
                        reason,
                    };
                    let approvals = Arc::clone(&live.approvals);
                    live.map.event(event, &approvals, &mut self.out);
                }
                NextEvent::Event(Some(event)) => {
                    self.stalled = None;
                    let done = matches!(event, AgentEvent::Done(_));
                    let approvals = Arc::clone(&live.approvals);
                    live.map.event(event, &approvals, &mut self.out);
                    if done {
                        self.live = None;
                        self.out.push_back(Outgoing::Done);
                    }
                }
                // The agent's stream always ends with `Done`; this is only
                // defence.
                NextEvent::Event(None) => {
                    live.map.finish_step(&mut self.out);
                    self.out.push_back(Outgoing::Chunk(
                        json!({"type": "finish", "finishReason": "other"}),
                    ));
                    self.out.push_back(Outgoing::Done);
                    self.live = None;
                }
            }
        }
    }

    /// Whether the store has room for this run to wait for the person,
    /// asked once per response: runs waited past the approval timeout are
    /// forgotten first, when it is full. Counted in the store, so the
    /// bound holds for every process sharing it; runs asking at the same
    /// moment may pass it by their number.
    async fn room(&mut self) -> Result<(), String> {
        if let Some(room) = &self.room {
            return room.clone();
        }
        let room = room(
            &*self.store,
            self.max_waiting_runs,
            self.approval_timeout,
            self.ride_out,
        );
        let room = match room.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "not run: the server holds too many conversations waiting for approval \
                 ({} at most); ask again later",
                self.max_waiting_runs
            )),
            Err(err) => Err(format!(
                "not run: the server cannot keep this conversation for an approval now ({err})"
            )),
        };
        self.room = Some(room.clone());
        room
    }

    /// The run waits on the person: suspend it in the store and end the
    /// response.
    pub(super) async fn park(&mut self) {
        let calls = self.stalled.take().unwrap_or_default();
        // Asked of the person after their request was shown (rare: the
        // event stream ran ahead of the approver): room is found now, or
        // the calls are denied and the run goes on.
        if self.room.is_none() {
            if let Err(why) = self.room().await {
                if let Some(live) = &self.live {
                    for call in &calls {
                        live.approvals.refuse(call, &why);
                    }
                }
                return;
            }
        }
        let Some(mut live) = self.live.take() else {
            return;
        };
        live.map.finish_step(&mut self.out);
        match live.events.suspend().await {
            Ok(()) => self.out.push_back(Outgoing::Chunk(
                json!({"type": "finish", "finishReason": "tool-calls"}),
            )),
            Err(err) => {
                // A store that did not answer says, once, that the message
                // can be sent again once it is back.
                let text = format!("the conversation could not be kept for the approval: {err}");
                self.out
                    .push_back(Outgoing::Chunk(json!({"type": "error", "errorText": text})));
                self.out.push_back(Outgoing::Chunk(
                    json!({"type": "finish", "finishReason": "error"}),
                ));
            }
        }
        self.out.push_back(Outgoing::Done);
    }
}
