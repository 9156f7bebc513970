//! The endpoint's runs on Restate ([`ChatEndpoint::restate`]): a chat
//! request starts a run through restate-server's ingress, and the
//! response streams the run's events from its events log
//! ([`agent::run_events`](crate::agent::run_events)), mapped to chunks as
//! a run in this process is. The answers to approval requests go to the
//! calls' workflows through the ingress (durably: Restate keeps an answer
//! until a service process takes it), and the next response goes on from
//! where the last one ended, in the same assistant message.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use crate::agent::run_events::{Cursor, RunEvents, RunEventsError};
use crate::agent::AgentEvent;
use crate::approval::{DecidedBy, Decision};
use crate::model::Message;

use super::approvals::{parse_approval_id, Approvals};
use super::ids::{new_id, new_token};
use super::mapper::ChunkMapper;
use super::outgoing::Outgoing;
use super::refusal::{bad_request, refused};
use super::request::{ApprovalAnswer, ChatBody};
use super::response::DONE;
use super::{ChatEndpoint, THE_USER};

/// Where an endpoint's runs on Restate are started and answered — the
/// ingress of restate-server, where `RestateRuns` is registered — and
/// where their events are read: the log the runs write to
/// (`RestateRuns::events`).
#[derive(Clone)]
pub struct RestateIngress {
    url: String,
    events: Arc<dyn RunEvents>,
    client: reqwest::Client,
}

impl std::fmt::Debug for RestateIngress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestateIngress")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// How long one read of the events log waits for the next event.
const READ_WAIT: Duration = Duration::from_secs(1);
/// How many events one read takes.
const READ_MAX: usize = 256;

impl RestateIngress {
    /// restate-server's ingress at `url` (`http://localhost:8080`), the
    /// runs' events in `events`.
    pub fn new(url: impl Into<String>, events: impl RunEvents) -> Self {
        RestateIngress {
            url: url.into().trim_end_matches('/').to_owned(),
            events: Arc::new(events),
            client: reqwest::Client::new(),
        }
    }

    /// `POST {ingress}{path}` with `body`, sent (Restate answers `202` once
    /// it has the invocation durably).
    async fn send(&self, path: &str, body: serde_json::Value) -> Result<(), String> {
        let url = format!("{}{path}", self.url);
        let response = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|err| format!("restate-server's ingress did not answer ({err})"))?;
        let status = response.status();
        match status.is_success() {
            true => Ok(()),
            false => {
                let text = response.text().await.unwrap_or_default();
                let text: String = text.chars().take(512).collect();
                Err(format!(
                    "restate-server's ingress answered {status}: {text}"
                ))
            }
        }
    }

    /// Starts run `run_id` of `messages`.
    async fn start(&self, run_id: &str, messages: &[Message]) -> Result<(), String> {
        let path = format!("/AgentRuns/{run_id}/run/send");
        self.send(&path, json!({ "messages": messages })).await
    }

    /// Answers the call whose approval id is `key`.
    async fn decide(&self, key: &str, decision: Decision) -> Result<(), String> {
        let path = format!("/AgentToolCalls/{}/decide/send", encode(key));
        let by = DecidedBy::caller(THE_USER);
        self.send(&path, json!({ "decision": decision, "by": by }))
            .await
    }
}

/// `key` as one path segment.
fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

impl<M> ChatEndpoint<M>
where
    M: crate::model::ModelService + Sync,
{
    /// The response to one chat request on Restate: the answers it brings
    /// sent to their calls, and the run's stream from where the last
    /// response ended; else a new run of the conversation.
    pub(super) async fn respond_on_restate(
        &self,
        restate: &RestateIngress,
        request: ChatBody,
    ) -> Response {
        let answers = request.approval_answers();
        let run = answers
            .iter()
            .find_map(|answer| parse_approval_id(&answer.approval_id))
            .map(|(run_id, _)| run_id.to_owned());
        let response = match run {
            Some(run_id) => match self.answer_on_restate(restate, &run_id, &answers).await {
                Ok(Some(mut response)) => {
                    response.map.announced(request.last_assistant_calls());
                    let id = request.last_assistant_id().map(str::to_owned);
                    response.start(id.unwrap_or_else(|| new_id("msg")));
                    Some(response)
                }
                Ok(None) => None,
                Err(refusal) => return refusal,
            },
            None => None,
        };
        let response = match response {
            Some(response) => response,
            None => {
                let history = match request.history() {
                    Ok(history) => history,
                    Err(why) => return bad_request(why),
                };
                let run_id = new_token();
                if let Err(why) = restate.start(&run_id, &history).await {
                    return refused(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why);
                }
                let mut response = RestateResponse::new(restate, run_id, self.keys.clone());
                response.start(new_id("msg"));
                response
            }
        };
        let mut response = response;
        response.map.typed = self.agent.output_schema().is_some();
        let chat_id = request
            .id
            .filter(|id| !id.is_empty() && id.len() <= super::MAX_CHAT_ID_BYTES);
        match (&self.log, chat_id) {
            (Some(log), Some(chat_id)) => {
                let ride_out = self.agent.store_ride_out();
                let live =
                    super::resume::produce(response, Arc::clone(log), chat_id, ride_out).await;
                self.sse(live)
            }
            _ => self.sse(super::resume::payloads(response)),
        }
    }

    /// Sends `answers` to the calls of run `run_id` that wait for them
    /// (a waiting call left unanswered is denied), and the response that
    /// goes on from where the run's last one ended — also for answers sent
    /// again after their decision was taken (a lost reply): the first
    /// decision binds. `None` when the run's events are not kept (never,
    /// or expired): the conversation then starts a new run.
    async fn answer_on_restate(
        &self,
        restate: &RestateIngress,
        run_id: &str,
        answers: &[ApprovalAnswer],
    ) -> Result<Option<RestateResponse>, Response> {
        let unavailable = |err: RunEventsError| {
            refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the run's events could not be read ({err}); send the answer again"),
            )
        };
        // Where the run stands: its calls that wait, and where the last
        // response ended (after the last request it showed).
        let mut scan = Scan::default();
        let mut after: Option<Cursor> = None;
        loop {
            let page = restate
                .events
                .read(run_id, after.as_ref(), READ_MAX, Duration::ZERO)
                .await
                .map_err(unavailable)?;
            let last = page.events.len() < READ_MAX;
            for (cursor, record) in page.events {
                scan.see(&record.into_event(), &cursor);
                after = Some(cursor);
            }
            if last || page.ended {
                break;
            }
        }
        if scan.done {
            let why = format!("the run {run_id} has ended; its answers can no longer change it");
            return Err(refused(StatusCode::CONFLICT, "ended", why));
        }
        if !scan.kept {
            return Ok(None);
        }
        let mut decisions: HashMap<String, Decision> = HashMap::new();
        for answer in answers {
            let Some((answer_run, call)) = parse_approval_id(&answer.approval_id) else {
                continue;
            };
            if answer_run != run_id {
                continue;
            }
            let decision = match answer {
                ApprovalAnswer { approved: true, .. } => Decision::Allow,
                ApprovalAnswer {
                    reason: Some(reason),
                    ..
                } if !reason.trim().is_empty() => Decision::deny(reason.clone()),
                _ => Decision::deny("the user denied the call"),
            };
            decisions.insert(call.to_owned(), decision);
        }
        let waiting: Vec<String> = scan.waiting.iter().cloned().collect();
        for call in &waiting {
            let decision = decisions
                .remove(call)
                .unwrap_or_else(|| Decision::deny("the user gave no answer"));
            let key = format!("{run_id}:{call}");
            if let Err(why) = restate.decide(&key, decision).await {
                return Err(refused(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why));
            }
        }
        let mut response = RestateResponse::new(restate, run_id.to_owned(), self.keys.clone());
        response.after = scan.shown;
        // The calls asked about are the step's, without their results yet
        // (an answer sent again finds them decided already: the decision
        // that binds is the first, and the response goes on the same).
        response.open = scan.unfinished.into_iter().collect();
        response.seen = scan.calls;
        Ok(Some(response))
    }
}

/// What a run's events say of where it stands.
#[derive(Default)]
struct Scan {
    /// The log keeps the run's events.
    kept: bool,
    /// The calls the person was asked about and that wait for them.
    waiting: HashSet<String>,
    /// The calls the person was asked about that have no result yet.
    unfinished: HashSet<String>,
    /// The calls the run has made.
    calls: HashSet<String>,
    /// Where the last response ended: after the last request shown.
    shown: Option<Cursor>,
    /// The run has ended.
    done: bool,
}

impl Scan {
    fn see(&mut self, event: &AgentEvent, at: &Cursor) {
        self.kept = true;
        match event {
            AgentEvent::ToolCall(call) => {
                self.calls.insert(call.id.clone());
            }
            AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } => {
                self.waiting.insert(call_id.clone());
                self.unfinished.insert(call_id.clone());
                self.shown = Some(at.clone());
            }
            AgentEvent::ApprovalDecided { call_id, .. } => {
                self.waiting.remove(call_id);
            }
            AgentEvent::ToolResult { call_id, .. } => {
                self.waiting.remove(call_id);
                self.unfinished.remove(call_id);
            }
            AgentEvent::Done(_) => self.done = true,
            _ => {}
        }
    }
}

/// One response of a run on Restate: its events read from the log on
/// from `after`, mapped to chunks. It ends with the run, or when every
/// call of the step without a result waits for the person.
pub(super) struct RestateResponse {
    events: Arc<dyn RunEvents>,
    run_id: String,
    after: Option<Cursor>,
    pub(super) map: ChunkMapper,
    approvals: Arc<Approvals>,
    out: VecDeque<Outgoing>,
    /// The step's calls without a result, in call order.
    open: Vec<String>,
    /// Of those, the ones the person is asked about.
    asked: HashSet<String>,
    /// The calls made so far (a call's own events wait for its `ToolCall`:
    /// the call's workflow may write them before the run does).
    seen: HashSet<String>,
    held: HashMap<String, Vec<AgentEvent>>,
    ended: bool,
}

impl super::resume::Payloads for RestateResponse {
    fn next_payload(&mut self) -> impl std::future::Future<Output = Option<String>> + Send {
        RestateResponse::next_payload(self)
    }
}

impl RestateResponse {
    fn new(
        restate: &RestateIngress,
        run_id: String,
        keys: Option<Arc<crate::approval::ApprovalKeys>>,
    ) -> Self {
        let approvals = Arc::new(Approvals::new(keys));
        let _ = approvals.run_id.set(run_id.clone());
        RestateResponse {
            events: Arc::clone(&restate.events),
            run_id,
            after: None,
            map: ChunkMapper::default(),
            approvals,
            out: VecDeque::new(),
            open: Vec::new(),
            asked: HashSet::new(),
            seen: HashSet::new(),
            held: HashMap::new(),
            ended: false,
        }
    }

    fn start(&mut self, message_id: String) {
        self.out.push_back(Outgoing::Chunk(
            json!({"type": "start", "messageId": message_id}),
        ));
    }

    /// The next event's data: a chunk's JSON, or `[DONE]` last.
    pub(super) async fn next_payload(&mut self) -> Option<String> {
        loop {
            if let Some(out) = self.out.pop_front() {
                return Some(match out {
                    Outgoing::Chunk(chunk) => chunk.to_string(),
                    Outgoing::Written(chunk) => chunk,
                    Outgoing::Done => DONE.to_owned(),
                });
            }
            if self.ended {
                return None;
            }
            let page = self
                .events
                .read(&self.run_id, self.after.as_ref(), READ_MAX, READ_WAIT)
                .await;
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    let text = format!(
                        "the run's events could not be read ({err}); it goes on: reload the chat to see it"
                    );
                    self.map.finish_step(&mut self.out);
                    self.out
                        .push_back(Outgoing::Chunk(json!({"type": "error", "errorText": text})));
                    self.end("error");
                    continue;
                }
            };
            for (cursor, record) in page.events {
                self.after = Some(cursor);
                if !self.ended {
                    self.event(record.into_event());
                }
            }
            if page.ended && !self.ended {
                // The run's events end with its `Done`; this is defence.
                self.map.finish_step(&mut self.out);
                self.end("other");
            }
        }
    }

    /// Ends the response with `reason`.
    fn end(&mut self, reason: &str) {
        self.out.push_back(Outgoing::Chunk(
            json!({"type": "finish", "finishReason": reason}),
        ));
        self.out.push_back(Outgoing::Done);
        self.ended = true;
    }

    fn event(&mut self, event: AgentEvent) {
        let call = match &event {
            AgentEvent::ToolOutput { call_id, .. }
            | AgentEvent::Progress { call_id, .. }
            | AgentEvent::ApprovalRequested { call_id, .. }
            | AgentEvent::ApprovalDecided { call_id, .. }
            | AgentEvent::ToolResult { call_id, .. }
            | AgentEvent::ToolsLoaded { call_id, .. } => Some(call_id.clone()),
            _ => None,
        };
        if let Some(call) = call.filter(|call| !self.seen.contains(call)) {
            self.held.entry(call).or_default().push(event);
            return;
        }
        match &event {
            AgentEvent::ToolCall(made) => {
                self.seen.insert(made.id.clone());
                self.open.push(made.id.clone());
            }
            AgentEvent::ApprovalRequested {
                call_id,
                automatic: false,
                ..
            } => {
                self.asked.insert(call_id.clone());
            }
            AgentEvent::ApprovalDecided { call_id, .. } => {
                self.asked.remove(call_id);
            }
            AgentEvent::ToolResult { call_id, .. } => {
                self.open.retain(|open| open != call_id);
                self.asked.remove(call_id);
            }
            _ => {}
        }
        let held = match &event {
            AgentEvent::ToolCall(made) => self.held.remove(&made.id).unwrap_or_default(),
            _ => Vec::new(),
        };
        let done = matches!(event, AgentEvent::Done(_));
        self.map.event(event, &self.approvals, &mut self.out);
        if done {
            self.out.push_back(Outgoing::Done);
            self.ended = true;
            return;
        }
        for event in held {
            self.event(event);
        }
        // Every call of the step without its result waits for the
        // person: the run waits (suspended, on Restate), and the response
        // ends here.
        if !self.ended && !self.open.is_empty() && self.open.iter().all(|c| self.asked.contains(c))
        {
            self.map.finish_step(&mut self.out);
            self.end("tool-calls");
        }
    }
}
